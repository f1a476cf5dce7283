"""The ledger's parametric bootstrap (fednorm.claims.calibration): where rules break (ties on
the lattice, a lattice near the noise, one setting at 3σ among units that share settings) the
rule's false holds stay within α + 3 Monte Carlo SE, and the bootstrap of a small hand-built
ledger puts each unit on its boundary and finds every family within α + 3 SE."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

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
    judged with the floor at ``rule_lattice``, with its Monte Carlo SE."""
    means, sds = np.asarray(means, dtype=float), np.asarray(sds, dtype=float)
    c = np.array([[1.0, -1.0]]) if contrasts is None else contrasts
    seen = np.ones((len(means), seeds), dtype=bool)
    values = cal.draw(rng, means, sds, seen, replicates, lattice, block)
    held = (verdict_codes(values, c, lattice=rule_lattice).codes == HOLDS).mean(axis=0)
    return held, cal.mc_se(held, ALPHA, replicates)


def test_tied_margins_on_the_lattice_hold_at_alpha_only_with_the_floor():
    """Two settings at the same mean, midway between two lattice points, σ 0.05 on the
    0.1-point lattice, 2 seeds: a quarter of the margins are +0.1, and both seeds at +0.1 give
    an sd of 0, t infinite, a hold 1 time in 16 without the floor; floored (sd ≥ 0.1 √(2/12))
    t is 3.5 on 1 df and the unit does not hold."""
    r = 20000
    floored, se = _false_holds([70.05, 70.05], [0.05, 0.05], 2, r, 0.1, 0.1, _rng(1), block=0.0)
    bare, bare_se = _false_holds([70.05, 70.05], [0.05, 0.05], 2, r, 0.1, 0.0, _rng(1),
                                 block=0.0)
    assert floored[0] <= ALPHA + 3 * se[0], floored
    assert bare[0] > ALPHA + 6 * bare_se[0], bare  # 1/16 = 0.0625
    assert bare[0] == pytest.approx(1 / 16, abs=4 * bare_se[0])


@pytest.mark.parametrize("seeds", [2, 6])
def test_tied_margins_with_a_seeds_common_part_stay_within_alpha(seeds):
    held, se = _false_holds([70.0, 70.0], [0.05, 0.05], seeds, 20000, 0.1, 0.1, _rng(2, seeds))
    assert held[0] <= ALPHA + 3 * se[0], held


@pytest.mark.parametrize("sigma_m", [0.2, 0.25, 0.3])
def test_a_margin_near_the_lattice_on_six_seeds_holds_at_alpha(sigma_m):
    """σ_m (the sd of a margin) 0.2–0.3 points on the 0.1-point lattice, 6 seeds."""
    sd = sigma_m / math.sqrt(2)
    held, se = _false_holds([70.0, 70.0], [sd, sd], 6, 20000, 0.1, 0.1,
                            _rng(3, round(100 * sigma_m)))
    assert held[0] <= ALPHA + 3 * se[0], (held, se)


@pytest.mark.parametrize("seeds", [2, 3, 6])
def test_one_setting_at_three_sigma_among_shared_pairs_holds_at_alpha_on_every_unit(seeds):
    """Four settings, setting 0 at 3σ, every pair a unit (each setting in three units), all
    equal: every unit's false holds within α + 3 SE."""
    eye = np.eye(4)
    pairs = np.array([eye[a] - eye[b] for a in range(4) for b in range(a + 1, 4)])
    held, se = _false_holds(np.full(4, 60.0), [3.0, 1.0, 1.0, 1.0], seeds, 8000, 0.1, 0.1,
                            _rng(4, seeds), contrasts=pairs)
    assert np.all(held <= ALPHA + 3 * se), (held, se)


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
def test_each_shift_puts_its_units_exactly_on_their_boundaries(name):
    words, compared = _ledger()
    claim = next(c for c in words.claims if c.id == name)
    values, contrasts, _ = cal.design_of(compared[name], 2)
    means, _ = cal.spreads(values, 0.1, 1.0)
    holds_at, against_at = cal.bounds(claim, words.rule, contrasts @ means)
    for u, at in enumerate(holds_at):
        for b in at:
            moved = cal.to_boundary(means, contrasts[u], [b])
            assert contrasts[u] @ moved == pytest.approx(b, abs=1e-9)
    moved = cal.to_boundary(means, contrasts, against_at[:, 0])
    assert contrasts @ moved == pytest.approx(against_at[:, 0], abs=1e-9)
    expected = {"greater": 0.0, "best": -0.5, "trend": 0.0}.get(name)
    if expected is None:  # within: ±δ for holds, δ on each fitted margin's side
        assert holds_at.tolist() == [[2.0, -2.0]] * len(contrasts)
        assert np.abs(against_at).tolist() == [[2.0]] * len(contrasts)
    else:
        assert np.all(holds_at == expected) and np.all(against_at == expected - 2.0)


def test_the_bootstrap_of_a_ledger_keeps_every_family_within_alpha():
    words, compared = _ledger()
    table = cal.calibrate(words, compared, replicates=2000)
    assert table["family"].tolist() == ["greater", "best", "trend", "within"]
    assert table["units"].tolist() == [2, 3, 1, 2] and table["left_out"].tolist() == [1, 0, 0, 0]
    assert table["exact"].all()
    for kind in cal.RATES:
        rate, se = table[f"false_{kind}"], table[f"se_{kind}"]
        assert (rate <= ALPHA + 3 * se).all(), table[["id", f"false_{kind}", f"se_{kind}"]]
    assert table["false_holds"].max() > 0.02  # the boundary is reached, not a slack world
    fam = cal.families(table, ALPHA)
    assert fam["ok"].all() and fam["family"].tolist()[-1] == "all"
    again = cal.calibrate(words, compared, replicates=2000)
    pd.testing.assert_frame_equal(table, again)  # seeded: the same table every run
    lines = cal.calibration_lines(table, ALPHA)
    assert 3 <= len(lines) <= 6 and "0.1-point lattice" in lines[0]
    assert "every family within α + 3 SE" in lines[0]


def test_a_boundary_no_means_reach_is_flagged():
    """Three settings, every pair within δ, fitted margins all positive: the pairs' margins
    m01 + m12 = m02 cannot all be δ at once."""
    words, compared = _ledger()
    s = [_side(f"t{j}", 60.0 - 1.5 * j + np.r_[0.0, 0.3, -0.2, 0.1, 0.0, -0.1] * j)
         for j in range(3)]
    compared["within"] = [_unit(f"t{a}-t{b}", (s[a], s[b]), (1.0, -1.0))
                          for a, b in ((0, 1), (1, 2), (0, 2))]
    table = cal.calibrate(words, compared, replicates=50).set_index("id")
    assert not table.loc["within", "exact"] and table.drop(index="within")["exact"].all()
    assert "1 claim whose units no means put" in cal.calibration_lines(table, ALPHA)[0]


def test_a_claim_without_a_judged_unit_has_no_rates():
    words, compared = _ledger()
    compared["trend"] = [Comparison("trend", reason="no run")]
    row = cal.calibrate(words, compared, replicates=50).set_index("id").loc["trend"]
    assert math.isnan(row["false_holds"]) and row["units"] == 0


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
