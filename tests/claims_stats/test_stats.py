"""fednorm.claims.stats, each function against an independent reference: scipy.stats' t tests,
F test, binomial test and Benjamini–Hochberg, the pooled variance and Holm's step-down
written out here, and the noncentral t's power."""

import math
from dataclasses import astuple

import numpy as np
import pytest
from scipy import stats

from fednorm.claims.stats import (
    Pool,
    bh,
    detectable,
    equivalence_test,
    holm,
    larger,
    pooled,
    sign_count,
    sign_test,
    trend_contrast,
)

RNG = 20240611


def _margins(n: int, seed: int, mean: float = 1.0, std: float = 3.0) -> np.ndarray:
    return np.random.default_rng([RNG, n, seed]).normal(mean, std, n)


# ---------------------------------------------------------------------------------------------
# The t tests, with no pool: scipy.stats.ttest_1samp.


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize(("slack", "sesoi", "alpha"), [(0.0, 2.0, 0.05), (1.5, 0.5, 0.025)])
def test_sign_test_without_a_pool_is_the_one_sample_t_test(n, slack, sesoi, alpha):
    m = _margins(n, seed=int(10 * slack))
    test = sign_test(m, 1.0, Pool(), slack=slack, sesoi=sesoi, alpha=alpha)
    p_for = stats.ttest_1samp(m, -slack, alternative="greater").pvalue
    p_against = stats.ttest_1samp(m, -slack - sesoi, alternative="less").pvalue
    half = stats.t.ppf(1 - alpha, n - 1) * m.std(ddof=1) / math.sqrt(n)
    assert test.p_for == pytest.approx(p_for, rel=1e-10)
    assert test.p_against == pytest.approx(p_against, rel=1e-10)
    assert (test.low, test.high) == pytest.approx((m.mean() - half, m.mean() + half), rel=1e-12)
    assert (test.df, test.n) == (n - 1, n)
    # the margin's variance over ``scale`` is a run's; times ``scale`` again it is the margin's:
    # with no pool the scale cancels
    twice = sign_test(m, 2.0, Pool(), slack=slack, sesoi=sesoi, alpha=alpha)
    assert astuple(twice) == pytest.approx(astuple(test), rel=1e-12)


def test_one_margin_and_no_pool_is_no_test():
    test = sign_test([4.0], 2.0, Pool())
    assert math.isnan(test.se) and (test.p_for, test.p_against, test.df) == (1.0, 1.0, 0.0)


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("delta", [1.0, 3.0])
def test_equivalence_test_without_a_pool_is_schuirmanns_tost(n, delta):
    m = _margins(n, seed=int(delta), mean=0.5, std=1.5)
    test = equivalence_test(m, 2.0, Pool(), delta=delta)
    above = stats.ttest_1samp(m, -delta, alternative="greater").pvalue  # rejects margin ≤ −δ
    below = stats.ttest_1samp(m, delta, alternative="less").pvalue  # rejects margin ≥ δ
    assert test.p_for == pytest.approx(max(above, below), rel=1e-10)
    # its reverse: a one-sided test of margin ≤ δ or of margin ≥ −δ, Bonferroni over the two
    reverse = min(stats.ttest_1samp(m, delta, alternative="greater").pvalue,
                  stats.ttest_1samp(m, -delta, alternative="less").pvalue)
    assert test.p_against == pytest.approx(min(1.0, 2 * reverse), rel=1e-10)


def test_the_reverse_of_tost_at_delta_zero_is_the_two_sided_t_test():
    """With δ → 0 the reverse tests margin = 0 from both sides: its p is the two-sided one (a
    level-α test of |margin| ≤ δ at every δ, where the smaller one-sided p alone would give 2α)."""
    m = _margins(4, seed=7, mean=0.3, std=1.0)
    two_sided = stats.ttest_1samp(m, 0.0).pvalue
    assert equivalence_test(m, 1.0, Pool(), delta=0.0).p_against == pytest.approx(two_sided,
                                                                                 rel=1e-10)


def test_sign_test_under_a_pool_is_the_pooled_t_test():
    """The unit's own variance with the pool's: (d0 s0² + d s²) / (d0 + d) on d0 + d degrees of
    freedom, the variances on the run's scale (the margin's over ``scale``); the pool of the
    other units' variances with the unit's own is the plain pooled variance of all of them."""
    m, scale, pool = _margins(3, seed=1), 2.0, Pool(4.0, 8.0, 4)
    d = len(m) - 1
    combined = (pool.df * pool.variance + d * m.var(ddof=1) / scale) / (pool.df + d)
    se = math.sqrt(combined * scale / len(m))
    test = sign_test(m, scale, pool, slack=0.5, sesoi=2.0)
    assert test.se == pytest.approx(se, rel=1e-12)
    assert test.df == pool.df + d
    assert test.p_for == pytest.approx(stats.t.sf((m.mean() + 0.5) / se, pool.df + d), rel=1e-10)
    assert test.p_against == pytest.approx(stats.t.cdf((m.mean() + 2.5) / se, pool.df + d),
                                           rel=1e-10)
    # one seed: the pool's variance on the pool's degrees of freedom
    alone = sign_test(m[:1], scale, pool)
    assert (alone.se, alone.df) == (pytest.approx(math.sqrt(pool.variance * scale)), pool.df)


# ---------------------------------------------------------------------------------------------
# The pool: the plain pooled variance of the other units, unless a unit's own is larger (F test).


@pytest.mark.parametrize("seed", range(4))
def test_pooled_is_the_plain_pooled_variance_on_the_summed_degrees_of_freedom(seed):
    """Σ d s² / Σ d on Σ d, whatever the spread of the variances (no shrinkage, no prior)."""
    rng = np.random.default_rng([RNG, seed])
    units = int(rng.integers(2, 15))
    d = rng.integers(1, 6, units).astype(float)
    s2 = np.exp(rng.uniform(-4, 4, units)) * rng.chisquare(d) / d
    pool = pooled(s2, d)
    assert pool.variance == pytest.approx(sum(di * si for di, si in zip(d, s2, strict=True))
                                          / sum(d), rel=1e-12)
    assert (pool.df, pool.units) == (float(sum(d)), units)
    # the others' pool with a unit's own: the plain pooled variance of all of them
    rest = pooled(s2[1:], d[1:])
    assert rest.moderated(s2[0], d[0]) == pytest.approx((pool.variance, pool.df), rel=1e-12)


def test_units_without_a_variance_are_left_out_of_the_pool():
    """No degrees of freedom, no spread at all (margins exactly equal) or no finite variance:
    left out."""
    s2, d = [1.0, 9.0, 0.2, 4.0], [2, 1, 3, 2]
    with_empty = pooled([*s2, 0.0, math.nan, 5.0, math.inf, 3.0], [*d, 2, 2, 0, 2, -1])
    assert with_empty == pooled(s2, d)
    assert with_empty == Pool(pytest.approx((2 + 9 + 0.6 + 8) / 8), 8.0, 4)
    assert pooled([math.nan, 0.0], [2, 2]) == Pool()
    assert pooled([], []) == Pool()
    assert Pool().moderated(3.0, 2.0) == (3.0, 2.0)


def test_a_single_unit_is_pooled_plainly():
    assert pooled([3.0, math.nan], [2, 2]) == Pool(3.0, 2.0, 1)
    assert Pool(3.0, 2.0, 1).moderated(5.0, 4.0) == pytest.approx((13 / 3, 6.0))
    assert Pool(3.0, 2.0, 1).moderated(0.0, 0.0) == (3.0, 2.0)


@pytest.mark.parametrize("level", [0.05, 0.2])
def test_larger_is_the_one_sided_f_test_at_its_level(level):
    """scipy.stats.f's upper tail of the unit's variance over the pool's, on the unit's and the
    pool's degrees of freedom, below ``level``: on variances that differ by up to e^±2 and 1 to
    7 degrees of freedom against pools of 1 to 60 (both outcomes among the draws)."""
    rng = np.random.default_rng([RNG, 100, int(100 * level)])
    outcomes = []
    for _ in range(400):
        variance, pool_variance = np.exp(rng.uniform(-2, 2, 2))
        df, pool_df = float(rng.integers(1, 8)), float(rng.integers(1, 61))
        pool = Pool(pool_variance, pool_df, int(rng.integers(1, 12)))
        expected = stats.f.sf(variance / pool_variance, df, pool_df) < level
        assert larger(variance, df, pool, level) == expected
        outcomes.append(expected)
    assert 0 < sum(outcomes) < len(outcomes)


def test_larger_takes_both_outcomes_at_the_default_level():
    """HOMOGENEITY 0.05: on 2 and 22 degrees of freedom F_{0.95} is about 3.44."""
    pool = Pool(4.0, 22.0, 11)
    crit = stats.f.isf(0.05, 2, 22)
    assert larger(4.0 * crit * 1.001, 2.0, pool)
    assert not larger(4.0 * crit * 0.999, 2.0, pool)
    assert not larger(4.0, 2.0, pool) and not larger(0.0, 2.0, pool)


def test_larger_is_false_without_a_test():
    """No degrees of freedom of its own (one seed), no pool (df 0), a variance that is not
    finite, a pooled variance of 0 or below: not larger, whatever the ratio; level 0: never."""
    pool = Pool(1.0, 20.0, 10)
    assert larger(1e6, 2.0, pool)
    for df in (0.0, -1.0):
        assert not larger(1e6, df, pool)
    assert not larger(1e6, 2.0, Pool())
    assert not larger(1e6, 2.0, Pool(1.0, 0.0, 0))
    for variance in (math.nan, math.inf, -math.inf):
        assert not larger(variance, 2.0, pool)
    for pool_variance in (0.0, -1.0, math.nan):
        assert not larger(1e6, 2.0, Pool(pool_variance, 20.0, 10))
    assert not larger(1e6, 2.0, pool, level=0.0)


# ---------------------------------------------------------------------------------------------
# Multiplicity, counts, contrasts.


def _holm_step_down(p: np.ndarray) -> np.ndarray:
    """Holm (1979): the i-th smallest p times (k − i), made monotone, capped at 1."""
    k = len(p)
    out, running = np.empty(k), 0.0
    for i, j in enumerate(sorted(range(k), key=lambda j: p[j])):
        running = max(running, (k - i) * p[j])
        out[j] = min(running, 1.0)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_holm_is_the_step_down_adjustment(seed):
    rng = np.random.default_rng([RNG, seed])
    k = int(rng.integers(1, 12))
    p = rng.uniform(0, 0.3, k) if seed % 2 else rng.choice([0.001, 0.01, 0.04, 0.2], k)  # ties
    assert holm(p) == pytest.approx(_holm_step_down(p), rel=1e-15)
    assert len(holm([])) == 0


def test_bh_is_scipys_and_keeps_nan_in_place():
    p = np.array([0.01, np.nan, 0.04, 0.03, np.nan, 0.5, 0.001])
    q = bh(p)
    known = ~np.isnan(p)
    assert np.array_equal(np.isnan(q), ~known)
    assert q[known] == pytest.approx(stats.false_discovery_control(p[known], method="bh"))
    assert np.isnan(bh([np.nan])).all()


@pytest.mark.parametrize(("n_for", "n_against"), [(3, 0), (2, 1), (0, 4), (5, 5), (1, 0)])
def test_sign_count_is_the_exact_binomial_test(n_for, n_against):
    n = n_for + n_against
    assert sign_count(n_for, n_against) == pytest.approx((
        stats.binomtest(n_for, n, 0.5, alternative="greater").pvalue,
        stats.binomtest(n_for, n, 0.5, alternative="less").pvalue), rel=1e-12)
    assert sign_count(0, 0) == (1.0, 1.0)


@pytest.mark.parametrize("levels", range(2, 9))
def test_the_trend_contrast_reads_the_total_change_of_a_linear_series(levels):
    c = trend_contrast(levels)
    ranks = np.arange(levels, dtype=float)
    a, b = 71.5, -2.25
    assert c.sum() == pytest.approx(0.0, abs=1e-14)
    assert c @ (a + b * ranks) == pytest.approx(b * (levels - 1), rel=1e-13)
    assert np.all(np.diff(c) > 0)


# ---------------------------------------------------------------------------------------------
# The detectable margin.


@pytest.mark.parametrize("n", [3, 4, 6, 10])
def test_the_detectable_margin_is_detected_four_times_in_five(n):
    """Simulated: the one-sided t test on ``n`` paired margins at the detectable margin rejects
    at the noncentral t's power (within 3 MC SE of 20,000 draws); that power is 0.8 within
    0.03 (the function's central-t quantiles are an approximation)."""
    sigma, scale, alpha, draws = 1.5, 2.0, 0.05, 20_000
    true = detectable(n, scale, sigma, n - 1, alpha)
    se = sigma * math.sqrt(scale / n)
    exact = float(stats.nct.sf(stats.t.ppf(1 - alpha, n - 1), n - 1, true / se))
    m = np.random.default_rng([RNG, n]).normal(true, sigma * math.sqrt(scale), (draws, n))
    t = m.mean(axis=1) / (m.std(axis=1, ddof=1) / math.sqrt(n))
    rate = float(np.mean(t > stats.t.ppf(1 - alpha, n - 1)))
    mc_se = math.sqrt(exact * (1 - exact) / draws)
    assert abs(rate - exact) <= 3 * mc_se, f"simulated {rate:.4f}, nct {exact:.4f} ± {mc_se:.4f}"
    assert abs(exact - 0.8) <= 0.03


def test_nothing_is_detectable_without_seeds_or_degrees_of_freedom():
    assert detectable(0, 2.0, 1.0, 5.0) == math.inf
    assert detectable(3, 2.0, 1.0, 0.0) == math.inf
