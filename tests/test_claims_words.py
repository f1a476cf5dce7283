"""Claims in words: each relation's margin is paired by seed, each verdict is a stated test
(one-sided t, TOST, the exact sign test, Holm over a claim's units) recomputed here with
scipy, and a bad claim is refused naming the claim, key and value."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fednorm.claims.file import load_claims
from fednorm.claims.render import write_words
from fednorm.claims.verdicts import Unit, claim_verdict
from fednorm.claims.words import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_RUN,
    VERDICTS,
    Words,
    check_plan,
    parse_words,
)
from fednorm.claims.words_ledger import WORDS_COLUMNS, words_ledger
from fednorm.config import ConfigError, run_config
from fednorm.plan import load_plan
from fednorm.summarize import config_columns

TINY = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
        "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
        "partition": "gamma", "heterogeneity": 0, "gn_groups": 2}
POINTS = (4, 8, 12, 16, 20)  # settling's window: the last quarter, steps 16 and 20
ALPHA = 0.05


def _summary(runs, experiment="e"):
    """A summary: ``runs`` is a list of (run keys, final test accuracy in %, status[, rise]);
    each run is evaluated at POINTS on a line that gains ``rise`` points over the last quarter
    of its budget (steps 16 to 20), flat unless given (a run that has settled)."""
    rows = []
    for keys, accuracy, status, *rise in runs:
        cfg = run_config({**TINY, **keys})
        for step in POINTS:
            value = accuracy - (rise[0] if rise else 0.0) * (20 - step) / 4
            rows.append({**config_columns(cfg), "run_id": cfg.run_id, "figure_group": experiment,
                         "step": step, "test_accuracy": value / 100, "status": status})
    return pd.DataFrame(rows)


def _pairs(a, b, values_a, values_b, rise_a=0.0, rise_b=0.0):
    """Runs of groups ``a`` and ``b`` (run keys), seed i with values_a[i], values_b[i]; a NaN
    value is a diverged run."""
    return [({**keys, "seed": s}, v, "diverged" if math.isnan(v) else "ok", rise)
            for keys, values, rise in ((a, values_a, rise_a), (b, values_b, rise_b))
            for s, v in enumerate(values)]


def _claim(**more):
    """FBN over BN, a claim of FixBN's paper: not about its own method, so the statistics
    alone decide (a paper's own method: test_a_papers_own_method_is_contradicted_only_...)."""
    return {"id": "c", "paper": "fixbn", "source": "§4", "words": "FBN beats BN.",
            "experiment": "e", "relation": "greater", "a": {"normalizer": "fbn"},
            "b": {"normalizer": "bn"}, **more}


def _bare():
    """A claim without its groups."""
    return {k: v for k, v in _claim().items() if k not in ("a", "b")}


def _judge(runs, rule=None, **claim):
    words = parse_words({"claims": [_claim(**claim)], **(rule or {})})
    return words_ledger(words, _summary(runs)).iloc[0]


def _interval(margins, alpha=ALPHA):
    """The one-sided (1 − α) bounds of a plain paired t test on ``margins``."""
    m = np.asarray(margins, dtype=float)
    se = m.std(ddof=1) / math.sqrt(len(m))
    half = stats.t.ppf(1 - alpha, len(m) - 1) * se
    return m.mean() - half, m.mean() + half, se


FBN, BN, GN, LN = ({"normalizer": n} for n in ("fbn", "bn", "gn", "ln"))


def test_margins_are_paired_by_seed():
    """Each group alone spreads 20 points over seeds (unpaired, nothing is shown); the paired
    margin is 5 at every seed: holds, with an interval of zero width."""
    a, b = [50, 70, 90], [45, 65, 85]
    assert stats.ttest_ind(a, b, alternative="greater").pvalue > 0.3
    row = _judge(_pairs(FBN, BN, a, b))
    assert (row.verdict, row.n_seeds, row.df) == (HOLDS, 3, 2)
    assert row.low == pytest.approx(5) and row.high == pytest.approx(5) and row.se == 0
    assert row.ours == "normalizer=fbn: 70.0; normalizer=bn: 65.0"


def test_a_sign_holds_or_is_contradicted_by_the_one_sided_t_test():
    """One claim of one unit: the pool has no other unit, so its test is scipy's paired t, the
    claim's null and its mirror's alike."""
    margins = [3.0, 5.0, 4.0]
    row = _judge(_pairs(FBN, BN, [53, 55, 54], [50, 50, 50]))
    p = stats.ttest_1samp(margins, 0, alternative="greater").pvalue
    low, high, se = _interval(margins)
    assert p < ALPHA and row.verdict == HOLDS and row.needs == ""
    assert (row.margin, row.df, row.sesoi) == (pytest.approx(4), 2, 2)
    assert row.p == pytest.approx(p, abs=1e-12) and row.se == pytest.approx(se, abs=1e-12)
    assert (row.low, row.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    # the mirror: the same runs with the sides swapped are contradicted, with the same p
    mirror = _judge(_pairs(FBN, BN, [53, 55, 54], [50, 50, 50]), a=BN, b=FBN)
    assert mirror.verdict == CONTRADICTED and mirror.p == pytest.approx(p, abs=1e-12)
    # below zero by less than sesoi = 2, tightly: contradicted all the same (no sesoi there)
    small = [-1.5, -1.6, -1.4]
    row = _judge(_pairs(FBN, BN, [48.5, 48.4, 48.6], [50, 50, 50]))
    assert row.verdict == CONTRADICTED and -2 < row.high < 0
    assert row.p == pytest.approx(stats.ttest_1samp(small, 0, alternative="less").pvalue,
                                  abs=1e-12)
    assert _judge(_pairs(FBN, BN, [48.5, 48.4, 48.6], [50] * 3), a=BN, b=FBN).verdict == HOLDS
    # neither way, and within ±sesoi by TOST: negligible, for the claim and its mirror
    tiny, runs = [0.3, -0.2, 0.1], _pairs(FBN, BN, [50.3, 49.8, 50.1], [50, 50, 50])
    row = _judge(runs)
    tost = max(stats.ttest_1samp(tiny, -2, alternative="greater").pvalue,
               stats.ttest_1samp(tiny, 2, alternative="less").pvalue)
    assert row.verdict == NEGLIGIBLE and row.p == pytest.approx(tost, abs=1e-12)
    assert _judge(runs, a=BN, b=FBN).verdict == NEGLIGIBLE
    # a smallest effect (the paper's, or the claim's own, which wins) too small to contain it
    assert _judge(runs, rule={"sesoi": {"fixbn": 0.2, "default": 5}}).verdict == INCONCLUSIVE
    assert _judge(runs, rule={"sesoi": {"fixbn": 0.2}}, sesoi=3).verdict == NEGLIGIBLE
    # slack: a > b − 5 holds on margins of −4 (their p recomputed against −5)
    against, runs = [-4.0, -4.1, -3.9], _pairs(FBN, BN, [46, 45.9, 46.1], [50, 50, 50])
    assert _judge(runs).verdict == CONTRADICTED
    row = _judge(runs, slack=5)
    assert row.verdict == HOLDS
    assert row.p == pytest.approx(stats.ttest_1samp(against, -5, alternative="greater").pvalue)
    assert _judge(_pairs(FBN, BN, [50, 50], [60, 60]), b=GN).verdict == NOT_RUN


def test_the_sign_flip_p_and_a_collapsing_seed_stand_beside_the_t():
    """The exact sign-flip p of six margins (2^6 patterns, written out here), and a seed 3 MADs
    away flagged in the detail; neither changes the verdict."""
    a, b = [55, 54, 56, 55, 53, 30], [50] * 6
    row = _judge(_pairs(FBN, BN, a, b))
    margins = np.subtract(a, b)
    sums = [sum(s * m for s, m in zip(signs, margins, strict=True))
            for signs in np.array(np.meshgrid(*[[1, -1]] * 6)).T.reshape(-1, 6)]
    flip = np.mean([x >= margins.sum() for x in sums])
    assert row.flip_p == pytest.approx(flip) and row.outlier_seeds == 1
    assert "1 seed > 3 MADs from the median margin" in row.detail
    assert row.verdict == INCONCLUSIVE  # the t test's, not the sign flip's (p 1/64 < α)


def test_one_seed_never_gives_a_firm_verdict():
    row = _judge(_pairs(FBN, BN, [100], [50]))
    assert (row.verdict, row.n_seeds, row.margin, row.needs) == (INCONCLUSIVE, 1, 50, "seeds")
    assert "+50.0, 1 seed: inconclusive" in row.detail and math.isnan(row.low)
    assert _judge(_pairs(FBN, BN, [0], [50])).verdict == INCONCLUSIVE
    two = _pairs(FBN, BN, [60, 61], [50, 50])  # p = 0.015 on 1 df
    assert _judge(two).verdict == HOLDS
    assert _judge(two, rule={"min_seeds": 3}).verdict == INCONCLUSIVE


def _two_units(duplicate=False):
    """Claims on experiment e: c (FBN > BN, margins 3, 5, 4) and d (GN > BN, margins 2, 3.2,
    1.6); with ``duplicate``, c again under another id (the same comparison)."""
    claims = [_claim(), _claim(id="d", a=GN)] + ([_claim(id="c2")] if duplicate else [])
    runs = _pairs(FBN, BN, [53, 55, 54], [50, 50, 50]) + [
        ({**GN, "seed": s}, v, "ok") for s, v in enumerate([52, 53.2, 51.6])]
    return words_ledger(parse_words({"claims": claims}), _summary(runs)).set_index("id")


def test_the_units_of_one_experiment_share_a_model_once():
    """c and d share BN's runs: one model of three settings on three seeds. With each setting
    its own variance, three settings leave a pair nothing to borrow: each unit is its paired t
    test (scipy's), and a unit two claims share enters the model once."""
    c, d = np.array([3.0, 5.0, 4.0]), np.array([2.0, 3.2, 1.6])
    table = _two_units()
    for name, m in (("c", c), ("d", d)):
        row = table.loc[name]
        assert (row.df, row.margin) == (2, pytest.approx(m.mean()))
        assert row.se == pytest.approx(m.std(ddof=1) / math.sqrt(3))
        assert row.p == pytest.approx(stats.ttest_1samp(m, 0, alternative="greater").pvalue)
    twice = _two_units(duplicate=True)  # c's unit measured by two claims enters the model once
    assert twice.loc["c", ["se", "p", "df"]].tolist() == table.loc["c", ["se", "p", "df"]].tolist()
    assert twice.loc["c2", ["se", "p"]].tolist() == table.loc["c", ["se", "p"]].tolist()


def test_the_same_runs_at_max_and_at_final_are_two_units_of_the_pool():
    runs = [({**FBN, "seed": s}, v, "ok", rise) for s, (v, rise) in
            enumerate([(53, -2), (55, 0), (54, -0.25)])]  # falling: max 61, 55, 55
    runs += [({**BN, "seed": s}, 50, "ok") for s in range(3)]
    claims = [_claim(), _claim(id="m", at="max")]
    table = words_ledger(parse_words({"claims": claims}), _summary(runs)).set_index("id")
    assert table.loc["m", "margin"] == pytest.approx(7)
    # a pool per measure: the final's unit is not pooled with the best's (its df its own 2)
    assert (table.loc["c", "df"], table.loc["m", "df"]) == (2, 2)


def test_units_sharing_settings_are_each_their_own_paired_t_test():
    """Four settings on three seeds, pairs of FBN, GN and FixBN against BN and FBN against GN:
    units that share settings (BN thrice, FBN and GN twice) are each tested on their own
    margins (scipy's paired t on n − 1 = 2 df), exact whatever each setting's noise; their
    estimate is the model's contrast, the mean of their margins on a complete matrix."""
    values = {"fbn": [53, 55, 54], "bn": [50, 50.5, 49.2], "gn": [52, 53.2, 51.6],
              "fixbn": [51, 54, 52.5]}
    runs = [({"normalizer": k, "steps": 5000, "seed": s}, v, "ok")
            for k, vs in values.items() for s, v in enumerate(vs)]
    claims = [_claim(), _claim(id="d", a=GN), _claim(id="e", a=FBN, b=GN),
              _claim(id="f", a={"normalizer": "fixbn"})]
    table = words_ledger(parse_words({"claims": claims}), _summary(runs)).set_index("id")
    fbn, bn, gn, fixbn = (np.array(values[k]) for k in ("fbn", "bn", "gn", "fixbn"))
    for name, m in (("c", fbn - bn), ("d", gn - bn), ("e", fbn - gn), ("f", fixbn - bn)):
        assert table.loc[name, "margin"] == pytest.approx(m.mean())
        assert (table.loc[name, "df"], table.loc[name, "n_seeds"]) == (2, 3)
        assert table.loc[name, "p_for"] == pytest.approx(
            stats.ttest_1samp(m, 0, alternative="greater").pvalue, rel=1e-9)


def test_within_delta_is_schuirmanns_two_one_sided_tests():
    near = {"relation": "within", "delta": 3}
    margins = np.array([0.2, -0.1, 0.1])
    row = _judge(_pairs(FBN, BN, 50 + margins, [50, 50, 50]), **near)
    se = margins.std(ddof=1) / math.sqrt(3)
    p = max(stats.t.sf((margins.mean() + 3) / se, 2), stats.t.cdf((margins.mean() - 3) / se, 2))
    assert (row.verdict, row.delta) == (HOLDS, 3) and math.isnan(row.sesoi)
    assert row.p == pytest.approx(p, rel=1e-9)
    far = np.array([10.0, 10.2, 9.8])  # 10 ± 0.1: outside ±3 with confidence
    row = _judge(_pairs(FBN, BN, 50 + far, [50, 50, 50]), **near)
    se = far.std(ddof=1) / math.sqrt(3)
    assert row.verdict == CONTRADICTED and row.low > 3
    # Bonferroni over the two sides on which a near-equality can fail
    assert row.p == pytest.approx(2 * stats.t.sf((far.mean() - 3) / se, 2), rel=1e-9)
    # a wide spread straddles δ: neither
    assert _judge(_pairs(FBN, BN, [53, 50, 56], [50, 50, 50]), **near).verdict == INCONCLUSIVE
    # a diverged run is a seed against equality: no holds
    row = _judge(_pairs(FBN, BN, [50.2, 49.9, 50.1, math.nan], [50] * 4), **near)
    assert (row.verdict, row.n_diverged) == (INCONCLUSIVE, 1)


def _e_runs(norm, values_by_e):
    return [({"normalizer": norm, "local_steps": e, "steps": 5000, "seed": s}, v, "ok")
            for e, vs in values_by_e.items() for s, v in enumerate(vs)]


def test_a_trend_holds_when_every_step_does():
    """Neighbours (the default): one unit per adjacent step, the claim holds only when every
    step holds (intersection–union); ``ends``: first to last; ``slope``: the least-squares
    change from first to last, for words that say "on average"."""
    trend = {**_bare(), "relation": "trend", "over": "local_steps", "direction": "decreasing",
             "where": GN}
    values = {1: [60, 62, 61], 5: [50, 55, 49], 25: [52, 50, 54], 100: [40, 39, 42]}
    ranked = np.array([values[e] for e in (100, 25, 5, 1)], dtype=float)  # decreasing in E
    slopes = [np.polyfit(np.arange(4), ranked[:, s], 1)[0] * 3 for s in range(3)]
    words = parse_words({"claims": [trend, {**trend, "id": "ends", "steps": "ends"},
                                    {**trend, "id": "up", "direction": "increasing"},
                                    {**trend, "id": "slope", "steps": "slope"}]})
    table = words_ledger(words, _summary(_e_runs("gn", values))).set_index("id")
    assert table.n_units.tolist() == [3, 1, 3, 1]
    # the step from E = 25 to 5 goes both ways over the seeds: the claim is not decided
    assert table.loc["c", "verdict"] == INCONCLUSIVE
    assert table.loc["c", "margin"] == pytest.approx(np.mean(ranked[2] - ranked[1]))
    assert "local_steps=25 → local_steps=5" not in table.loc["c", "detail"]
    assert "25 → 5: " in table.loc["c", "detail"]
    assert table.loc["ends", "margin"] == pytest.approx(np.mean(ranked[3] - ranked[0]))
    assert table.loc["slope", "margin"] == pytest.approx(np.mean(slopes))
    assert table.loc[["ends", "slope"], "verdict"].tolist() == [HOLDS, HOLDS]
    assert table.loc["up", "verdict"] == CONTRADICTED  # Holm over its steps: 100 → 25 falls
    # four levels 50, 80, 40, 75 (increasing in E, tight): a slope would call it increasing
    zigzag = {e: [v, v + 0.5, v - 0.5] for e, v in zip((1, 5, 25, 100), (50, 80, 40, 75),
                                                       strict=True)}
    rows = words_ledger(parse_words({"claims": [{**trend, "direction": "increasing"},
                                                {**trend, "id": "slope", "steps": "slope",
                                                 "direction": "increasing"}]}),
                        _summary(_e_runs("gn", zigzag))).set_index("id")
    assert rows.loc["c", "verdict"] == CONTRADICTED and rows.loc["slope", "verdict"] == HOLDS
    three = {e: values[e] for e in (1, 5, 25)}  # 3 values: the slope x 2 is last − first
    row = words_ledger(parse_words({"claims": [{**trend, "steps": "slope"}]}),
                       _summary(_e_runs("gn", three))).iloc[0]
    ranked = np.array([three[e] for e in (25, 5, 1)], dtype=float)
    fits = [np.polyfit(np.arange(3), ranked[:, s], 1)[0] * 2 for s in range(3)]
    assert row.margin == pytest.approx(np.mean(fits))
    assert row.margin == pytest.approx(np.mean(ranked[2] - ranked[0]))


def _best(others, **values):
    runs = [({**g, "seed": s}, v, "ok") for g in (FBN, *others)
            for s, v in enumerate(values[g["normalizer"]])]
    words = parse_words({"claims": [{**_bare(), "relation": "best", "a": FBN,
                                     "others": list(others)}]})
    return words_ledger(words, _summary(runs)).iloc[0]


def test_best_is_one_unit_per_other_group_with_holm_over_them():
    fbn = [60, 62, 61]
    row = _best([BN, GN], fbn=fbn, bn=[50, 51, 50], gn=[55, 56, 55.5])
    assert (row.verdict, row.n_units) == (HOLDS, 2)
    row = _best([BN, GN], fbn=fbn, bn=[50, 51, 50], gn=[70, 71, 70.5])
    assert row.verdict == CONTRADICTED and "vs normalizer=gn: -9.5" in row.detail
    # BN beats FBN by 2 ± 0.6: p_against in (α/3, α); GN and LN lose by exactly 10 (no
    # variance: the pool is BN's unit alone, so its raw p is scipy's)
    against = [-1.0, -2.0, -3.0]
    raw = stats.ttest_1samp(against, 0, alternative="less").pvalue
    assert ALPHA / 3 < raw < ALPHA
    values = {"fbn": [50, 50, 50], "bn": [51, 52, 53], "gn": [40] * 3, "ln": [40] * 3}
    alone = _best([BN], **values)
    assert (alone.verdict, alone.p) == (CONTRADICTED, pytest.approx(raw, abs=1e-12))
    three = _best([BN, GN, LN], **values)
    assert (three.verdict, three.n_units) == (INCONCLUSIVE, 3)
    assert three.p_against == pytest.approx(3 * raw, abs=1e-12)  # Holm: k x the smallest p


def test_diverged_runs():
    # FBN's seed 3 diverged: three seeds' margins hold by t, yet a seed is against the claim
    row = _judge(_pairs(FBN, BN, [60, 61, 62, math.nan], [50] * 4))
    assert (row.verdict, row.n_seeds, row.n_diverged) == (INCONCLUSIVE, 3, 1)
    assert "1 run diverged (1 seed(s) against, 0 for)" in row.detail and "†1" in row.ours
    # seeds with only diverged runs: the exact sign test (two seeds: p 1/4 at best)
    assert _judge(_pairs(FBN, BN, [math.nan] * 2, [50] * 2)).verdict == INCONCLUSIVE
    assert _judge(_pairs(FBN, BN, [50] * 2, [math.nan] * 2)).verdict == INCONCLUSIVE
    row = _judge(_pairs(FBN, BN, [math.nan] * 5, [50] * 5))
    assert (row.verdict, row.p) == (CONTRADICTED, pytest.approx(1 / 32))
    assert _judge(_pairs(FBN, BN, [50] * 5, [math.nan] * 5)).verdict == HOLDS
    # a diverged run on the worse side leaves the others to decide, and cannot contradict
    assert _judge(_pairs(FBN, BN, [60, 61, 62], [50, 50, math.nan])).verdict == HOLDS
    assert _judge(_pairs(FBN, BN, [40, 41, 42], [50, 50, math.nan])).verdict == INCONCLUSIVE


def test_one_losing_margin_beside_diverged_seeds_is_no_weaker_than_none():
    row = _judge(_pairs(FBN, BN, [math.nan] * 4 + [40], [50] * 5))
    assert row.verdict == CONTRADICTED


def test_a_claim_that_holds_by_the_sign_test_reports_its_p():
    row = _judge(_pairs(FBN, BN, [50] * 5, [math.nan] * 5))
    assert (row.verdict, row.p) == (HOLDS, pytest.approx(1 / 32))


def test_the_claims_file_states_its_estimand_for_claims_without_their_own_at(tmp_path):
    words = parse_words({"claims": [_claim(), _claim(id="d", at="max")]}, at="window")
    assert [c.at for c in words.claims] == ["window", "max"]
    assert parse_words({"claims": [_claim()]}).claims[0].at == "final"
    path = tmp_path / "claims.yaml"
    path.write_text("estimand: last\nclaims: [{id: n, paper: fbn, source: s, setting: "
                    "{normalizer: bn}, value: 50}, {id: m, paper: fbn, source: s, setting: "
                    "{normalizer: bn}, value: 50, at: max}]\nqualitative: {claims: [{id: c, "
                    "paper: fixbn, source: s, words: w, experiment: e, relation: greater, a: "
                    "{normalizer: fbn}, b: {normalizer: bn}}]}\n")
    with pytest.raises(ConfigError, match=r"claims.yaml: key 'estimand' has value 'last'; "
                                          r"allowed: one of \['final', 'max', 'window'\]"):
        load_claims(str(path))
    path.write_text(path.read_text().replace("estimand: last", "estimand: window"))
    claims = load_claims(str(path))
    assert [c.at for c in (*claims.numbers, *claims.words.claims)] == ["window", "max", "window"]
    path.write_text(path.read_text().replace("estimand: window\n", ""))
    claims = load_claims(str(path))  # no estimand stated: the last point
    assert [c.at for c in (*claims.numbers, *claims.words.claims)] == ["final", "max", "final"]


def test_the_window_estimand_judges_the_mean_of_the_window_points():
    """Seeds whose last point alone ties (FBN and BN equal at step 20) but whose window means
    differ by the last-but-one point (step 16: FBN 4 points up, falling to the tie; BN flat):
    window margins +2 at each seed hold, the final margins 0 are negligible (within ±sesoi)."""
    summary = _summary(_pairs(FBN, BN, [50, 50.5, 49.5], [50, 50.5, 49.5]))
    summary.loc[(summary.step == 16) & (summary.normalizer == "fbn"), "test_accuracy"] += 0.04
    window = words_ledger(parse_words({"claims": [_claim()]}, at="window"), summary).iloc[0]
    final = words_ledger(parse_words({"claims": [_claim()]}), summary).iloc[0]
    assert (window.margin, window.verdict) == (pytest.approx(2), HOLDS)
    assert (final.margin, final.verdict) == (pytest.approx(0), NEGLIGIBLE)


def test_q_is_benjamini_hochberg_over_the_ledgers_p():
    claims = [_claim(), _claim(id="d", a=GN), _claim(id="e", a=LN, b=FBN),
              _claim(id="f", b={"normalizer": "in"})]
    runs = (_pairs(FBN, BN, [53, 55, 54], [50, 50, 50])
            + [({**g, "seed": s}, v, "ok") for g, vs in ((GN, [50, 51, 49]), (LN, [54, 50, 52]))
               for s, v in enumerate(vs)])
    table = words_ledger(parse_words({"claims": claims}), _summary(runs))
    known = table.p.notna()
    assert known.tolist() == [True, True, True, False]  # f: not run
    assert table.verdict.tolist()[:3] == [HOLDS, NEGLIGIBLE, INCONCLUSIVE]
    for side in ("for", "against", "negligible"):  # each null's p's over the ledger
        assert table[f"q_{side}"][known].to_numpy() == pytest.approx(
            stats.false_discovery_control(table[f"p_{side}"][known].to_numpy()), abs=1e-12)
    # p and q: the verdict's null's (negligible: equivalence; otherwise the claim's)
    assert table.p.tolist()[:3] == [table.p_for[0], table.p_negligible[1], table.p_for[2]]
    assert table.q.tolist()[:3] == [table.q_for[0], table.q_negligible[1], table.q_for[2]]
    assert math.isnan(table.q[3])


def test_one_look_judges_at_alpha():
    margins = [1.0, 3.0, 2.0]
    p = stats.ttest_1samp(margins, 0, alternative="greater").pvalue
    assert ALPHA / 2 < p < ALPHA
    row = _judge(_pairs(FBN, BN, [51, 53, 52], [50, 50, 50]))
    assert (row.verdict, row.p) == (HOLDS, pytest.approx(p, abs=1e-12))
    low, _, _ = _interval(margins, ALPHA)
    assert row.low == pytest.approx(low, abs=1e-12)


def _tuned_summary(common, tuned):
    """The claim's runs (experiment e, every method at lr × 1) and a tuning experiment's
    (10 % held out; ``tuned``: normalizer -> lr_scale -> {seed: final accuracy}, the
    validation accuracy equal to the test's)."""
    runs = [({"normalizer": n, "seed": s}, v, "ok") for n, vs in common.items()
            for s, v in enumerate(vs)]
    sweep = [({"normalizer": n, "lr_scale": scale, "val_fraction": 0.1, "seed": s}, v, "ok")
             for n, scales in tuned.items() for scale, vs in scales.items()
             for s, v in vs.items()]
    tuning = _summary(sweep, experiment="tuning")
    return pd.concat([_summary(runs), tuning.assign(val_accuracy=tuning["test_accuracy"])],
                     ignore_index=True)


def _seeds(*values):
    return dict(enumerate(values))


def test_a_method_claim_is_judged_at_each_methods_chosen_rate_on_fresh_seeds():
    """At the common rate FBN loses by 9.5 points. The tuning seeds (0, 1: every rate has
    them) choose FBN × 4 and BN × 1 on held-out data, × 4 flattered there (90.5: the choice's
    winner's curse); on the fresh seeds 2, 3 of the chosen rates FBN wins by 10.5: holds, on
    those seeds alone, the common rate's verdict in the detail."""
    common = {"fbn": [40, 41], "bn": [50, 50]}
    fbn = {1: _seeds(40, 41), 4: {0: 90, 1: 91, 2: 60, 3: 61}, 16: _seeds(20, 20)}
    bn = {0.25: _seeds(30, 30), 1: _seeds(50, 50, 50, 50), 4: _seeds(30, 30)}
    words = parse_words({"claims": [_claim()]})
    row = words_ledger(words, _tuned_summary(common, {"fbn": fbn, "bn": bn})).iloc[0]
    assert (row.verdict, row.margin, row.n_seeds) == (HOLDS, pytest.approx(10.5), 2)
    assert row.rates == ("normalizer=fbn: lr × 4 (chosen on seeds 0, 1; judged on 2, 3); "
                         "normalizer=bn: lr × 1 (chosen on seeds 0, 1; judged on 2, 3)")
    # a choice at an edge of its grid is not tuned yet: no firm verdict (needs tuning)
    edge = {"fbn": {1: fbn[1], 4: fbn[4]}, "bn": {1: bn[1], 4: bn[4]}}
    row = words_ledger(words, _tuned_summary(common, edge)).iloc[0]
    assert (row.verdict, row.needs) == (INCONCLUSIVE, "tuning")
    assert "lr × 4↑" in row.rates and "at the high edge of its lr_scale grid" in row.rates
    assert "at the common recipe: -9.5 [" in row.detail and ": contradicted" in row.detail
    assert row.ours == "normalizer=fbn: 60.5; normalizer=bn: 50.0"
    # before the fresh seeds: no verdict from the choice's own seeds (needs seeds)
    seen = {"fbn": {1: fbn[1], 4: {0: 90, 1: 91}, 16: fbn[16]},
            "bn": {0.25: bn[0.25], 1: _seeds(50, 50), 4: bn[4]}}
    row = words_ledger(words, _tuned_summary(common, seen)).iloc[0]
    assert (row.verdict, row.needs, row.n_seeds) == (INCONCLUSIVE, "seeds", 0)
    assert "no fresh seed yet" in row.rates
    # a fresh seed far below at the chosen rate does not move the choice; a seed that every
    # rate has is a tuning seed, and does
    low = {"fbn": {**fbn, 4: {**fbn[4], 2: 0}}, "bn": bn}
    assert words_ledger(words, _tuned_summary(common, low)).rates[0].startswith(
        "normalizer=fbn: lr × 4 (chosen on seeds 0, 1;")
    every = {"fbn": {1: {**fbn[1], 2: 100}, 4: {**fbn[4], 2: 0}, 16: {**fbn[16], 2: 0}},
             "bn": {**bn, 4: _seeds(*[30] * 4)}}
    assert words_ledger(words, _tuned_summary(common, every)).rates[0].startswith(
        "normalizer=fbn: lr × 1↓ (chosen on seeds 0, 1, 2;")
    # no tuning run for BN: the common rate, said so
    summary = _tuned_summary(common, {"fbn": fbn})
    row = words_ledger(words, summary).iloc[0]
    assert row.verdict == CONTRADICTED
    assert row.rates == ("normalizer=fbn: lr × 1; normalizer=bn: lr × 1 (common: no tuning run "
                         "at normalizer=bn)")
    # tuning: null in the claims file: lr × 1
    assert words_ledger(parse_words({"claims": [_claim()], "tuning": None}),
                        summary).verdict[0] == CONTRADICTED


def test_a_papers_own_method_is_judged_as_any_other_at_the_rate_its_row_names():
    """FBN 9.5 points under BN on two seeds at the common rate: the claim of FBN's own paper and
    of another paper get the same verdict and the same rates label (no override favours a
    paper's own method); at its tuned rate on fresh seeds, the same holds there."""
    common = {"fbn": [40, 41], "bn": [50, 50]}
    untuned = _tuned_summary(common, {"gn": {1: _seeds(50)}})  # no tuning cell of theirs
    other = words_ledger(parse_words({"claims": [_claim()]}), untuned).iloc[0]
    own = words_ledger(parse_words({"claims": [_claim(paper="fbn")]}), untuned).iloc[0]
    assert other.verdict == own.verdict == CONTRADICTED and own.rates == other.rates
    assert own.margin == pytest.approx(-9.5)
    tuned = {"fbn": {0.25: _seeds(20, 20), 1: {0: 45, 1: 46, 2: 40, 3: 41}, 4: _seeds(20, 20)},
             "bn": {0.25: _seeds(30, 30), 1: _seeds(50, 50, 50, 50), 4: _seeds(30, 30)}}
    row = words_ledger(parse_words({"claims": [_claim(paper="fbn")]}),
                       _tuned_summary(common, tuned)).iloc[0]
    assert (row.verdict, row.margin) == (CONTRADICTED, pytest.approx(-9.5))
    assert row.rates.startswith("normalizer=fbn: lr × 1 (chosen on seeds 0, 1; judged on 2, 3)")


def test_a_claim_with_a_unit_not_run_does_not_hold():
    """Every unit must hold for the claim to hold: a unit without runs is not a held one."""
    held, missing = Unit("x", HOLDS, p_holm=1.0), Unit("y", NOT_RUN, reason="no run")
    assert claim_verdict([held, held], ALPHA) == HOLDS
    assert claim_verdict([held, missing], ALPHA) == INCONCLUSIVE
    assert claim_verdict([missing, missing], ALPHA) == NOT_RUN


def test_runs_that_differ_in_more_than_the_seed_are_refused():
    runs = [({"normalizer": n, "bn_momentum": m, "seed": s}, 50 + 10 * (n == "fbn") + s, "ok")
            for n in ("fbn", "bn") for m in (0.1, 0.01) for s in (0, 1)]
    row = _judge(runs)
    assert row.verdict == INCONCLUSIVE and math.isnan(row.margin)
    assert "ambiguous: the matching runs differ in ['bn_momentum']" in row.detail
    assert _judge(runs, where={"bn_momentum": 0.1}).verdict == HOLDS


def test_the_ledger_is_written_with_counts_per_verdict_and_paper(tmp_path):
    words = parse_words({"claims": [_claim(paper="fbn"), _claim(id="d", b=GN)]})
    table = words_ledger(words, _summary(_pairs(FBN, BN, [60, 61], [50, 50])))
    paths = write_words(table, words, tmp_path / "claims_words",
                        ["The calibration: 0 of 2 claims hold."])
    assert [p.name for p in paths] == [f"claims_words.{e}" for e in ("csv", "md", "pdf", "png")]
    written = pd.read_csv(paths[0])
    assert list(written.columns) == list(WORDS_COLUMNS)
    assert list(written.verdict) == [HOLDS, NOT_RUN]  # p 0.015 < α
    md = paths[1].read_text()
    counted = {HOLDS: 1, NOT_RUN: 1}
    assert ("Verdicts: " + ", ".join(f"{counted.get(v, 0)} {v}" for v in VERDICTS) + ".") in md
    assert "| FBN | 1 | " + " | ".join("1" if v == HOLDS else "0" for v in VERDICTS) + " |" in md
    assert ("| FixBN | 1 | " + " | ".join("1" if v == NOT_RUN else "0" for v in VERDICTS)
            + " |") in md
    assert "α = 0.05, one look" in md and "\nThe calibration: 0 of 2 claims hold.\n" in md
    assert "| c | §4 | “FBN beats BN.” |" in md
    assert paths[2].stat().st_size > 0 and paths[3].stat().st_size > 0
    empty = write_words(words_ledger(Words(), pd.DataFrame()), Words(), tmp_path / "none")
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
    ({"paper": "silobn"}, WHERE + r": key 'paper' has value 'silobn'; allowed: one of \['fbn'"),
    ({"at": "best"}, WHERE + r": key 'at' has value 'best'; allowed: one of \['final', 'max', "
                     r"'window'\]"),
    ({"for_each": "colour"}, WHERE + r": key 'for_each' has value 'colour'; allowed: a summary "
                             r"column"),
    ({"words": ""}, WHERE + r": key 'words' has value ''; allowed: a non-empty text"),
    ({"sesoi": -1}, WHERE + r": key 'sesoi' has value -1; allowed: a finite number >= 0"),
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


@pytest.mark.parametrize(("section", "expected"), [
    ({"alpha": 0.7}, r"qualitative: key 'alpha' has value 0.7; allowed: a number in \(0, 0.5\)"),
    ({"sesoi": {"nope": 2}}, r"qualitative: key 'sesoi' has value 'nope'; allowed: points"),
    ({"sesoi": {"fbn": -1}}, r"qualitative, sesoi: key 'fbn' has value -1; allowed: a finite"),
    ({"min_seeds": 1}, r"qualitative: key 'min_seeds' has value 1; allowed: an integer >= 2"),
    ({"single_seed_spread": 5}, r"qualitative: unknown key 'single_seed_spread'; allowed keys: "
                                r"\['claims', 'alpha', 'sesoi', 'min_seeds', 'lattice', 'noise', "
                                r"'tuning'\]"),
    ({"family_wise": True}, r"qualitative: unknown key 'family_wise'"),
    (None, r"a mapping of \['claims', 'alpha', 'sesoi', 'min_seeds', 'lattice', 'noise', "
           r"'tuning'\]"),
])
def test_a_malformed_rule_is_refused_naming_the_key_and_the_value(section, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_words([_claim()] if section is None else {"claims": [_claim()], **section})


def test_missing_fields_and_a_second_id_are_refused():
    entry = _claim()
    with pytest.raises(ConfigError, match=WHERE + r": key 'words' is missing; a claim needs"):
        parse_words({"claims": [{k: v for k, v in entry.items() if k != "words"}]})
    with pytest.raises(ConfigError, match=r"key 'id' has value 'c'; allowed: an id no other"):
        parse_words({"claims": [entry, entry]})
    trend = {**_bare(), "relation": "trend", "over": "local_steps", "direction": "up"}
    with pytest.raises(ConfigError, match=WHERE + r": key 'direction' has value 'up'; allowed: "
                                              r"one of \['increasing', 'decreasing'\]"):
        parse_words({"claims": [trend]})


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
    assert words_ledger(words, _summary(_pairs(FBN, BN, [60, 61], [50, 50]))).iloc[0].verdict \
        == NOT_RUN
    with pytest.raises(ConfigError, match=WHERE + r": key 'experiment' has value 'g'"):
        check_plan(parse_words({"claims": [_claim(experiment="g")]}), plan)
