"""fednorm.claims.stats, each function against an independent reference: scipy.stats' t tests,
binomial test and Benjamini–Hochberg, the linear model against numpy.linalg.lstsq on an explicit
design matrix and the two-way ANOVA's residuals written out, limma's prior against a root
finder, Holm's step-down written out here, and the noncentral t's power."""

import itertools
import math

import numpy as np
import pytest
from scipy import optimize, special, stats

from fednorm.claims.stats import (
    bh,
    detectable,
    equivalence_test,
    fit_contrasts,
    holm,
    moderated_prior,
    sign_count,
    sign_fires,
    sign_test,
    trend_contrast,
)

RNG = 20240611


def _margins(n: int, seed: int, mean: float = 1.0, std: float = 3.0) -> np.ndarray:
    return np.random.default_rng([RNG, n, seed]).normal(mean, std, n)


def _pair(m: np.ndarray) -> tuple[float, float, float, int]:
    """(estimate, se, df, n) of margins ``m`` by the rule (two settings: a − b = m)."""
    fit = fit_contrasts(np.stack([m, np.zeros_like(m)]), [[1.0, -1.0]])
    return float(fit.estimate[0]), float(fit.se[0]), float(fit.df[0]), int(fit.n[0])


# ---------------------------------------------------------------------------------------------
# The t tests of a unit: scipy.stats.ttest_1samp.


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize(("slack", "sesoi", "alpha"), [(0.0, 2.0, 0.05), (1.5, 0.5, 0.025)])
def test_sign_test_of_a_unit_is_the_one_sample_t_test_of_its_margins(n, slack, sesoi, alpha):
    m = _margins(n, seed=int(10 * slack))
    test = sign_test(*_pair(m), slack=slack, sesoi=sesoi, alpha=alpha)
    p_for = stats.ttest_1samp(m, -slack, alternative="greater").pvalue
    p_against = stats.ttest_1samp(m, -slack - sesoi, alternative="less").pvalue
    half = stats.t.ppf(1 - alpha, n - 1) * m.std(ddof=1) / math.sqrt(n)
    assert test.p_for == pytest.approx(p_for, rel=1e-9)
    assert test.p_against == pytest.approx(p_against, rel=1e-9)
    assert (test.low, test.high) == pytest.approx((m.mean() - half, m.mean() + half), rel=1e-9)
    assert (test.df, test.n) == (n - 1, n)


def test_one_margin_is_no_test():
    test = sign_test(*_pair(np.array([4.0])))
    assert math.isnan(test.se) and (test.p_for, test.p_against, test.df) == (1.0, 1.0, 0.0)


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("delta", [1.0, 3.0])
def test_equivalence_test_is_schuirmanns_tost(n, delta):
    m = _margins(n, seed=int(delta), mean=0.5, std=1.5)
    test = equivalence_test(*_pair(m), delta=delta)
    above = stats.ttest_1samp(m, -delta, alternative="greater").pvalue  # rejects margin ≤ −δ
    below = stats.ttest_1samp(m, delta, alternative="less").pvalue  # rejects margin ≥ δ
    assert test.p_for == pytest.approx(max(above, below), rel=1e-9)
    # its reverse: a one-sided test of margin ≤ δ or of margin ≥ −δ, Bonferroni over the two
    reverse = min(stats.ttest_1samp(m, delta, alternative="greater").pvalue,
                  stats.ttest_1samp(m, -delta, alternative="less").pvalue)
    assert test.p_against == pytest.approx(min(1.0, 2 * reverse), rel=1e-9)


def test_the_reverse_of_tost_at_delta_zero_is_the_two_sided_t_test():
    """With δ → 0 the reverse tests margin = 0 from both sides: its p is the two-sided one (a
    level-α test of |margin| ≤ δ at every δ, where the smaller one-sided p alone would give 2α)."""
    m = _margins(4, seed=7, mean=0.3, std=1.0)
    two_sided = stats.ttest_1samp(m, 0.0).pvalue
    assert equivalence_test(*_pair(m), delta=0.0).p_against == pytest.approx(two_sided,
                                                                            rel=1e-9)


# ---------------------------------------------------------------------------------------------
# The linear model of an experiment.


def _lstsq(values: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(estimates, se, residual df) of contrasts ``c`` of the settings' effects, by least
    squares on the explicit design (intercept, settings 2.., seeds 2..: full rank) of the
    observed cells and the classical covariance σ̂² (X'X)⁻¹."""
    k, s = values.shape
    rows, y = [], []
    for j, t in itertools.product(range(k), range(s)):
        if np.isfinite(values[j, t]):
            x = np.zeros(k + s - 1)
            x[0] = 1.0
            if j:
                x[j] = 1.0
            if t:
                x[k - 1 + t] = 1.0
            rows.append(x)
            y.append(values[j, t])
    x, y = np.array(rows), np.array(y)
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    df = len(y) - x.shape[1]
    sigma2 = float(np.sum((y - x @ beta) ** 2)) / df
    cov = sigma2 * np.linalg.inv(x.T @ x)
    # c over settings -> over the parameters (setting 1 is the baseline: its effect 0)
    ext = np.zeros((len(c), x.shape[1]))
    ext[:, 1:k] = c[:, 1:]
    return ext @ beta, np.sqrt(np.einsum("up,pq,uq->u", ext, cov, ext)), float(df)


@pytest.mark.parametrize("seed", range(5))
def test_the_equal_variance_model_is_least_squares_on_the_explicit_design(seed):
    """Settings × seeds with cells missing: each contrast's estimate, standard error and the
    residual df equal numpy.linalg.lstsq's on the full-rank design matrix."""
    rng = np.random.default_rng([RNG, 50, seed])
    k, s = int(rng.integers(3, 7)), int(rng.integers(3, 6))
    values = rng.normal(50, 5, (k, s)) + rng.normal(0, 10, s)
    values[rng.uniform(size=(k, s)) < 0.15] = np.nan
    values[:, 0] = rng.normal(50, 5, k)  # seed 0 complete: every setting connected
    c = np.vstack([np.eye(k)[0] - np.eye(k)[1], trend_contrast(k), np.eye(k)[-1] - np.eye(k)[1]])
    fit = fit_contrasts(values, c, variances="equal")
    est, se, df = _lstsq(values, c)
    assert fit.estimate == pytest.approx(est, rel=1e-9)
    assert fit.se == pytest.approx(se, rel=1e-9)
    assert (fit.df == df).all()


def test_on_a_complete_matrix_each_setting_gets_the_anova_residuals_unbiased_variance():
    """Balanced K × n: r_js = x_js − x̄_j· − x̄_·s + x̄_·· (the two-way ANOVA's residuals), whose
    row sums of squares have E R_j = (n − 1)((1 − 2/K) σ_j² + Σσ²/K²); solved for σ_j², a pair's
    variance is (σ̂_a² + σ̂_b²) / n, each σ̂² clipped at 0 (one is negative here)."""
    rng = np.random.default_rng([RNG, 60])
    k, n = 5, 6
    values = rng.normal(0, 1, (k, n)) * np.array([1, 1.5, 2, 3, 1])[:, None]
    r = values - values.mean(1, keepdims=True) - values.mean(0) + values.mean()
    rss = (r**2).sum(axis=1)
    total = k * rss.sum() / ((n - 1) * (k - 1))
    sigma2 = (rss / (n - 1) - total / k**2) / (1 - 2 / k)
    assert (sigma2 < 0).sum() == 1
    sigma2 = np.maximum(sigma2, 0.0)
    pairs = [(0, 3), (1, 4), (2, 4)]
    fit = fit_contrasts(values, [np.eye(k)[a] - np.eye(k)[b] for a, b in pairs],
                        variances="setting")
    for u, (a, b) in enumerate(pairs):
        assert fit.se[u] == pytest.approx(math.sqrt((sigma2[a] + sigma2[b]) / n), rel=1e-9)
        assert 0 < fit.df[u] <= (k - 1) * (n - 1)


def test_the_rule_tests_a_unit_on_its_own_margins_and_seeds():
    """The default ('unit'): the seeds where every setting the unit involves has a value; a
    missing run elsewhere changes nothing; leading replicate axes are kept."""
    rng = np.random.default_rng([RNG, 61])
    values = rng.normal(0, 1, (3, 4, 5))
    values[:, 2, 1] = np.nan  # a setting the unit does not involve
    values[:, 0, 4] = np.nan  # one it does: four seeds left
    fit = fit_contrasts(values, [[1.0, -1.0, 0.0, 0.0]])
    for r in range(3):
        m = (values[r, 0] - values[r, 1])[:4]
        assert fit.estimate[r, 0] == pytest.approx(m.mean(), rel=1e-9)
        assert fit.se[r, 0] == pytest.approx(m.std(ddof=1) / 2, rel=1e-9)
        assert (fit.df[r, 0], fit.n[r, 0]) == (3, 4)


def test_a_contrast_the_model_cannot_estimate_is_nan_and_bad_shapes_are_refused():
    values = np.array([[1.0, 2.0], [np.nan, np.nan], [3.0, 5.0]])
    for variances in ("equal", "setting", "unit"):
        fit = fit_contrasts(values, [[1.0, -1.0, 0.0]], variances=variances)
        assert math.isnan(fit.estimate[0]) and math.isnan(fit.se[0]) and fit.df[0] == 0
    with pytest.raises(ValueError, match="contrasts: shape"):
        fit_contrasts(values, [[1.0, -1.0]])
    with pytest.raises(ValueError, match="variances: 'pooled'; allowed"):
        fit_contrasts(values, [[1.0, -1.0, 0.0]], variances="pooled")


@pytest.mark.parametrize("seed", range(3))
def test_the_moderated_prior_is_limmas_moment_fit(seed):
    """fitFDist's two moment equations solved by a root finder: ψ'(d0/2) = var(e) − mean ψ'(d/2),
    s0² = exp(ē + ψ(d0/2) − log(d0/2)); equal variances give d0 = inf."""
    rng = np.random.default_rng([RNG, 70, seed])
    d = rng.integers(2, 6, 40).astype(float)
    s2 = np.exp(rng.normal(0, 1.2, 40)) * rng.chisquare(d) / d
    e = np.log(s2) - special.digamma(d / 2) + np.log(d / 2)
    target = e.var(ddof=1) - special.polygamma(1, d / 2).mean()
    half = optimize.brentq(lambda h: special.polygamma(1, h) - target, 1e-6, 1e6)
    d0, s0 = moderated_prior(s2, d)
    assert d0 == pytest.approx(2 * half, rel=1e-7)
    assert s0 == pytest.approx(math.exp(e.mean() + special.digamma(half) - math.log(half)),
                               rel=1e-7)
    d0, _ = moderated_prior(np.full(5, 2.0), np.full(5, 3.0))
    assert d0 == math.inf


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


@pytest.mark.parametrize("alpha", [0.05, 0.025, 0.0125])
def test_the_sign_test_fires_only_where_its_smallest_p_reaches_alpha(alpha):
    """0.5^N ≤ α: at 0.025 six seeds (1/64), not five (1/32); its smallest p is
    scipy.stats.binomtest's with every seed one way."""
    for n in range(0, 9):
        smallest = stats.binomtest(n, n, 0.5, alternative="greater").pvalue if n else 1.0
        assert sign_fires(n, alpha) == (n > 0 and smallest <= alpha)
    assert sign_fires(5, 0.025) is False and sign_fires(6, 0.025) is True
