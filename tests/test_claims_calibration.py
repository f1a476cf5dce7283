"""The verdicts' error rates, by simulation: margins with a known truth (no effect, an effect of
−sesoi, a near-equality at its edge) at the run spreads the quick profile shows (σ 1 to 20
points) and 1, 2, 3 and 6 seeds, judged as fednorm.claims.verdicts judges them; false holds and
false contradicted each stay within α (three Monte Carlo standard errors, stated in each
message) for every relation kind, a claim of five units and two looks.

The simulation is benchmarks/claims_calibration.py's (``python benchmarks/claims_calibration.py``
prints the table): experiments of 12 units sharing one σ, each unit's variance pooled with the
other units' unless its own is larger than theirs by the one-sided F test (stats.larger), then
tested on its own (vectorized there; checked here against stats.larger, verdicts.pools and
verdicts.judge_claim on the same runs, unit by unit).

The F test selects, but on the safe side: under one σ a unit's own variance and the others'
pool are independent, so it sends a share ``HOMOGENEITY`` of the units to their own variance;
where it pools, the pooled t is exact (the F ratio is independent of the pooled sum and of the
mean); those it does not pool have a large variance by construction and almost never hold.
The rule's false holds and false contradicted are about 0.95 α (0.047 to 0.048 at α 0.05 on 2,
3 and 6 seeds, a claim of five units' false contradicted 0.045 to 0.047), which
:func:`test_false_verdicts_stay_within_alpha_to_a_fine_resolution` asserts at α + 3 SE of
360,000 draws. The price is power: a unit sent to its own variance has n − 1 degrees of
freedom only (:func:`test_the_detectable_margin_on_three_seeds_holds_three_times_in_four`).
"""

import functools
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fednorm.claims import verdicts as real
from fednorm.claims.stats import HOMOGENEITY, Pool, detectable, larger
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

def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([SEED, *key])


# ---------------------------------------------------------------------------------------------
# The simulation is the rule: its F test is stats.larger, its pools verdicts.pools', its
# verdicts judge_claim's.


def test_the_simulated_f_test_is_stats_larger():
    """Unit by unit, on variances that differ by up to e^±2, 0 to 6 degrees of freedom, pools
    of 0 to 40 and variances that are not finite or not above 0: the same decision as
    stats.larger (both outcomes among them), at the default level, at 0.2 and at 0 (never)."""
    rng = _rng(9)
    size = 4000
    s2 = np.exp(rng.uniform(-2, 2, size))
    s0 = np.exp(rng.uniform(-2, 2, size))
    d = rng.integers(0, 7, size).astype(float)
    d0 = rng.integers(0, 41, size).astype(float)
    s2[::11], s2[1::13], s2[2::17] = np.nan, np.inf, 0.0
    s0[3::19], s0[4::23] = np.nan, 0.0
    for level in (HOMOGENEITY, 0.2, 0.0):
        fast = sim.larger(s2, d, s0, d0, level)
        slow = [larger(float(v), float(k), Pool(float(p), float(k0), 1), level)
                for v, k, p, k0 in zip(s2, d, s0, d0, strict=True)]
        assert fast.tolist() == slow
        assert (0 < fast.sum() < size) if level else not fast.any()


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
    """Units of 1, 2 and 5 seeds; in every other experiment one unit ten times noisier than
    the rest, so that the F test sends it to its own variance there and pools it elsewhere."""
    case, claim, experiments = sim.CASES[kind], 3, 6
    truths = np.linspace(-8.0, 8.0, UNITS)
    sigma = np.full((experiments, UNITS), 1.5)
    sigma[1::2, 6] = 15.0
    runs = sim.runs(_rng(0), case, experiments, 5, sigma) + np.stack(
        [case.levels(t) for t in truths])[None, :, None, :]
    runs[:, np.arange(UNITS) % 4 == 0, 1:] = np.nan  # one seed
    runs[:, np.arange(UNITS) % 4 == 1, 2:] = np.nan  # two seeds
    m = runs @ np.asarray(case.coefs)
    solo = sim.alone(m, case.scale)
    assert solo[1::2, 6].all() and not solo[::2, 6].any()
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
def test_the_simulated_pools_are_verdicts_pools(seeds, units):
    """Per unit: the others' plain pooled variance and its degrees of freedom, none where the
    unit's own variance is larger by the F test (one unit 10 times noisier in odd experiments,
    found on most of them); units of one seed and of no spread are left out of the others'
    pools and are pooled themselves."""
    sigma = np.full((40, units), 5.0)
    sigma[1::2, 0] = 50.0
    case = sim.CASES["greater"]
    m = sim.noise_margins(_rng(1, seeds, units), case, 40, seeds, sigma, units)
    m[::3, 0, 1:] = np.nan  # a unit of one seed
    m[1::4, -1] = 0.0  # a unit of no spread
    fast, slow = sim.pools(m, case.scale), sim.real_pools(m, case.coefs)
    assert np.array_equal(np.isnan(fast[0]), np.isnan(slow[0]))
    assert fast[0] == pytest.approx(slow[0], rel=1e-12, nan_ok=True)
    assert np.array_equal(fast[1], slow[1])
    solo = sim.alone(m, case.scale)
    assert solo[1::2, 0].any() and (fast[1] > 0).any()
    assert not (fast[1][solo] > 0).any()


@pytest.mark.parametrize("kind", ["greater", "trend"])
def test_a_sign_relations_verdicts_at_its_null_boundaries_do_not_depend_on_the_spread(kind):
    """Margins σ·z hold, and margins σ·z − sesoi are contradicted, on the same draws at every σ:
    each test's t statistic is the same, and the F test reads the variances' ratios. So a
    sign relation's error rates are the same at every σ (the cells below draw each σ afresh);
    a near-equality's are not (δ / σ matters)."""

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


CELLS = [pytest.param(kind, sigma, seeds, 2000 if seeds > 1 else 200,
                      id=f"{kind}-sigma{sigma:g}-{seeds}seeds")
         for kind in ("greater", "trend", "within") for sigma in sim.SIGMAS for seeds in sim.SEEDS]


@pytest.mark.parametrize(("kind", "sigma", "seeds", "experiments"), CELLS)
def test_false_holds_and_false_contradicted_stay_within_alpha(kind, sigma, seeds, experiments):
    case = sim.CASES[kind]
    noise = sim.noise_margins(_rng(3, int(sigma), seeds, len(kind)), case, experiments, seeds,
                              sigma)
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


def test_a_rate_among_every_unit_is_the_rate_over_the_experiments():
    """Rate.among's ratio-estimator SE: over every unit, Rate.of's SE of the experiments' rates;
    over some, the rate of those (the SE at least the binomial one)."""
    hits = _rng(13).random((500, UNITS)) < np.linspace(0.01, 0.3, 500)[:, None]
    every, of = sim.Rate.among(hits, np.ones_like(hits)), sim.Rate.of(hits)
    assert (every.rate, every.draws) == (of.rate, of.draws)
    assert every.se == pytest.approx(of.se, rel=1e-12)
    chosen = _rng(14).random(hits.shape) < 0.3
    some = sim.Rate.among(hits, chosen)
    assert (some.rate, some.draws) == (hits[chosen].mean(), chosen.sum())
    assert some.se >= np.sqrt(ALPHA * (1 - ALPHA) / chosen.sum())


@functools.cache
def _selection(seeds: int) -> dict[str, object]:
    """The F test's selection, greater at σ 5 on 30,000 experiments (360,000 units): the share
    of units it sends to their own variance, false holds of the units it pools and of those it
    does not, the rule's false holds and false contradicted, and a claim of five units' false
    contradicted (Holm)."""
    case = sim.CASES["greater"]
    noise = sim.noise_margins(_rng(10, seeds), case, 30000, seeds, 5.0)
    share, pooled, alone = sim.by_gate(case, noise)
    holds, contradicted = sim.error_rates(case, noise)
    _, claim = sim.error_rates(case, noise, claim=5)
    return {"alone share": share, "pooled": pooled, "alone": alone, "holds": holds,
            "contradicted": contradicted, "claim of 5": claim}


@pytest.mark.parametrize("seeds", [2, 3, 6])
def test_the_f_tests_selection_keeps_the_pooled_t_exact(seeds):
    """Under one σ a unit's own variance is independent of the others' pool, so the F test
    sends a share HOMOGENEITY of the units to their own variance (exact, within 0.003); where
    it pools, the pooled t is exact (the F ratio is independent of the pooled sum Σ d s² and of
    the mean): false holds at α within 3 SE; the units it does not pool have a large variance
    by selection and hold falsely at most 0.01 (measured 0 on 2 and 3 seeds, 0.001 on 6). So
    the rule's false holds are about (1 − HOMOGENEITY) α: at most α, and not below 0.9 α."""
    found = _selection(seeds)
    pooled, alone, holds = found["pooled"], found["alone"], found["holds"]
    assert abs(found["alone share"] - HOMOGENEITY) <= 0.003, found["alone share"]
    assert abs(pooled.rate - ALPHA) <= 3 * pooled.se, f"pooled: {pooled}"
    assert alone.rate <= 0.01, f"alone: {alone}"
    assert 0.9 * ALPHA <= holds.rate <= ALPHA, f"false holds: {holds}"


@pytest.mark.parametrize("seeds", [2, 3, 6])
@pytest.mark.parametrize("rate", ["holds", "contradicted", "claim of 5"])
def test_false_verdicts_stay_within_alpha_to_a_fine_resolution(rate, seeds):
    """360,000 units (a claim of five: 60,000 claims), SE about 0.0004 (0.0009): measured 0.047
    to 0.048 (a claim of five 0.045 to 0.047), where Bartlett's experiment-wide pretest before
    the F test gave 0.052 (0.054)."""
    found = _selection(seeds)[rate]
    assert found.rate <= found.bound(), f"{seeds} seeds, {rate}: {found} > α + 3 SE"


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
# Where the variance model is strained.


def test_a_unit_four_times_noisier_than_the_rest_is_held_falsely_far_less_than_under_the_pool():
    """One unit at 4 × the other eleven's σ 5, on 3 seeds: the F test (2 degrees of freedom
    against the others' 22) sends it to its own variance about 0.81 of the time, so it is held
    falsely about 0.075 of the time (α 0.05; 0.13 on 2 seeds, 0.054 on 6): far less than the
    0.27 of the plain pool with no F test, not yet α (the F test misses it a fifth of the time,
    and then its variance, pooled, is understated); the quiet units stay within α (below it:
    the noisy unit inflates their pool where it is in it)."""
    case = sim.CASES["greater"]
    sigma = np.r_[20.0, np.full(UNITS - 1, 5.0)]
    noise = sim.noise_margins(_rng(11), case, 4000, 3, sigma)
    codes, plain = sim.strained(case, noise), sim.strained(case, noise, level=0.0)
    noisy, quiet = sim.Rate.of(codes[:, 0] == sim.HOLDS), sim.Rate.of(codes[:, 1:] == sim.HOLDS)
    unpooled = float((plain[:, 0] == sim.HOLDS).mean())
    assert 0.75 <= sim.alone(noise, case.scale)[:, 0].mean() <= 0.87
    assert noisy.rate <= 0.10, f"the noisy unit: {noisy}"
    assert unpooled >= 0.24 and unpooled - noisy.rate >= 0.15, (
        f"the noisy unit with no F test {unpooled:.4f}, with it {noisy}")
    assert quiet.rate <= quiet.bound(), f"the quiet units: {quiet}"


SPREADS = {
    "one unit at 2 × the others' σ 5": lambda rng, n: np.r_[10.0, np.full(UNITS - 1, 5.0)],
    "σ log-spaced from 20 to 1": lambda rng, n: np.geomspace(20.0, 1.0, UNITS),
    "σ² scattered at random, 5² · 5 / χ²_5 a unit":
        lambda rng, n: 5.0 * np.sqrt(5.0 / rng.chisquare(5.0, (n, UNITS))),
}


@pytest.mark.parametrize("spread", list(SPREADS))
def test_units_of_unequal_sigma_are_held_falsely_within_alpha_on_three_seeds(spread):
    """σ spread over the twelve units, on 3 seeds: false holds over every unit within α (measured
    0.040, 0.030 and 0.040); the noisiest unit (the first, of the first two spreads) is held
    falsely more often than α, but far less than under the plain pool: 0.10 against 0.17 at
    2 × (the F test on 2 degrees of freedom finds a 4-fold variance 0.44 of the time), 0.09
    against 0.23 log-spaced."""
    case, experiments = sim.CASES["greater"], 2000
    rng = _rng(12, len(spread))
    noise = sim.noise_margins(rng, case, experiments, 3, SPREADS[spread](rng, experiments))
    codes, plain = sim.strained(case, noise), sim.strained(case, noise, level=0.0)
    every = sim.Rate.of(codes == sim.HOLDS)
    assert every.rate <= every.bound(), f"{spread}, every unit: {every}"
    if not spread.startswith("σ² scattered"):
        noisiest = sim.Rate.of(codes[:, 0] == sim.HOLDS)
        unpooled = float((plain[:, 0] == sim.HOLDS).mean())
        assert noisiest.rate <= 0.14 and unpooled - noisiest.rate >= 0.04, (
            f"{spread}, the noisiest unit: {noisiest}; with no F test {unpooled:.4f}")


# ---------------------------------------------------------------------------------------------
# Power: the rates above are not low because nothing is ever decided.


@pytest.mark.parametrize(("kind", "truth", "verdict"), [
    ("greater", 3.0, sim.HOLDS), ("greater", -SESOI - 3.0, sim.CONTRADICTED),
    ("within", 0.0, sim.HOLDS), ("trend", 3.0, sim.HOLDS)])
def test_an_effect_of_three_points_is_found_on_six_seeds_at_sigma_1(kind, truth, verdict):
    case = sim.CASES[kind]
    codes = sim.verdicts(sim.noise_margins(_rng(6), case, 500, 6, 1.0) + truth, case)
    assert (codes == verdict).mean() > 0.8


def test_the_detectable_margin_on_three_seeds_holds_three_times_in_four():
    """stats.detectable at the plain pool's degrees of freedom (12 units × 2) is found 0.80 of
    the time with the pool always (0.52 with each unit on its own two degrees of freedom: the
    pool is what the power rests on). The rule finds it about 0.76 of the time, below 0.8:
    the F test reads only the variances, so under one σ it still sends a share HOMOGENEITY of
    the units to their own variance, and those, of a large variance by selection on 2 degrees
    of freedom, hold about 0.01 of the time (0.80 under the pool): 0.8 − 0.05 × 0.79."""
    case, sigma, seeds = sim.CASES["greater"], 5.0, 3
    truth = detectable(seeds, case.scale, sigma, UNITS * (seeds - 1))
    noise = sim.noise_margins(_rng(7), case, 4000, seeds, sigma)
    codes = sim.verdicts(noise + truth, case)[..., 0]
    plain = sim.verdicts(noise + truth, case, sim.pools(noise, case.scale, 0.0))[..., 0]
    solo = sim.alone(noise, case.scale)
    rate, pooled = sim.Rate.of(codes == sim.HOLDS), sim.Rate.of(plain == sim.HOLDS)
    assert 0.73 <= rate.rate <= 0.79, f"holds at the detectable margin {truth:.2f}: {rate}"
    assert abs(pooled.rate - 0.8) <= 0.02, f"with no F test: {pooled}"
    assert (codes[solo] == sim.HOLDS).mean() <= 0.05
    assert np.array_equal(codes[~solo], plain[~solo])  # a unit the F test pools: no change


def test_a_unit_of_one_seed_among_pooled_units_gets_no_firm_verdict():
    case = sim.CASES["greater"]
    runs = sim.runs(_rng(8), case, 1, 6, 1.0)[0] + case.levels(50.0)
    runs[0, 1:] = np.nan
    unit = _judged(case, runs, UNITS)[0][0]
    assert unit.test is not None and np.isfinite(unit.test.se) and unit.test.estimate > 40
    assert unit.verdict == INCONCLUSIVE
