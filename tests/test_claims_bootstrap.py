"""The ledger's bootstrap (fednorm.claims.calibration): where rules break (ties on the lattice,
a lattice near the noise, one setting at 3σ among units that share settings) the rule's false
holds are not above α (the Clopper–Pearson lower bound of the rate at or under it); the
bootstrap of a small hand-built ledger puts each unit on its boundaries; where the rule's model
is exact its rates are α within their Clopper–Pearson bounds; the misspecified worlds draw
what they say and are reported."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fednorm.claims import calibration as cal
from fednorm.claims.comparisons import Comparison, Side
from fednorm.claims.rule import HOLDS, verdict_codes
from fednorm.claims.stats import ALPHA, trend_contrast
from fednorm.claims.words import Relation, Rule, Words

SEED = 20250555


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([SEED, *key])


def _false_holds(means, sds, seeds, replicates, lattice, rule_lattice, rng, contrasts=None,
                 block=None):
    """Each unit's share of holds (each unit its own claim), values drawn on ``lattice`` and
    judged with the floor at ``rule_lattice``, with its Clopper–Pearson interval."""
    means, sds = np.asarray(means, dtype=float), np.asarray(sds, dtype=float)
    c = np.array([[1.0, -1.0]]) if contrasts is None else contrasts
    seen = np.ones((len(means), seeds), dtype=bool)
    values = cal.draw(rng, means, sds, seen, replicates, lattice, block)
    count = (verdict_codes(values, c, lattice=rule_lattice).codes == HOLDS).sum(axis=0)
    return count / replicates, cal.clopper_pearson(count, replicates)


def test_tied_margins_on_the_lattice_hold_at_alpha_only_with_the_floor():
    """Two settings at the same mean, midway between two lattice points, σ 0.05 on the
    0.1-point lattice, 2 seeds: a quarter of the margins are +0.1, and both seeds at +0.1 give
    an sd of 0, t infinite, a hold 1 time in 16 without the floor; floored (sd ≥ 0.1 √(2/12))
    t is 3.5 on 1 df and the unit does not hold."""
    r = 20000
    floored, (low, _) = _false_holds([70.05, 70.05], [0.05, 0.05], 2, r, 0.1, 0.1, _rng(1),
                                     block=0.0)
    bare, (bare_low, bare_high) = _false_holds([70.05, 70.05], [0.05, 0.05], 2, r, 0.1, 0.0,
                                               _rng(1), block=0.0)
    assert low[0] <= ALPHA, floored
    assert bare_low[0] > ALPHA, bare  # 1/16 = 0.0625
    assert bare_low[0] <= 1 / 16 <= bare_high[0]


@pytest.mark.parametrize("seeds", [2, 6])
def test_tied_margins_with_a_seeds_common_part_stay_within_alpha(seeds):
    held, (low, _) = _false_holds([70.0, 70.0], [0.05, 0.05], seeds, 20000, 0.1, 0.1,
                                  _rng(2, seeds))
    assert low[0] <= ALPHA, held


@pytest.mark.parametrize("sigma_m", [0.2, 0.25, 0.3])
def test_a_margin_near_the_lattice_on_six_seeds_holds_at_alpha(sigma_m):
    """σ_m (the sd of a margin) 0.2–0.3 points on the 0.1-point lattice, 6 seeds."""
    sd = sigma_m / math.sqrt(2)
    held, (low, _) = _false_holds([70.0, 70.0], [sd, sd], 6, 20000, 0.1, 0.1,
                                  _rng(3, round(100 * sigma_m)))
    assert low[0] <= ALPHA, held


@pytest.mark.parametrize("seeds", [2, 3, 6])
def test_one_setting_at_three_sigma_among_shared_pairs_holds_at_alpha_on_every_unit(seeds):
    """Four settings, setting 0 at 3σ, every pair a unit (each setting in three units), all
    equal: no unit's false holds above α."""
    eye = np.eye(4)
    pairs = np.array([eye[a] - eye[b] for a in range(4) for b in range(a + 1, 4)])
    held, (low, _) = _false_holds(np.full(4, 60.0), [3.0, 1.0, 1.0, 1.0], seeds, 8000, 0.1,
                                  0.1, _rng(4, seeds), contrasts=pairs)
    assert np.all(low <= ALPHA), held


# ---------------------------------------------------------------------------------------------
# The bootstrap of a small ledger built by hand.


def _side(name: str, values) -> Side:
    """A setting's runs, one per seed (NaN: no run for that seed)."""
    values = np.asarray(values, dtype=float)
    seeds = pd.Index(range(len(values)), name="seed")
    runs = pd.DataFrame({"diverged": False, "value": values}, index=seeds)[~np.isnan(values)]
    return Side(name, runs, pd.DataFrame({"run_id": [name]}))


def _unit(label, sides, coefs) -> Comparison:
    return Comparison(label, tuple(sides), tuple(float(c) for c in coefs), ("experiment",))


def _ledger() -> tuple[Words, dict[str, list[Comparison]]]:
    """Eight settings on 6 seeds (one at 3σ, one run missing), and one claim of each kind,
    sharing settings: a greater claim of two units, a best of three (setting a0 against each
    other), a trend over four, a within of two pairs; and a unit with one margin (left out)."""
    rng = _rng(5)
    means = [62.0, 60.0, 58.5, 57.0, 61.0, 63.0, 59.0, 59.5]
    sds = [1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    block = rng.normal(0, 2.0, 6)
    x = np.round((np.array(means)[:, None] + block + np.array(sds)[:, None]
                  * rng.standard_normal((8, 6))) * 10) / 10
    x[2, 4] = np.nan
    s = [_side(f"s{j}", x[j]) for j in range(8)]
    lone = _side("lone", [np.nan] * 5 + [60.0])
    pair = (1.0, -1.0)
    trend = trend_contrast(4)
    claims = (Relation("greater", "fixbn", "§1", "a beats b", ("experiment",), "greater"),
              Relation("best", "fixbn", "§2", "a0 is best", ("experiment",), "best",
                       slack=0.5),
              Relation("trend", "fixbn", "§3", "falls", ("experiment",), "trend"),
              Relation("within", "fixbn", "§4", "about equal", ("experiment",), "within",
                       delta=2.0))
    compared = {
        "greater": [_unit("split 1", (s[0], s[1]), pair), _unit("split 2", (s[4], s[5]), pair),
                    _unit("lone", (s[6], lone), pair)],
        "best": [_unit(f"vs s{k}", (s[0], s[k]), pair) for k in (1, 2, 3)],
        "trend": [_unit("trend", s[:4], -trend)],
        "within": [_unit("w1", (s[6], s[7]), pair), _unit("w2", (s[2], s[3]), pair)],
    }
    return Words(claims=claims, rule=Rule(alpha=ALPHA, lattice=0.1)), compared


def test_a_claims_settings_are_its_distinct_runs_and_a_unit_without_margins_is_left_out():
    compared = _ledger()[1]
    values, contrasts, left_out = cal.design_of(compared["best"], 2)
    assert values.shape == (4, 6) and contrasts.shape == (3, 4)  # a0 once, not three times
    assert left_out == 0
    assert np.isnan(values).sum() == 1
    values, contrasts, left_out = cal.design_of(compared["greater"], 2)
    assert (len(contrasts), left_out, len(values)) == (2, 1, 4)
    tuned = replace(compared["best"][0], pool=("tuning",))  # the same runs in another pool
    values, contrasts, _ = cal.design_of([tuned, *compared["best"][1:]], 2)
    assert values.shape == (4, 6) and contrasts.shape == (3, 4)




@pytest.mark.parametrize("name", ["greater", "best", "trend", "within"])
def test_each_boundary_puts_the_units_exactly_on_it(name):
    words, compared = _ledger()
    claim = next(c for c in words.claims if c.id == name)
    values, contrasts, _ = cal.design_of(compared[name], 2)
    means, _ = cal.spreads(values, 0.1, 1.0)
    holds_at, against_at, negligible_at = cal.bounds(claim, words.rule, contrasts @ means)
    for at, _ in cal.targets(claim, words.rule, contrasts @ means):
        moved = cal.to_boundary(means, contrasts, at)
        assert contrasts @ moved == pytest.approx(at, abs=1e-9)
        for u, c in enumerate(contrasts):  # and each unit alone
            assert c @ cal.to_boundary(means, c, [at[u]]) == pytest.approx(at[u], abs=1e-9)
    slack = {"greater": 0.0, "best": 0.5, "trend": 0.0}.get(name)
    if slack is None:  # within: ±δ for holds, δ on each fitted margin's side, no negligible
        assert holds_at.tolist() == [[2.0, -2.0]] * len(contrasts)
        assert np.abs(against_at).tolist() == [2.0] * len(contrasts)
        assert negligible_at.size == 0
    else:  # the symmetric rule: holds and contradicted share margin + slack = 0
        assert np.all(holds_at == -slack) and np.all(against_at == -slack)
        assert negligible_at.tolist() == [[-slack + 2.0, -slack - 2.0]] * len(contrasts)


def _one_pair(sd: float, seeds: int = 6) -> tuple[Words, dict[str, list[Comparison]]]:
    """One greater claim of one unit, two settings of sd ``sd`` (no lattice)."""
    rng = _rng(6, round(10 * sd))
    block = rng.normal(0, 2.0, seeds)
    x = np.array([[61.0], [60.0]]) + block + sd * rng.standard_normal((2, seeds))
    claim = Relation("pair", "fixbn", "§1", "a beats b", ("experiment",), "greater")
    unit = _unit("pair", (_side("a", x[0]), _side("b", x[1])), (1.0, -1.0))
    return Words(claims=(claim,), rule=Rule(alpha=ALPHA)), {"pair": [unit]}


def test_where_the_rules_model_is_exact_every_rate_is_alpha_within_its_bounds():
    """One pair on 6 seeds, normal runs, no lattice: at margin 0 the one-sided t test holds
    and contradicts each with probability α exactly: the Clopper–Pearson 95 % interval of
    each rate over 10,000 draws contains α. At margin ±sesoi a unit is negligible only where
    TOST rejects and it neither holds nor is contradicted: not above α (the lower bound at
    or under it), for a margin sd small or large against sesoi."""
    for sd in (0.3, 1.0, 3.0):
        words, compared = _one_pair(sd)
        row = cal.calibrate(words, compared).iloc[0]
        assert row["replicates"] == cal.REPLICATES >= 10_000
        for kind in cal.RATES:
            rate = row[f"false_{kind}_parametric"]
            low, high = row[f"{kind}_low_parametric"], row[f"{kind}_high_parametric"]
            assert low <= rate <= high and low <= ALPHA, (sd, kind, rate, low, high)
            if kind != "negligible":
                assert ALPHA <= high, (sd, kind, rate, low, high)


def test_the_misspecified_worlds_are_reported_and_a_collapse_makes_the_t_conservative():
    """Every world's three rates are reported with their bounds; a 10 % chance of losing 20
    points (σ 1) is heavy tails: the t test's false holds fall well under the parametric
    world's."""
    words, compared = _one_pair(1.0)
    row = cal.calibrate(words, compared, replicates=4000).iloc[0]
    for world in cal.WORLDS:
        for kind in cal.RATES:
            rate = row[f"false_{kind}_{world}"]
            assert row[f"{kind}_low_{world}"] <= rate <= row[f"{kind}_high_{world}"]
    assert row["holds_high_collapse"] < row["holds_low_parametric"]
    lines = cal.calibration_lines(cal.calibrate(words, compared, replicates=200), ALPHA)
    assert [line.split(" (")[0] for line in lines[2:6]] == [f"- {w}" for w in cal.WORLDS]


def test_each_world_draws_what_it_says():
    rng = _rng(7)
    values = np.array([[60.0, 62.0, 61.0, np.nan], [50.0, 53.0, 49.0, 52.0],
                       [70.0, 70.5, 71.0, 69.0]])
    means, residuals = cal.residuals(values)
    drawn = cal.resample(rng, means[None], values, 500, 0.0)[0]  # (500, settings, seeds)
    n = np.isfinite(values).sum(axis=1)
    scale = np.sqrt(n / (n - 1))
    columns = {tuple(np.round(residuals[:, s] * scale, 9)) for s in range(4)}
    for r in range(0, 500, 7):  # every drawn seed is one of the ledger's seeds, whole
        for s in range(4):
            shown = np.round(np.nan_to_num(drawn[r, :, s] - means), 9)
            assert tuple(shown) in columns
    assert np.isnan(drawn[:, 0]).any() and np.isfinite(drawn[:, 1:]).all()
    margin = values[1] - values[2]  # a unit's drawn margins: its own, centred and rescaled
    own = set(np.round((margin - margin.mean()) * np.sqrt(4 / 3), 9))
    assert set(np.round(drawn[:, 1] - drawn[:, 2] - (means[1] - means[2]), 9).ravel()) <= own
    shifted = cal.collapse(rng, np.zeros((200, 3, 6)))
    low, high = cal.clopper_pearson((shifted == -cal.COLLAPSE).sum(), shifted.size)
    assert set(np.unique(shifted)) == {0.0, -cal.COLLAPSE} and low <= 0.1 <= high
    c = np.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]])
    assert cal.unequal(np.array([1.0, 2.0, 5.0]), c).tolist() == [2.0, 6.0, 2.0]


def test_bad_input_is_refused():
    words, compared = _one_pair(1.0)
    with pytest.raises(ValueError, match="replicates: 0; allowed: an integer >= 1"):
        cal.calibrate(words, compared, replicates=0)
    with pytest.raises(ValueError, match="world: 'heavy'; allowed: parametric, resampled"):
        cal.world_sds("heavy", np.ones(2), np.array([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="allowed: 0 <= count <= trials"):
        cal.clopper_pearson(11, 10)


def test_clopper_pearson_is_the_exact_binomial_interval():
    """scipy's binomtest(...).proportion_ci(method='exact'), and the edges 0 and 1."""
    for k, n in ((0, 50), (3, 50), (500, 10_000), (50, 50)):
        low, high = cal.clopper_pearson(k, n)
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert (float(low), float(high)) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_the_bootstrap_of_a_ledger_reports_every_family_and_world():
    words, compared = _ledger()
    table = cal.calibrate(words, compared, replicates=1000)
    assert table["family"].tolist() == ["greater", "best", "trend", "within"]
    assert table["units"].tolist() == [2, 3, 1, 2] and table["left_out"].tolist() == [1, 0, 0, 0]
    assert table["exact"].all()
    assert table["false_negligible_parametric"].isna().tolist() == [False] * 3 + [True]
    for kind in cal.RATES:  # the rule's own world: no claim's rate above α
        assert (table[f"{kind}_low_parametric"].fillna(0) <= ALPHA).all(), kind
    assert table["false_holds_parametric"].max() > 0.02  # the boundary is reached
    fam = cal.families(table, ALPHA)
    assert len(fam) == len(cal.WORLDS) * (5 + 5 + 4)  # 4 families and 'all'; no negligible
    assert "within" not in set(fam.loc[fam.rate == "negligible", "family"])  # within's
    pooled = fam[(fam.world == "parametric") & (fam.rate == "holds") & (fam.family == "all")]
    assert pooled["pooled"].iloc[0] == pytest.approx(table["false_holds_parametric"].mean())
    again = cal.calibrate(words, compared, replicates=1000)
    pd.testing.assert_frame_equal(table, again)  # seeded: the same table every run
    lines = cal.calibration_lines(table, ALPHA)
    assert "0.1-point lattice" in lines[0] and "1,000 replicates" in lines[0]
    assert len(lines) == 2 + len(cal.WORLDS) + 3 + len(cal.WORLDS) * len(cal.RATES)


def test_a_boundary_no_means_reach_is_flagged():
    """Three settings, every pair within δ, fitted margins all positive: the pairs' margins
    m01 + m12 = m02 cannot all be δ at once."""
    words, compared = _ledger()
    s = [_side(f"t{j}", 60.0 - 1.5 * j + np.r_[0.0, 0.3, -0.2, 0.1, 0.0, -0.1] * j)
         for j in range(3)]
    compared["within"] = [_unit(f"t{a}-t{b}", (s[a], s[b]), (1.0, -1.0))
                          for a, b in ((0, 1), (1, 2), (0, 2))]
    table = cal.calibrate(words, compared, replicates=50)
    exact = table.set_index("id")["exact"]
    assert not exact["within"] and exact.drop(index="within").all()
    assert "1 claim whose units no means put" in cal.calibration_lines(table, ALPHA)[0]


def test_a_claim_without_a_judged_unit_has_no_rates():
    words, compared = _ledger()
    compared["trend"] = [Comparison("trend", reason="no run")]
    row = cal.calibrate(words, compared, replicates=50).set_index("id").loc["trend"]
    assert all(math.isnan(row[f"false_{k}_{w}"]) for k in cal.RATES for w in cal.WORLDS)
    assert row["units"] == 0


def test_a_settings_sd_is_its_own_noise_not_the_seeds_common_part():
    """Four settings, a seed's common part of sd 10 and own noise 1, 1, 1 and 3, on 400 seeds:
    the residuals of settings + seeds give each setting's own sd (the raw sd over seeds would
    be about 10); a setting with one seed takes the others' median."""
    rng = np.random.default_rng(5)
    own = np.array([1.0, 1.0, 1.0, 3.0])
    values = 10 * rng.standard_normal((1, 400)) + own[:, None] * rng.standard_normal((4, 400))
    _, sds = cal.spreads(values, 0.0, 7.0)
    assert sds == pytest.approx(own, rel=0.12)
    lonely = np.vstack([values[:, :5], [[50.0, *[np.nan] * 4]]])
    assert cal.spreads(lonely, 0.0, 7.0)[1][-1] == pytest.approx(
        np.median(cal.spreads(lonely, 0.0, 7.0)[1][:-1]))
