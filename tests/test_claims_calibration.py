"""The verdicts' error rates, by simulation, where the rule is strained: units that share
settings (all pairs of four settings, a ``best``, a trend, near-equalities), one setting at 3×
the others' σ, one look at α on 2, 3 and 6 seeds; false holds and false contradicted stay
within α + 3 Monte Carlo standard errors on every unit (each message states it).

The simulation is benchmarks/claims_calibration.py's (``python benchmarks/claims_calibration.py``
prints the table at 4,000 replicates a row; here fewer), judged by the rule's code over arrays
(fednorm.claims.rule.verdict_codes), which the first tests check unit by unit against
fednorm.claims.verdicts.judge_claim on the same runs.
"""

import importlib.util
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fednorm.claims import comparisons
from fednorm.claims import verdicts as real
from fednorm.claims.rule import CONTRADICTED as V_CONTRADICTED
from fednorm.claims.rule import HOLDS as V_HOLDS
from fednorm.claims.rule import NEGLIGIBLE as V_NEGLIGIBLE
from fednorm.claims.rule import verdict_codes
from fednorm.claims.stats import ALPHA
from fednorm.claims.words import CONTRADICTED, HOLDS, INCONCLUSIVE, NEGLIGIBLE, Relation, Rule

ROOT = Path(__file__).resolve().parents[1]


def _simulation():
    spec = importlib.util.spec_from_file_location(
        "claims_calibration", ROOT / "benchmarks" / "claims_calibration.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


sim = _simulation()
CODE = {HOLDS: V_HOLDS, CONTRADICTED: V_CONTRADICTED, NEGLIGIBLE: V_NEGLIGIBLE, INCONCLUSIVE: 0}
SEED = 20240611


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([SEED, *key])


# ---------------------------------------------------------------------------------------------
# The vectorized judge is judge_claim.


def _side(name: str, values: np.ndarray, diverged: np.ndarray) -> comparisons.Side:
    seeds = pd.Index(range(len(values)), name="seed")
    keep = ~np.isnan(values) | diverged  # NaN and not diverged: no such run
    runs = pd.DataFrame({"diverged": diverged, "value": np.where(diverged, np.nan, values)},
                        index=seeds)[keep]
    return comparisons.Side(name, runs, pd.DataFrame({"run_id": [name]}))


def _judged(design, values: np.ndarray, diverged: np.ndarray, alpha: float) -> tuple:
    """judge_claim on one experiment's runs (settings, seeds; NaN: no run), ``diverged``
    runs marked: per unit its verdict code, p_for, p_against, its diverged seeds for and
    against (the vectorized judge's inputs) and its Holm-adjusted p_against."""
    sides = [_side(f"setting {j}", values[j], diverged[j]) for j in range(len(values))]
    units = []
    for u, c in enumerate(design.contrasts):
        involved = np.flatnonzero(c)
        if len(involved) == 2 and c[involved[0]] < 0:  # a pair: (better, worse)
            involved = involved[::-1]
        unit = comparisons.Comparison(f"unit {u}", tuple(sides[j] for j in involved),
                                      tuple(float(c[j]) for j in involved), ("experiment",))
        units.append((unit, comparisons.margins(unit, design.within)))
    relation = Relation("within" if design.within else "greater", "sim", "simulation", "",
                        ("experiment",), "within" if design.within else "greater",
                        delta=sim.DELTA if design.within else None, sesoi=sim.SESOI)
    fits = real.pools(units)
    out = {}
    for label in np.unique(design.claim):
        members = np.flatnonzero(design.claim == label)
        judged = real.judge_claim(relation, [units[u] for u in members], fits,
                                  Rule(alpha=ALPHA), alpha)
        for u, j in zip(members, judged, strict=True):
            out[u] = (CODE[j.verdict], j.p_for, j.p_against, j.n_for, j.n_against, j.p_holm)
    return tuple(np.array([out[u][k] for u in range(len(design.contrasts))]) for k in range(6))


@pytest.mark.parametrize("name", sorted(sim.designs()))
def test_the_vectorized_verdicts_are_judge_claims_unit_by_unit(name):
    """Replicates of 4 settings × 6 seeds with effects from −8 to 8 points, runs missing and
    diverged (a diverged run's seed counts for or against), and seeds cut to 1–6: the same
    codes and p's as verdicts.pools and judge_claim, at α, all replicates in one call."""
    design, replicates = sim.designs()[name], 24
    rng = _rng(1, len(name))
    means = rng.uniform(-8, 8, (replicates, sim.SETTINGS))
    values = (sim.BLOCK * rng.standard_normal((replicates, 1, 6)) + means[..., None]
              + 1.5 * rng.standard_normal((replicates, sim.SETTINGS, 6)))
    values[rng.uniform(size=values.shape) < 0.08] = np.nan
    diverged = rng.uniform(size=values.shape) < 0.06
    for r in range(replicates):
        values[r, :, 1 + r % 6:] = np.nan
        diverged[r, :, 1 + r % 6:] = False
    cells = np.where(diverged, np.nan, values)
    expected = [_judged(design, values[r], diverged[r], ALPHA) for r in range(replicates)]
    n_for = np.stack([e[3] for e in expected])
    n_against = np.stack([e[4] for e in expected])
    got = verdict_codes(cells, design.contrasts, design.claim, within=design.within,
                        delta=sim.DELTA, sesoi=sim.SESOI, alpha=ALPHA, n_for=n_for,
                        n_against=n_against)
    seen = set()
    for r, (codes, p_for, p_against, _, _, p_holm) in enumerate(expected):
        assert got.codes[r].tolist() == codes.tolist(), r
        assert got.p_for[r] == pytest.approx(p_for, rel=1e-9, abs=1e-12)
        assert got.p_against[r] == pytest.approx(p_against, rel=1e-9, abs=1e-12)
        assert got.p_holm[r] == pytest.approx(p_holm, rel=1e-9, abs=1e-12)
        seen |= set(codes.tolist())
    assert len(seen) >= 2  # more than one verdict among them
    assert n_for.any() or n_against.any()


def test_one_seed_never_gives_a_firm_verdict_and_bad_claims_are_refused():
    values = _rng(2).normal(0, 1, (50, 4, 1)) + np.array([0.0, 20, 40, 60])[:, None]
    design = sim.designs()["pairs"]
    assert not verdict_codes(values, design.contrasts).codes.any()
    with pytest.raises(ValueError, match=r"claim: shape \(2,\); allowed: \(6,\)"):
        verdict_codes(values, design.contrasts, np.array([0, 1]))


# ---------------------------------------------------------------------------------------------
# The rates, on every unit.

REPLICATES = 3000


@pytest.mark.parametrize("strained", [False, True], ids=["equal", "3 sigma"])
@pytest.mark.parametrize("name", sorted(sim.designs()))
@pytest.mark.parametrize("seeds", sim.SEEDS)
def test_false_verdicts_stay_within_alpha_on_every_unit(name, strained, seeds):
    design = sim.designs()[name]
    holds, contradicted = sim.errors(design, _rng(3, len(name), strained, seeds), REPLICATES,
                                     sim.sigmas(5.0, strained), seeds)
    for what, rate in (("holds", holds), ("contradicted", contradicted)):
        assert rate.ok(), (f"false {what} of {name} ({'3σ on 0' if strained else 'equal σ'}, "
                           f"{seeds} seeds): {rate} above α + 3 SE")


def test_a_setting_at_three_sigma_breaks_the_equal_variance_model_and_not_the_rule():
    """What decided the rule: all pairs of four settings on 3 seeds, setting 0 at 3σ. The
    equal-variance model (and limma's moderation: four settings give its prior too little)
    holds the pairs touching it falsely about twice as often as α; the unit's own margins stay
    at α."""
    out = sim.models(_rng(5), 4000, 3, strained=True)
    se = math.sqrt(ALPHA * (1 - ALPHA) / (4000 * 3))
    assert out["unit"][0] <= ALPHA + 3 * se, out
    assert out["equal"][0] > ALPHA + 6 * se and out["moderated"][0] > ALPHA + 6 * se, out


def test_the_detectable_margin_on_four_seeds_holds_about_three_times_in_four():
    """stats.detectable's central-t approximation at α on 3 df: 0.70–0.85."""
    truth, rate = sim.power(_rng(6), 4000, 4)
    assert 0.70 <= rate <= 0.85, (truth, rate)


def test_every_unit_on_the_boundary_is_counted_and_no_other():
    """A sign claim's holds and contradicted share one boundary (all settings equal); δ apart,
    a near-equality's units are on theirs only between adjacent settings."""
    for name in ("pairs", "best", "trend"):
        design = sim.designs()[name]
        assert design.boundary(design.contradicted_null, V_CONTRADICTED).all()
        assert design.boundary(design.holds_null, V_HOLDS).all()
    design = sim.designs()["within"]
    pairs = list(itertools.combinations(range(sim.SETTINGS), 2))
    adjacent = [b - a == 1 for a, b in pairs]
    assert design.boundary(design.contradicted_null, V_CONTRADICTED).tolist() == adjacent
