"""Claims in words: each relation's margin is paired by seed, each verdict follows from the
margin against the seed spread, and a bad claim is refused naming the claim, key and value."""

import math
import statistics

import pandas as pd
import pytest

from fednorm.claims.words import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NOT_RUN,
    WORDS_COLUMNS,
    Words,
    check_plan,
    family_bar,
    parse_words,
    unit_verdict,
    words_ledger,
    write_words,
)
from fednorm.config import ConfigError, run_config
from fednorm.plan import load_plan
from fednorm.summarize import config_columns

TINY = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
        "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
        "partition": "gamma", "heterogeneity": 0, "gn_groups": 2}


def _summary(runs, experiment="e"):
    """A summary: ``runs`` is a list of (run keys, final test accuracy in %, status[, the
    accuracy at the first point]); each run has two evaluation points, at half and all of its
    budget, the first equal to the final unless given (a run that has settled)."""
    rows = []
    for keys, accuracy, status, *before in runs:
        cfg = run_config({**TINY, **keys})
        for step, value in ((10, before[0] if before else accuracy), (20, accuracy)):
            rows.append({**config_columns(cfg), "run_id": cfg.run_id, "figure_group": experiment,
                         "step": step, "test_accuracy": value / 100, "status": status})
    return pd.DataFrame(rows)


def _pairs(a, b, values_a, values_b, **status):
    """Runs of groups ``a`` and ``b`` (run keys), seed i with values_a[i], values_b[i]."""
    runs = [({**a, "seed": s}, v, status.get(f"a{s}", "ok")) for s, v in enumerate(values_a)]
    runs += [({**b, "seed": s}, v, status.get(f"b{s}", "ok")) for s, v in enumerate(values_b)]
    return runs


def _claim(**more):
    return {"id": "c", "paper": "fbn", "source": "§4", "words": "FBN beats BN.",
            "experiment": "e", "relation": "greater", "a": {"normalizer": "fbn"},
            "b": {"normalizer": "bn"}, **more}


def _bare():
    """A claim without its groups."""
    return {k: v for k, v in _claim().items() if k not in ("a", "b")}


def _judge(runs, floor=5.0, least=0.0, **claim):
    words = parse_words({"claims": [_claim(**claim)], "single_seed_spread": floor,
                         "min_spread": least})
    return words_ledger(words, _summary(runs)).iloc[0]


FBN, BN = {"normalizer": "fbn"}, {"normalizer": "bn"}


def test_margins_are_paired_by_seed():
    """Each group alone spreads 20 points over seeds; the paired margin is 5 at every seed."""
    row = _judge(_pairs(FBN, BN, [50, 70, 90], [45, 65, 85]))
    assert (row.verdict, row.n_seeds) == (HOLDS, 3)
    assert row.margin == pytest.approx(5) and row.spread == pytest.approx(0, abs=1e-9)
    assert row.ours == "normalizer=fbn: 70.0; normalizer=bn: 65.0"


def test_each_verdict_of_a_sign_relation():
    margins = [3.0, 5.0, 4.0]
    row = _judge(_pairs(FBN, BN, [53, 55, 54], [50, 50, 50]))
    assert row.verdict == HOLDS
    assert row.margin == pytest.approx(statistics.mean(margins))
    assert row.spread == pytest.approx(statistics.stdev(margins))
    assert _judge(_pairs(FBN, BN, [40, 41, 42], [50, 50, 50])).verdict == CONTRADICTED
    # within the noise: mean 2 < spread 2.65, seeds disagree
    assert _judge(_pairs(FBN, BN, [55, 49, 52], [50, 50, 50])).verdict == INCONCLUSIVE
    # every seed positive, but the mean (1.33) is within the spread (1.53)
    assert _judge(_pairs(FBN, BN, [50.5, 50.5, 53], [50, 50, 50])).verdict == INCONCLUSIVE
    assert _judge(_pairs(FBN, BN, [50, 50], [60, 60]), b={"normalizer": "gn"}).verdict == NOT_RUN


def test_a_single_seed_uses_the_floor_and_says_so():
    row = _judge(_pairs(FBN, BN, [58], [50]), floor=5)
    assert (row.verdict, row.spread, row.n_seeds) == (HOLDS, 5, 1)
    assert "1 seed (spread: the 5-point floor)" in row.detail
    assert _judge(_pairs(FBN, BN, [54], [50]), floor=5).verdict == INCONCLUSIVE


def test_a_sign_takes_its_spread_at_least_min_spread():
    """Two seeds' std is often far below the true spread (a quarter of the time under 0.3 of
    it): with min_spread the mean margin must clear that many points, and the detail says so."""
    close = _pairs(FBN, BN, [53.0, 53.2], [50, 50])  # +3.1 ± 0.14
    assert _judge(close).verdict == HOLDS
    row = _judge(close, least=5)
    assert (row.verdict, row.spread) == (INCONCLUSIVE, 5)
    assert "2 seeds (spread: at least 5 points)" in row.detail
    assert _judge(_pairs(FBN, BN, [44, 43.5], [50, 50]), least=5).verdict == CONTRADICTED
    wide = _judge(_pairs(FBN, BN, [60, 70], [50, 50]), least=5)  # +15 ± 7.1: its own spread
    assert (wide.verdict, wide.spread) == (HOLDS, pytest.approx(statistics.stdev([10, 20])))
    assert "at least" not in wide.detail
    # a near-equality keeps its seeds' spread: |m̄| + σ ≤ δ stays reachable for δ < min_spread
    assert _judge(close, least=5, relation="within", delta=4).verdict == HOLDS
    assert unit_verdict([3.0, 3.2], 0, 0, least=5)[0] == INCONCLUSIVE
    assert unit_verdict([3.0, 3.2], 0, 0)[0] == HOLDS


def test_a_near_equality_is_contradicted_only_beyond_delta_plus_a_signs_least_spread():
    """A gap beyond δ is a sign: where |m̄| > δ, σ is taken at least min_spread, so that
    two seeds that happen to agree (std 0.5) cannot contradict a near-equality that other
    seeds confirm (GN's gap to central BN at E = 1, fixbn-s4-gn-no-gap-to-central-E1:
    contradicted on seeds 0, 2, holding on others, before this floor)."""
    gap = [7.0, 7.7]  # +7.35 ± 0.49: beyond δ = 3 by 9 of its own spreads, by 0.87 of 5
    assert unit_verdict(gap, 0, 0, delta=3)[0] == CONTRADICTED
    assert unit_verdict(gap, 0, 0, delta=3, least=5) == (INCONCLUSIVE, pytest.approx(7.35), 5.0)
    row = _judge(_pairs(FBN, BN, [57, 57.7], [50, 50]), least=5, relation="within", delta=3)
    assert (row.verdict, row.spread) == (INCONCLUSIVE, 5)  # the row says why: ± 5
    assert "2 seeds (spread: at least 5 points): inconclusive" in row.detail
    far = unit_verdict([9.0, 9.6], 0, 0, delta=3, least=5)  # 9.3 − 5 > 3
    assert far == (CONTRADICTED, pytest.approx(9.3), 5.0)
    row = _judge(_pairs(FBN, BN, [59, 58.5], [50, 50]), least=5, relation="within", delta=3)
    assert (row.verdict, row.spread) == (CONTRADICTED, 5)
    assert "2 seeds (spread: at least 5 points)" in row.detail
    # within δ, the seeds' own spread (a floor of 5 would make every δ < 5 unreachable)
    assert unit_verdict([1.0, 1.5], 0, 0, delta=3, least=5) == (
        HOLDS, 1.25, pytest.approx(statistics.stdev([1.0, 1.5])))
    assert unit_verdict([2.0, 3.0], 0, 0, delta=3, least=5)[1:] == (
        2.5, pytest.approx(statistics.stdev([2.0, 3.0])))  # inconclusive, its own spread


def test_a_diverged_run_of_one_seed_alone_decides_nothing():
    """A run may diverge on some seeds only (FBN under an undefended sign flip: 2 of 5 quick
    seeds): one diverged run and no margin is one draw, inconclusive; two, a verdict."""
    one = _judge(_pairs(FBN, BN, [math.nan], [50], a0="diverged"))
    assert (one.verdict, one.n_diverged) == (INCONCLUSIVE, 1)
    assert _judge(_pairs(FBN, BN, [50], [math.nan], b0="diverged")).verdict == INCONCLUSIVE
    assert unit_verdict([], 0, 1)[0] == INCONCLUSIVE
    assert unit_verdict([], 1, 0)[0] == INCONCLUSIVE
    assert unit_verdict([], 2, 0)[0] == HOLDS
    assert unit_verdict([], 1, 1)[0] == INCONCLUSIVE
    # a claims file may let one diverged run decide (diverged_seeds: 1, the tiny DAG's)
    assert unit_verdict([], 0, 1, diverged_seeds=1)[0] == CONTRADICTED
    words = parse_words({"claims": [_claim()], "diverged_seeds": 1})
    row = words_ledger(words, _summary(_pairs(FBN, BN, [math.nan], [50], a0="diverged")))
    assert row.iloc[0].verdict == CONTRADICTED


def test_a_diverged_run_of_the_better_side_is_against_the_claim():
    # seed 2 of FBN diverged: the other two seeds' margins are +10, yet the claim cannot hold
    row = _judge(_pairs(FBN, BN, [60, 60, math.nan], [50, 50, 50], a2="diverged"))
    assert (row.verdict, row.n_seeds, row.n_diverged) == (INCONCLUSIVE, 2, 1)
    assert "1 run diverged (1 seed(s) against, 0 for)" in row.detail
    assert "†1" in row.ours
    # all of FBN diverged: contradicted; all of BN diverged: holds
    dead = {"a0": "diverged", "a1": "diverged"}
    assert _judge(_pairs(FBN, BN, [math.nan] * 2, [50, 50], **dead)).verdict == CONTRADICTED
    dead = {"b0": "diverged", "b1": "diverged"}
    assert _judge(_pairs(FBN, BN, [50, 50], [math.nan] * 2, **dead)).verdict == HOLDS
    # a diverged run on the worse side leaves the others to decide, and cannot contradict
    row = _judge(_pairs(FBN, BN, [60, 61, 62], [50, 50, math.nan], b2="diverged"))
    assert (row.verdict, row.n_seeds) == (HOLDS, 2)
    row = _judge(_pairs(FBN, BN, [40, 41, 42], [50, 50, math.nan], b2="diverged"))
    assert row.verdict == INCONCLUSIVE


def test_within_delta():
    near = {"relation": "within", "delta": 3}
    row = _judge(_pairs(FBN, BN, [51, 50, 52], [50, 50, 50]), **near)  # 1 ± 1 <= 3
    assert (row.verdict, row.delta) == (HOLDS, 3)
    assert _judge(_pairs(FBN, BN, [60, 61, 59], [50, 50, 50]), **near).verdict == CONTRADICTED
    assert _judge(_pairs(FBN, BN, [53, 50, 56], [50, 50, 50]), **near).verdict == INCONCLUSIVE
    # a diverged run is a seed against equality
    row = _judge(_pairs(FBN, BN, [50, 50, math.nan], [50, 50, 50], a2="diverged"), **near)
    assert row.verdict == INCONCLUSIVE


def test_unit_verdict_rule():
    assert unit_verdict([2.0, 2.0], 0, 0)[0] == HOLDS
    assert unit_verdict([2.0, 2.0], 0, 1)[0] == INCONCLUSIVE
    assert unit_verdict([-1.0, -2.0, -3.0], 1, 0)[0] == INCONCLUSIVE  # a seed for it
    assert unit_verdict([-1.0, -2.0, -3.0], 0, 0)[0] == CONTRADICTED
    assert unit_verdict([-1.0, -1.5], 0, 0, slack=2)[0] == HOLDS  # a > b - 2
    assert unit_verdict([4.0], 0, 0, floor=5)[1:] == (4.0, 5.0)
    assert unit_verdict([], 0, 2)[0] == CONTRADICTED


def test_the_family_bar_keeps_a_claims_chance_of_a_false_contradiction():
    """Bonferroni, checked against its definition: k units, each contradicting a true margin
    of zero at the bar's chance, contradict the claim at most as often as one unit at σ."""
    alpha = statistics.NormalDist().cdf(-math.sqrt(2))  # two seeds: m̄ < −σ, m̄ ~ N(0, σ²/2)
    assert family_bar(1) == 1.0
    bars = [family_bar(k) for k in range(1, 12)]
    assert bars == sorted(bars) and len(set(bars)) == len(bars)
    for k in (2, 3, 10):
        chance = statistics.NormalDist().cdf(-math.sqrt(2) * family_bar(k))
        assert k * chance == pytest.approx(alpha)
    assert unit_verdict([-6.0, -6.0], 0, 0, least=5)[0] == CONTRADICTED
    assert unit_verdict([-6.0, -6.0], 0, 0, least=5, bar=1.37)[0] == INCONCLUSIVE
    assert unit_verdict([-7.0, -7.0], 0, 0, least=5, bar=1.37)[0] == CONTRADICTED
    # within: |m̄| − bar·σ > δ
    assert unit_verdict([6.0, 8.0], 0, 0, delta=3)[0] == CONTRADICTED  # 7 − 1.41 > 3
    assert unit_verdict([6.0, 8.0], 0, 0, delta=3, bar=3)[0] == INCONCLUSIVE  # 7 − 4.24


def test_family_wise_raises_the_bar_of_a_contradiction_by_the_claims_units():
    """One unit of ten contradicting alone by −6 ± 5 does not contradict the claim when the
    bar is family-wise (b_10 = 1.71), and the detail says so; the same unit alone, or a unit
    far beyond the bar, still contradicts; holds is unchanged."""
    def runs(hs, first):
        return [({"normalizer": n, "heterogeneity": h, "seed": s}, v, "ok")
                for h in hs for n, vals in (("fbn", (first if h == hs[0] else [70, 71])),
                                            ("bn", [60, 60]))
                for s, v in enumerate(vals)]
    ten = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1]

    def judge(runs, family, **claim):
        words = parse_words({"claims": [_claim(for_each="heterogeneity", **claim)],
                             "min_spread": 5, "family_wise": family})
        return words_ledger(words, _summary(runs)).iloc[0]

    near = runs(ten, [54, 54])  # γ = 0: −6 ± 5 (the least spread); the nine others +10.5 ± 5
    assert judge(near, False).verdict == CONTRADICTED
    row = judge(near, True)
    assert (row.verdict, row.n_units) == (INCONCLUSIVE, 10)
    assert ("heterogeneity=0: -6.0 ± 5.0, 2 seeds (spread: at least 5 points): inconclusive "
            "(contradicted alone; one of 10 units, it must pass 1.71 σ") in row.detail
    assert judge(runs([0], [54, 54]), True).verdict == CONTRADICTED  # one unit: b_1 = 1
    assert judge(runs(ten, [50, 51]), True).verdict == CONTRADICTED  # −9.5 < −8.55
    assert judge(runs(ten, [70, 71]), True).verdict == HOLDS
    with pytest.raises(ConfigError, match=r"qualitative: key 'family_wise' has value 1; "
                                          r"allowed: true or false"):
        parse_words({"claims": [_claim()], "family_wise": 1})
    assert parse_words({"claims": [_claim()]}).noise.family_wise is False


def _e_runs(norm, values_by_e, seeds=(0, 1)):
    return [({"normalizer": norm, "local_steps": e, "steps": 5000, "seed": s}, v[s], "ok")
            for e, v in values_by_e.items() for s in seeds]


def test_a_trend_along_an_axis_by_neighbours_or_ends():
    trend = {**_bare(), "relation": "trend", "over": "local_steps", "direction": "decreasing",
             "where": {"normalizer": "gn"}}
    smooth = _e_runs("gn", {1: [60, 62], 5: [50, 51], 25: [40, 42]})
    row = words_ledger(parse_words({"claims": [trend]}), _summary(smooth)).iloc[0]
    assert (row.verdict, row.n_units) == (HOLDS, 2)
    assert "1 → 5" in row.detail and "5 → 25" in row.detail
    # E = 5 above E = 1: the neighbours contradict the claim, the ends still fall
    bumpy = _e_runs("gn", {1: [60, 62], 5: [70, 71], 25: [40, 42]})
    words = parse_words({"claims": [trend, {**trend, "id": "ends", "steps": "ends"}]})
    table = words_ledger(words, _summary(bumpy))
    assert list(table.verdict) == [CONTRADICTED, HOLDS]
    assert table.n_units.tolist() == [2, 1]
    rising = parse_words({"claims": [{**trend, "direction": "increasing"}]})
    assert words_ledger(rising, _summary(smooth)).verdict[0] == CONTRADICTED


def test_symbolic_max_and_min_are_the_experiments_largest_and_smallest():
    def runs(es):
        return (_e_runs("bn", dict(zip(es, ([50, 50], [52, 53], [70, 71]), strict=True)))
                + _e_runs("gn", dict(zip(es, ([60, 60], [52, 52], [40, 41]), strict=True))))
    bn, gn = {"normalizer": "bn"}, {"normalizer": "gn"}
    for es in ((1, 5, 25), (1, 100, 2500)):
        words = parse_words({"claims": [
            _claim(id="max", a=bn, b=gn, where={"local_steps": "max"}),
            _claim(id="min", a=gn, b=bn, where={"local_steps": "min"})]})
        table = words_ledger(words, _summary(runs(es))).set_index("id")
        assert table.loc["max", "margin"] == pytest.approx(30)  # 70.5 - 40.5
        assert table.loc["min", "margin"] == pytest.approx(10)
        assert set(table.verdict) == {HOLDS}


def test_best_is_above_the_largest_of_the_others_per_seed():
    runs = (_pairs(FBN, BN, [60, 62, 61], [50, 59, 40])
            + [({"normalizer": "gn", "seed": s}, v, "ok") for s, v in enumerate([58, 50, 55])])
    words = parse_words({"claims": [{**_bare(), "relation": "best", "a": FBN,
                                     "others": [BN, {"normalizer": "gn"}]}]})
    row = words_ledger(words, _summary(runs)).iloc[0]
    margins = [60 - 58, 62 - 59, 61 - 55]  # against GN, BN, GN
    assert row.margin == pytest.approx(statistics.mean(margins))
    assert row.spread == pytest.approx(statistics.stdev(margins))
    assert row.verdict == HOLDS  # 3.67 > 2.08, every seed > 0


def test_for_each_holds_only_when_every_value_does():
    runs = [({"normalizer": n, "heterogeneity": h, "seed": s}, v, "ok")
            for h, (fbn, bn) in {0: ([80, 82], [40, 45]), 1: ([90, 91], [89, 91.5])}.items()
            for n, vals in (("fbn", fbn), ("bn", bn)) for s, v in enumerate(vals)]
    row = _judge(runs, for_each="heterogeneity")
    assert (row.verdict, row.n_units) == (INCONCLUSIVE, 2)
    assert "heterogeneity=0: +38.5 ± 2.1, 2 seeds: holds" in row.detail
    assert "heterogeneity=1: +0.2 ± 1.1, 2 seeds: inconclusive" in row.detail
    row = _judge(runs, for_each="heterogeneity", relation="within", delta=3)
    assert row.verdict == CONTRADICTED  # at γ = 0, |38.5| - 2.1 > 3


def test_runs_that_differ_in_more_than_the_seed_are_refused():
    runs = [({"normalizer": n, "bn_momentum": m, "seed": s}, 50 + 10 * (n == "fbn"), "ok")
            for n in ("fbn", "bn") for m in (0.1, 0.01) for s in (0, 1)]
    row = _judge(runs)
    assert row.verdict == INCONCLUSIVE and math.isnan(row.margin)
    assert "ambiguous: the matching runs differ in ['bn_momentum']" in row.detail
    assert _judge(runs, where={"bn_momentum": 0.1}).verdict == HOLDS


def test_a_claim_whose_losing_side_is_still_climbing_is_inconclusive():
    """FBN (the side the claim says is better) is 10 points behind BN; when FBN still gains
    10 points over the last quarter of its budget it may catch up: inconclusive."""
    climbing = [({**FBN, "seed": s}, v, "ok", v - 10) for s, v in enumerate([40, 41])]
    settled = [({**BN, "seed": s}, 50, "ok") for s in (0, 1)]
    row = _judge(climbing + settled)
    assert (row.verdict, row.settled) == (INCONCLUSIVE, "no")
    assert ("not settled: normalizer=fbn +10.0 points over the last quarter of the budget; "
            "else contradicted") in row.detail
    row = _judge(_pairs(FBN, BN, [40, 41], [50, 50]))  # the same claim on settled runs
    assert (row.verdict, row.settled) == (CONTRADICTED, "yes")
    # BN, ahead, still climbing only widens its lead: still contradicted
    row = _judge([({**FBN, "seed": s}, v, "ok") for s, v in enumerate([40, 41])]
                 + [({**BN, "seed": s}, 50, "ok", 40) for s in (0, 1)])
    assert (row.verdict, row.settled) == (CONTRADICTED, "no")
    assert "normalizer=bn +10.0 points" in row.detail and "the side behind settled" in row.detail


def test_a_winner_still_climbing_holds_only_when_the_loser_has_settled():
    winner = [({**FBN, "seed": s}, v, "ok", v - 5) for s, v in enumerate([60, 61])]
    assert _judge(winner + [({**BN, "seed": s}, 50, "ok") for s in (0, 1)]).verdict == HOLDS
    loser = [({**BN, "seed": s}, 50, "ok", 45) for s in (0, 1)]
    row = _judge(winner + loser)
    assert row.verdict == INCONCLUSIVE and "else holds" in row.detail
    # a gain within max(1 point, the seed spread) is settled: BN's finals spread 7.1 points
    spread = [({**BN, "seed": s}, v, "ok", v - 5) for s, v in enumerate([45, 55])]
    assert _judge([({**FBN, "seed": s}, 70, "ok") for s in (0, 1)] + spread).verdict == HOLDS
    # near-equality rests on both sides
    near = {"relation": "within", "delta": 3}
    assert _judge(_pairs(FBN, BN, [50, 51], [50, 50]), **near).verdict == HOLDS
    row = _judge([({**FBN, "seed": s}, v, "ok", v - 2) for s, v in enumerate([50, 51])]
                 + [({**BN, "seed": s}, 50, "ok") for s in (0, 1)], **near)
    assert row.verdict == INCONCLUSIVE and "normalizer=fbn +2.0 points" in row.detail


def _tuned_summary(common, tuned):
    """The claim's runs (experiment e, every method at lr × 1) and a tuning experiment's
    (10 % held out; ``tuned``: normalizer -> lr_scale -> final accuracies per seed, the
    validation accuracy equal to the test's)."""
    runs = [({"normalizer": n, "seed": s}, v, "ok") for n, vs in common.items()
            for s, v in enumerate(vs)]
    sweep = [({"normalizer": n, "lr_scale": scale, "val_fraction": 0.1, "seed": s}, v, "ok")
             for n, scales in tuned.items() for scale, vs in scales.items()
             for s, v in enumerate(vs)]
    tuning = _summary(sweep, experiment="tuning")
    return pd.concat([_summary(runs), tuning.assign(val_accuracy=tuning["test_accuracy"])],
                     ignore_index=True)


def test_a_method_claim_is_judged_at_each_methods_chosen_rate():
    """At the common rate FBN loses by 9.5 points; at the rates chosen on held-out data (FBN
    × 4, BN × 1) it wins by 10.5: holds, with the common rate's verdict in the detail."""
    summary = _tuned_summary({"fbn": [40, 41], "bn": [50, 50]},
                             {"fbn": {1: [40, 41], 4: [60, 61]}, "bn": {1: [50, 50], 4: [30, 30]}})
    words = parse_words({"claims": [_claim()]})
    row = words_ledger(words, summary).iloc[0]
    assert (row.verdict, row.margin) == (HOLDS, pytest.approx(10.5))
    assert row.rates == "normalizer=fbn: lr × 4↑ (chosen); normalizer=bn: lr × 1↓ (chosen)"
    assert "at lr × 1 (common): -9.5 ± 0.7, contradicted" in row.detail
    assert row.ours == "normalizer=fbn: 60.5; normalizer=bn: 50.0"
    # no tuning run for BN: the common rate, said so
    summary = _tuned_summary({"fbn": [40, 41], "bn": [50, 50]}, {"fbn": {1: [40, 41], 4: [60, 61]}})
    row = words_ledger(words, summary).iloc[0]
    assert row.verdict == CONTRADICTED
    assert row.rates == ("normalizer=fbn: lr × 1; normalizer=bn: lr × 1 (common: no tuning run "
                         "at normalizer=bn)")
    # tuning: null in the claims file, or a claim that does not compare methods: lr × 1
    assert words_ledger(parse_words({"claims": [_claim()], "tuning": None}),
                        summary).verdict[0] == CONTRADICTED


def test_the_ledger_is_written_with_counts_per_verdict_and_paper(tmp_path):
    words = parse_words({"claims": [_claim(), _claim(id="d", paper="fixbn",
                                                     b={"normalizer": "gn"})]})
    runs = _pairs(FBN, BN, [60, 61], [50, 50])
    paths = write_words(words, _summary(runs), tmp_path / "claims_words")
    assert [p.name for p in paths] == [f"claims_words.{e}" for e in ("csv", "md", "pdf", "png")]
    table = pd.read_csv(paths[0])
    assert list(table.columns) == list(WORDS_COLUMNS)
    assert list(table.verdict) == [HOLDS, NOT_RUN]
    md = paths[1].read_text()
    assert "Verdicts: 1 holds, 0 contradicted, 0 inconclusive, 1 not run." in md
    assert "| FBN | 1 | 1 | 0 | 0 | 0 |" in md and "| FixBN | 1 | 0 | 0 | 0 | 1 |" in md
    assert "| c | §4 | “FBN beats BN.” |" in md
    assert paths[3].stat().st_size > 0
    empty = write_words(Words(), _summary(runs), tmp_path / "none")
    assert pd.read_csv(empty[0]).empty


WHERE = r"qualitative: claim 'c'"


@pytest.mark.parametrize(("change", "expected"), [
    ({"relation": "above"}, WHERE + r": key 'relation' has value 'above'; allowed: one of "
                                    r"\['greater', 'best', 'trend', 'within'\]"),
    ({"colour": 1}, WHERE + r": unknown key 'colour'; allowed keys: \['id'"),
    ({"delta": 3}, WHERE + r": key 'delta' is not a key of relation 'greater'; its keys: "
                           r"\['a', 'b', 'slack'\]"),
    ({"b": {}}, WHERE + r": key 'b' has value \{\}; allowed: a mapping of summary columns"),
    ({"a": {"colour": "red"}}, WHERE + r", a: unknown key 'colour'; allowed keys: \["),
    ({"a": {"normalizer": ["bn"]}}, WHERE + r", a: key 'normalizer' has value \['bn'\]; "
                                    r"allowed: a single value"),
    ({"paper": "fedbn"}, WHERE + r": key 'paper' has value 'fedbn'; allowed: one of \['fbn'"),
    ({"at": "best"}, WHERE + r": key 'at' has value 'best'; allowed: one of \['final', 'max'\]"),
    ({"for_each": "colour"}, WHERE + r": key 'for_each' has value 'colour'; allowed: a summary "
                             r"column"),
    ({"words": ""}, WHERE + r": key 'words' has value ''; allowed: a non-empty text"),
    ({"relation": "within", "delta": -1}, WHERE + r": key 'delta' has value -1; allowed: a "
                                          r"finite number >= 0"),
    ({"relation": "within"}, WHERE + r": key 'delta' is missing; relation 'within' needs "
                             r"\['a', 'b', 'delta'\]"),
    ({"relation": "trend", "over": "local_steps", "direction": "up"},
     WHERE + r": key 'a' is not a key of relation 'trend'"),
    ({"relation": "best"}, WHERE + r": key 'b' is not a key of relation 'best'"),
])
def test_a_malformed_claim_is_refused_naming_the_claim_the_key_and_the_value(change, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_words({"claims": [{**_claim(), **change}]})
    trend = {**_bare(), "relation": "trend", "over": "local_steps", "direction": "up"}
    with pytest.raises(ConfigError, match=WHERE + r": key 'direction' has value 'up'; allowed: "
                                              r"one of \['increasing', 'decreasing'\]"):
        parse_words({"claims": [trend]})


def test_missing_fields_and_a_second_id_are_refused():
    entry = _claim()
    with pytest.raises(ConfigError, match=WHERE + r": key 'words' is missing; a claim needs"):
        parse_words({"claims": [{k: v for k, v in entry.items() if k != "words"}]})
    with pytest.raises(ConfigError, match=r"key 'id' has value 'c'; allowed: an id no other"):
        parse_words({"claims": [entry, entry]})
    with pytest.raises(ConfigError, match=r"qualitative: unknown key 'spread'"):
        parse_words({"claims": [entry], "spread": 5})
    with pytest.raises(ConfigError, match=r"qualitative: key 'min_spread' has value -1; "
                                          r"allowed: a finite number >= 0"):
        parse_words({"claims": [entry], "min_spread": -1})
    assert parse_words({"claims": [entry]}).noise.min_spread == 0
    for bad in (0, 1.5, True):
        with pytest.raises(ConfigError, match=rf"qualitative: key 'diverged_seeds' has value "
                                              rf"{bad!r}; allowed: an integer >= 1"):
            parse_words({"claims": [entry], "diverged_seeds": bad})
    assert parse_words({"claims": [entry]}).noise.diverged_seeds == 2


def _plan():
    return load_plan({"run": TINY, "experiments": {
        "e": {"grid": {"normalizer": ["bn", "fbn"], "local_steps": [1, 2], "seed": [0, 1]}}}})


@pytest.mark.parametrize(("change", "expected"), [
    ({"experiment": "f"}, WHERE + r": key 'experiment' has value 'f'; allowed: one of \['e'\]"),
    ({"where": {"heterogeneity": 0.5}},
     WHERE + r", where: key 'heterogeneity' has value 0.5; allowed: a value the experiment has "
             r"\(\[0.0\]\)"),
    ({"where": {"normalizer": "max"}},
     WHERE + r", where: key 'normalizer' has value 'max'; allowed: a value the experiment has "
             r"\(\['bn', 'fbn'\]\); 'min'/'max' only on a numeric column"),
    ({"for_each": "n_clients"},
     WHERE + r": key 'for_each' has value 'n_clients'; allowed: an axis of the experiment's "
             r"grid: one of \['normalizer', 'local_steps'"),
])
def test_a_claim_the_plan_cannot_answer_is_refused(change, expected):
    words = parse_words({"claims": [_claim(**change)]})
    with pytest.raises(ConfigError, match=expected):
        check_plan(words, _plan())
    check_plan(parse_words({"claims": [_claim(where={"local_steps": "max"},
                                              for_each="local_steps")]}), _plan())


def test_a_claim_on_experiments_an_override_dropped_is_not_run():
    """An override that sets an experiment to null (the quick profile's Tiny-ImageNet) leaves
    its claims unchecked and not run; a misspelt experiment is still refused."""
    plan = load_plan({"run": TINY, "experiments": {
        "e": {"grid": {"normalizer": ["bn", "fbn"], "seed": [0, 1]}}, "f": None}})
    assert plan.dropped == {"f"}
    words = parse_words({"claims": [_claim(experiment="f")]})
    check_plan(words, plan)
    assert words_ledger(words, _summary(_pairs(FBN, BN, [60, 60], [50, 50]))).iloc[0].verdict \
        == NOT_RUN
    with pytest.raises(ConfigError, match=WHERE + r": key 'experiment' has value 'g'"):
        check_plan(parse_words({"claims": [_claim(experiment="g")]}), plan)
