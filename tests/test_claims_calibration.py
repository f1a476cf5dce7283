"""The verdicts' error rates, by simulation: margins with a known truth (no effect, an effect of
−sesoi, a near-equality at its edge) at the run spreads the quick profile shows (σ 1 to 20
points) and 1, 2, 3 and 6 seeds, judged as fednorm.claims.verdicts judges them; false holds and
false contradicted each stay within α (three Monte Carlo standard errors, stated in each
message) for every relation kind, a claim of five units and two looks.

The simulation is benchmarks/claims_calibration.py's (``python benchmarks/claims_calibration.py``
prints the table): experiments of 12 units sharing one σ, each unit's variance pooled over the
other 11 (stats.pooled, vectorized there; checked here against the real one and against
verdicts.judge_claim on the same runs, unit by unit).
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fednorm.claims import verdicts as real
from fednorm.claims.stats import detectable
from fednorm.claims.words import CONTRADICTED, HOLDS, INCONCLUSIVE, Relation, Rule

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
ALPHA, SESOI, DELTA, UNITS = sim.ALPHA, sim.SESOI, sim.DELTA, sim.UNITS
CODE = {HOLDS: sim.HOLDS, CONTRADICTED: sim.CONTRADICTED, INCONCLUSIVE: 0}
SEED = 20240611

POOL_BUG = (
    "BUG: stats.pooled's moment fit (limma's fitFDist) on the 11 other units' variances of 1 to "
    "5 degrees of freedom each: where their log-variances spread more than chance makes them by "
    "chance (about a third of experiments of one σ), d0 comes out small (about 1.6 on one "
    "degree of freedom) and s0² about half the common variance, so the moderated variance is "
    "too small on too few degrees of freedom: false holds and false contradicted 0.057 "
    "(2 seeds), 0.054 (3), 0.052 (6) at α 0.05 (480,000 draws each, "
    "benchmarks/claims_calibration.py)")


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([SEED, *key])


# ---------------------------------------------------------------------------------------------
# The simulation is the rule: its pools are stats.pooled's, its verdicts judge_claim's.


def _judged(case, runs: np.ndarray, claim: int) -> list[list]:
    """verdicts.pools and verdicts.judge_claim on one experiment's ``runs`` (units, seeds,
    sides; NaN: the unit has no such seed), its units in claims of ``claim``."""
    units = []
    for u, unit_runs in enumerate(runs):
        kept = unit_runs[~np.isnan(unit_runs[:, 0])]
        sides = tuple(real.Side(
            f"side {j}", pd.DataFrame({"diverged": False, "value": kept[:, j]},
                                      index=pd.Index(range(len(kept)), name="seed")),
            pd.DataFrame({"run_id": [f"unit {u} side {j}"]})) for j in range(kept.shape[1]))
        unit = real.Comparison(f"unit {u}", sides, case.coefs, ("experiment",))
        units.append((unit, real.margins(unit, case.kind == "within")))
    relation = Relation(case.kind, "sim", "simulation", "", ("experiment",), case.kind,
                        delta=DELTA if case.kind == "within" else None, sesoi=SESOI)
    pool_of = real.pools(units)
    return [real.judge_claim(relation, units[c:c + claim], pool_of, Rule(alpha=ALPHA), ALPHA)
            for c in range(0, len(units) - len(units) % claim, claim)]


@pytest.mark.parametrize("kind", sorted(sim.CASES))
def test_the_simulated_verdicts_are_judge_claims_unit_by_unit(kind):
    case, claim = sim.CASES[kind], 3
    truths = np.linspace(-8.0, 8.0, UNITS)
    runs = sim.runs(_rng(0), case, 6, 5, 1.5) + np.stack([case.levels(t) for t in truths])[
        None, :, None, :]
    runs[:, np.arange(UNITS) % 4 == 0, 1:] = np.nan  # one seed
    runs[:, np.arange(UNITS) % 4 == 1, 2:] = np.nan  # two seeds
    m = runs @ np.asarray(case.coefs)
    n, p_for, p_against = sim.p_values(m, case, sim.pools(m, case.scale))
    codes = sim.verdicts(m, case, claim=claim)
    seen = set()
    for e, experiment in enumerate(runs):
        judged = [u for units in _judged(case, experiment, claim) for u in units]
        assert [CODE[u.verdict] for u in judged] == codes[e].ravel().tolist()
        for u, unit in enumerate(judged):
            if n[e, u] >= 2:
                assert (unit.test.p_for, unit.test.p_against) == pytest.approx(
                    (p_for[e, u], p_against[e, u]), rel=1e-9, abs=1e-15)
        seen |= {u.verdict for u in judged}
    assert seen == {HOLDS, CONTRADICTED, INCONCLUSIVE}


@pytest.mark.parametrize(("seeds", "units"), [(2, 12), (3, 12), (6, 3), (3, 2)])
def test_the_simulated_pools_are_stats_pooled_on_the_other_units(seeds, units):
    m = sim.noise_margins(_rng(1, seeds), sim.CASES["greater"], 40, seeds,
                          np.geomspace(1.0, 20.0, units), units)
    m[::3, 0, 1:] = np.nan  # a unit of one seed: out of the others' pools
    fast, slow = sim.pools(m, 2.0), sim.real_pools(m, 2.0)
    assert np.array_equal(np.isnan(fast[0]), np.isnan(slow[0]))
    assert fast[0] == pytest.approx(slow[0], rel=1e-12, nan_ok=True)
    assert fast[1] == pytest.approx(slow[1], rel=1e-12)


@pytest.mark.parametrize("kind", ["greater", "trend"])
def test_a_sign_relations_verdicts_at_its_null_boundaries_do_not_depend_on_the_spread(kind):
    """Margins σ·z hold, and margins σ·z − sesoi are contradicted, on the same draws at every σ:
    each test's t statistic is the same. So the sign relations' error rates below, at σ 5, are
    those at σ 1 and 20 too (the benchmark prints every σ); a near-equality's are not (δ / σ
    matters)."""

    def codes(case, sigma):
        noise = sim.noise_margins(_rng(2), case, 2000, 3, sigma)
        pool = sim.pools(noise, case.scale)
        return np.stack([sim.verdicts(noise + case.holds_null, case, pool) == sim.HOLDS,
                         sim.verdicts(noise + case.contradicted_null, case, pool)
                         == sim.CONTRADICTED])

    case, within = sim.CASES[kind], sim.CASES["within"]
    for sigma in sim.SIGMAS[1:]:
        assert np.array_equal(codes(case, sigma), codes(case, sim.SIGMAS[0]))
    assert not np.array_equal(codes(within, 20.0), codes(within, 1.0))


# ---------------------------------------------------------------------------------------------
# The error rates.


def _cell(kind, sigma, seeds, experiments, bug=None):
    marks = [pytest.mark.xfail(raises=AssertionError, strict=True, reason=bug)] if bug else []
    return pytest.param(kind, sigma, seeds, experiments, marks=marks,
                        id=f"{kind}-sigma{sigma:g}-{seeds}seeds")


# experiments per cell: enough that a rate of 0.052 reads as above α + 3 SE (2 seeds: 0.057
# needs fewer). The near-equality at σ 1 on 6 seeds (0.0514 ± 0.0003 in the benchmark) is left
# out: its excess is below what this file resolves in its time.
CELLS = [
    *(_cell(kind, 5.0, seeds, r, POOL_BUG if seeds > 1 else None)
      for kind in ("greater", "trend")
      for seeds, r in ((1, 1000), (2, 5000), (3, 12000), (6, 40000))),
    *(_cell("within", 1.0, seeds, r, POOL_BUG if seeds > 1 else None)
      for seeds, r in ((1, 1000), (2, 5000), (3, 12000))),
    *(_cell("within", sigma, seeds, 4000) for sigma in (5.0, 20.0) for seeds in sim.SEEDS),
]


@pytest.mark.parametrize(("kind", "sigma", "seeds", "experiments"), CELLS)
def test_false_holds_and_false_contradicted_stay_within_alpha(kind, sigma, seeds, experiments):
    case = sim.CASES[kind]
    noise = sim.noise_margins(_rng(3, int(sigma), seeds), case, experiments, seeds, sigma)
    holds, contradicted = sim.error_rates(case, noise)
    cell = f"{kind}, σ {sigma:g}, {seeds} seeds, {UNITS} units an experiment"
    if seeds < 2:  # no firm verdict from one seed, whatever the margin
        assert holds.rate == contradicted.rate == 0.0
        assert not sim.verdicts(noise + 50.0 * sigma, case).any()
        assert not sim.verdicts(noise - 50.0 * sigma, case).any()
        return
    assert holds.rate <= holds.bound(), (
        f"{cell}: false holds at margin {case.holds_null:g}: {holds} > α + 3 SE")
    assert contradicted.rate <= contradicted.bound(), (
        f"{cell}: false contradicted at margin {case.contradicted_null:g}: {contradicted} "
        "> α + 3 SE")


def test_a_claim_of_five_units_at_minus_sesoi_is_contradicted_at_most_alpha():
    """Holm over the claim's units keeps the claim's false contradicted at α; without it, one
    of five units contradicts about a quarter of the time."""
    case = sim.CASES["greater"]
    noise = sim.noise_margins(_rng(4), case, 4000, 3, 5.0)
    _, claim = sim.error_rates(case, noise, claim=5)
    unadjusted = sim.verdicts(noise - SESOI, case)[:, :10, 0].reshape(-1, 2, 5)
    any_unit = float((unadjusted == sim.CONTRADICTED).any(axis=-1).mean())
    assert claim.rate <= claim.bound(), f"claim of 5 (Holm): false contradicted {claim}"
    assert any_unit > 3 * ALPHA, f"unadjusted: {any_unit:.4f}"


@pytest.mark.parametrize("seeds", sim.SEEDS)
def test_two_looks_at_half_alpha_keep_false_verdicts_within_alpha(seeds):
    """The first look on ``seeds`` seeds, the second with two more where the first is not firm
    (fednorm.claims.stage2), each at α / 2: a false verdict at either look at most α."""
    case = sim.CASES["greater"]
    noise = sim.noise_margins(_rng(5, seeds), case, 3000, seeds + 2, 5.0)
    holds = sim.two_looks(case, noise, case.holds_null, sim.HOLDS)
    contradicted = sim.two_looks(case, noise, case.contradicted_null, sim.CONTRADICTED)
    assert holds.rate <= holds.bound(), f"{seeds} then {seeds + 2} seeds: false holds {holds}"
    assert contradicted.rate <= contradicted.bound(), (
        f"{seeds} then {seeds + 2} seeds: false contradicted {contradicted}")


# ---------------------------------------------------------------------------------------------
# Power: the rates above are not low because nothing is ever decided.


@pytest.mark.parametrize(("kind", "truth", "verdict"), [
    ("greater", 3.0, sim.HOLDS), ("greater", -SESOI - 3.0, sim.CONTRADICTED),
    ("within", 0.0, sim.HOLDS), ("trend", 3.0, sim.HOLDS)])
def test_an_effect_of_three_points_is_found_on_six_seeds_at_sigma_1(kind, truth, verdict):
    case = sim.CASES[kind]
    codes = sim.verdicts(sim.noise_margins(_rng(6), case, 500, 6, 1.0) + truth, case)
    assert (codes == verdict).mean() > 0.8


def test_the_detectable_margin_on_three_seeds_holds_four_times_in_five_through_the_pool():
    """stats.detectable at the pool's degrees of freedom (11 other units × 2 + 2): the rule
    finds it at about 0.8. On its own two degrees of freedom a unit would find it about half
    as often: the pool is what the power rests on."""
    case, sigma, seeds = sim.CASES["greater"], 5.0, 3
    truth = detectable(seeds, case.scale, sigma, UNITS * (seeds - 1))
    codes = sim.verdicts(sim.noise_margins(_rng(7), case, 4000, seeds, sigma) + truth, case)
    rate = sim.Rate.of(codes == sim.HOLDS)
    assert abs(rate.rate - 0.8) <= 0.03, f"holds at the detectable margin {truth:.2f}: {rate}"


def test_a_unit_of_one_seed_among_pooled_units_gets_no_firm_verdict():
    case = sim.CASES["greater"]
    runs = sim.runs(_rng(8), case, 1, 6, 1.0)[0] + case.levels(50.0)
    runs[0, 1:] = np.nan
    unit = _judged(case, runs, UNITS)[0][0]
    assert unit.test is not None and np.isfinite(unit.test.se) and unit.test.estimate > 40
    assert unit.verdict == INCONCLUSIVE
