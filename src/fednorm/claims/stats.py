"""The statistics behind a claim's verdict: one linear model per experiment, each unit a
contrast of it, tested by textbook tests (``scipy.stats``), each named by its textbook name, its
α and its assumptions stated once here (docs/claims.md, The rule, on one page).

**The data.** An *experiment* (the units of the ledger measured on the same experiments, for
one metric at one ``at``) is a matrix x_js of *settings* j (the distinct sides of its units: a
group of runs, one per seed) by seeds s; a missing or diverged run is a missing cell. A
*unit* of a claim (one value of ``for_each``, one pair of a ``best``, one trend) is a contrast
Σ_j c_j β_j (Σ_j c_j = 0) of the settings' effects; its *margin* on seed s is Σ_j c_j x_js,
in which the seed's common part (its partition and initialization stream) cancels.

**The model** (:func:`fit_contrasts`): x_js = μ + β_j + γ_s + ε_js, seeds as blocks (a
randomized complete block design, any cells missing), fitted by least squares on the
experiment's observed cells (``numpy.linalg.pinv`` of the explicit design matrix); a unit is
the contrast Σ c_j β_j. Its standard error comes from one of four variance models:

- ``unit`` (**the rule**): the unit's own margins on the n seeds where every setting it
  involves has a value: their mean (the model's contrast on a complete matrix) and sample
  variance / n on n − 1 degrees of freedom, the paired t test. Exact whatever each setting's
  σ_j (the margin's variance is Σ c_j² σ_j², estimated directly), and whatever other units
  share its settings: a unit's test is exact on its own, and a claim's units are combined by
  tests valid under any dependence (the intersection-union test, Holm).
- ``equal``: one σ², the model's residual mean square on its residual df, counted once for
  all units ((K − 1)(n − 1) for K settings on n complete seeds): the exact t of the
  homoscedastic model.
- ``moderated``: each setting's s_j² = R_j / d_j (its residual sum of squares on its share d_j
  = Σ_i∈j (1 − h_ii) of the residual df) moderated toward the experiment's by limma's
  empirical Bayes prior (Smyth 2004: d0 and s0² fitted by the moments of log s²,
  :func:`moderated_prior`), Satterthwaite over the settings.
- ``setting``: each setting's σ̂_j² from the residuals, unbiased (E R_j = Σ_l A_jl σ_l², A from
  the residual projector M = I − H: A_jl = Σ_i∈j,k∈l M_ik²; σ̂² = A⁺R clipped at 0), the
  contrast's variance Σ_i L_i² σ̂²_j(i), Satterthwaite's df of that quadratic form of the
  residuals (Welch–Satterthwaite generalized).

Chosen by simulation (benchmarks/claims_calibration.py; docs/claims.md, Calibration): with four
settings, one at 3× the others' σ, ``equal`` and ``moderated`` hold the pairs that touch it
falsely 0.10–0.13 of the time at α 0.05 on 2 to 6 seeds (four settings give limma's prior too
little to see one setting apart; at 16 settings ``equal`` reaches 0.18); ``setting`` and
``unit`` stay at or under α, and ``unit`` has the more power on 2 and 3 seeds (a margin of
4σ held 0.47 against 0.20 on 2 seeds, 0.91 against 0.81 on 3, equal σ). The price against
``equal`` is power where the noise is in fact equal (0.47 against 0.91 on 2 seeds).

**The tests** (α one-sided, one look; the verdict from them: :mod:`fednorm.claims.rule`):

- a sign (the claim: margin + slack > 0): ``holds`` when the one-sided t test rejects margin
  + slack ≤ 0 (p_for ≤ α: the lower (1 − α) bound is above −slack); ``contradicted`` when the
  mirror test rejects margin + slack ≥ 0 (p_against ≤ α: the upper bound is below −slack);
  ``negligible`` when neither and Schuirmann's TOST rejects |margin + slack| ≥ sesoi, the
  smallest effect of interest (fednorm.claims.rule);
- a near-equality (|margin| ≤ δ): Schuirmann's two one-sided tests (TOST): ``holds`` when
  both reject (the (1 − 2α) interval inside ±δ); ``contradicted`` when a one-sided test of
  margin ≤ δ or of margin ≥ −δ rejects at α / 2 (Bonferroni over the two sides: the
  (1 − α) interval lies outside ±δ);
- a unit with fewer than ``MIN_SEEDS`` margins (diverged runs): the exact sign test
  (``scipy.stats.binom``, p = 1/2 under the null) on the seeds for and against the claim, used
  only where it can fire: N seeds in all with 0.5^N ≤ α (at α = 0.05: N ≥ 5; with 4 seeds
  or fewer it is not run, p 1).

**One look.** The design is fixed before the runs (config/claims.yaml, the profiles' seeds):
every unit is judged once, on all its seeds, at α, at its experiment's budget.

A claim of k units: ``holds`` when every unit holds (an intersection-union test: level α
with no correction, Berger 1982), ``contradicted`` when one does after Holm's step-down
correction over its k units (:func:`holm`). Across the ledger, Benjamini–Hochberg q-values
(:func:`bh`, ``scipy.stats.false_discovery_control``) stand beside the verdicts. Assumed:
runs normal, independent across seeds given the seed's block effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

ALPHA = 0.05  # one-sided, per unit, one look
SESOI = 2.0  # points: the smallest effect of interest when the claims file names none
MIN_SEEDS = 2  # a unit with fewer seeds with a margin gets no t test (the sign test instead)


# ---------------------------------------------------------------------------------------------
# The linear model of an experiment and its contrasts.


@dataclass(frozen=True)
class Contrasts:
    """Per unit (any leading replicate axes, then units): the contrast's ``estimate``, its
    standard error ``se`` on ``df`` degrees of freedom (NaN, 0: not estimable or no residual
    df), and ``n``, the seeds on which every setting the unit involves has a value."""

    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray
    n: np.ndarray


VARIANCES = ("unit", "setting", "equal", "moderated")
DIGITS = 10  # decimals kept of an estimate and a df; residuals under 10^-DIGITS are 0


def fit_contrasts(values: np.ndarray, contrasts: np.ndarray, *, variances: str = "unit"
                  ) -> Contrasts:
    """The model x_js = μ + β_j + γ_s + ε_js of ``values`` (..., K settings, S seeds; NaN:
    missing) and each row c of ``contrasts`` (U, K) as Σ c_j β_j (the module's docstring).
    ``variances``: 'unit' (the rule: the unit's margins on the seeds where all its settings
    have a value, their mean and sample variance / n on n − 1 df: the paired t, exact under
    any σ_j), 'setting' (each setting's own σ̂_j² from the model's residuals, unbiased,
    Welch–Satterthwaite df), 'equal' (one σ², the residual mean square), 'moderated' (each
    setting's s_j² = R_j / d_j on its share d_j = Σ_i∈j (1 − h_ii) of the residual df,
    moderated toward the experiment's by
    :func:`moderated_prior`: (d0 s0² + d_j s_j²) / (d0 + d_j) on min(d0 + d_j, residual df);
    d0 = inf: the residual mean square; then Satterthwaite over the settings)."""
    if variances not in VARIANCES:
        raise ValueError(f"variances: {variances!r}; allowed: {', '.join(VARIANCES)}")
    y = np.asarray(values, dtype=float)
    c = np.atleast_2d(np.asarray(contrasts, dtype=float))
    if y.ndim < 2 or c.shape[1] != y.shape[-2]:
        raise ValueError(f"values: shape {y.shape}, contrasts: shape {c.shape}; allowed: "
                         "values (..., settings, seeds) and contrasts (units, settings)")
    k, s = y.shape[-2:]
    lead = y.shape[:-2]
    flat = y.reshape(-1, k * s)
    seen = np.isfinite(flat)
    units = len(c)
    involved = c != 0
    both = (seen.reshape(-1, 1, k, s) | ~involved[None, :, :, None]).all(axis=2)
    n = both.sum(axis=-1)
    if variances == "unit":
        margins = np.einsum("uk,rks->rus", c, np.where(seen, flat, 0.0).reshape(-1, k, s))
        margins = np.where(both, margins, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = margins.sum(axis=-1) / n
            squares = np.where(both, np.square(margins - mean[..., None]), 0.0).sum(axis=-1)
            se = np.sqrt(squares / np.maximum(n - 1, 1) / n)
        tiny = 10.0**-DIGITS * (1 + np.abs(mean))
        se = np.where(n > 1, np.where(se < tiny, 0.0, se), math.nan)
        return Contrasts(np.where(n > 0, np.round(mean, DIGITS), math.nan).reshape(*lead, units),
                         se.reshape(*lead, units),
                         np.maximum(n - 1, 0).astype(float).reshape(*lead, units),
                         n.reshape(*lead, units))
    shape = (len(flat), units)
    estimate, se, df = np.full(shape, math.nan), np.full(shape, math.nan), np.zeros(shape)
    patterns, inverse = np.unique(seen, axis=0, return_inverse=True)
    for p, mask in enumerate(patterns):
        rows = np.flatnonzero(inverse.reshape(-1) == p)
        e, v, d = _pattern(flat[np.ix_(rows, np.flatnonzero(mask))], mask.reshape(k, s), c,
                           variances)
        estimate[rows], se[rows], df[rows] = e, v, d
    return Contrasts(estimate.reshape(*lead, units), se.reshape(*lead, units),
                     df.reshape(*lead, units), n.reshape(*lead, units))


def _pattern(y: np.ndarray, mask: np.ndarray, c: np.ndarray, variances: str
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, se, df), each (replicates, units), of the replicates ``y`` (replicates,
    observed cells) that share the observed cells ``mask`` (settings, seeds)."""
    k, s = mask.shape
    setting, seed = np.nonzero(mask)
    cells = len(setting)
    g = np.eye(k)[setting]  # cell -> its setting
    x = np.hstack([g, np.eye(s)[seed]])  # the design: setting and seed indicators
    pinv = np.linalg.pinv(x)
    hat = x @ pinv
    rank = round(float(np.trace(hat))) if cells else 0
    ext = np.hstack([c, np.zeros((len(c), s))])
    estimable = np.all(np.abs(ext @ pinv @ x - ext) < 1e-8, axis=1) & (rank > 0)
    weights = ext @ pinv  # (units, cells): a unit's estimate is weights @ y
    # rounding: the pseudo-inverse's 1e-14 would turn equal runs into a tiny margin with a
    # tinier standard error (values are points: 1e-10 is far below any that matters)
    estimate = np.where(estimable, np.round(y @ weights.T, DIGITS), math.nan)
    residual_df = cells - rank
    nan = np.full(estimate.shape, math.nan)
    if residual_df <= 0:
        return estimate, nan, np.zeros(estimate.shape)
    m = np.eye(cells) - hat
    resid = y @ m  # m is symmetric
    tiny = 10.0**-DIGITS * (1 + np.abs(y).max(axis=1, keepdims=True))
    resid = np.where(np.abs(resid) < tiny, 0.0, resid)
    rss = np.square(resid) @ g  # (replicates, settings)
    w = np.square(weights) @ g  # (units, settings): Σ_i∈j L_i²
    if variances == "equal":
        variance = rss.sum(axis=1, keepdims=True) / residual_df * w.sum(axis=1)
        df = np.full(estimate.shape, float(residual_df))
    elif variances == "moderated":
        share = (1 - np.diag(hat)) @ g  # each setting's residual df
        with np.errstate(invalid="ignore", divide="ignore"):
            s2 = rss / share
        d0, s0 = moderated_prior(np.where(share > 1e-9, s2, math.nan), share)
        pooled = rss.sum(axis=1) / residual_df
        infinite = ~np.isfinite(d0)
        d0c = np.where(infinite, 0.0, d0)[:, None]
        with np.errstate(invalid="ignore"):
            moderated = np.where(infinite[:, None], pooled[:, None],
                                 (d0c * s0[:, None] + share * np.nan_to_num(s2))
                                 / (d0c + share))
        nu = np.where(infinite[:, None], float(residual_df),
                      np.minimum(d0c + share, float(residual_df)))
        parts = w[None] * moderated[:, None, :]  # (replicates, units, settings)
        variance = parts.sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            spread = (np.square(parts) / np.where(nu > 0, nu, math.inf)[:, None, :]).sum(-1)
            df = np.where(spread > 0, np.square(variance) / spread, float(residual_df))
        df = np.minimum(df, float(residual_df))
    else:
        a_inv = np.linalg.pinv(g.T @ np.square(m) @ g)
        sigma2 = np.maximum(rss @ a_inv.T, 0.0)  # each setting's σ̂², unbiased, clipped at 0
        variance = sigma2 @ w.T
        # Satterthwaite: V = e' D e, D the cells' weights (w A⁺)_j(i); Var V = 2 tr((B Σ)²)
        coef = (w @ a_inv)[:, setting]  # (units, cells)
        b = np.einsum("ik,uk,kl->uil", m, coef, m)
        q = np.einsum("ai,uij,jb->uab", g.T, np.square(b), g)  # (units, settings, settings)
        spread = np.einsum("ra,uab,rb->ru", sigma2, q, sigma2)
        with np.errstate(invalid="ignore", divide="ignore"):
            df = np.where(spread > 0, np.square(variance) / spread, float(residual_df))
        df = np.minimum(df, float(residual_df))
    df = np.round(df, DIGITS)
    ok = estimable & (df > 0)
    return (estimate, np.where(ok, np.sqrt(np.where(ok, variance, 0.0)), math.nan),
            np.where(ok, df, 0.0))


def moderated_prior(variances: np.ndarray, dfs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """limma's ``fitFDist`` (Smyth 2004, section 6.2): the prior's (d0, s0²) of sample
    ``variances`` (..., settings) on ``dfs`` degrees of freedom by the moments of log s²,
    e = log s² − ψ(d/2) + log(d/2): s0² = exp(ē + ψ(d0/2) − log(d0/2)) with ψ'(d0/2) = var(e) −
    mean ψ'(d/2); d0 = inf (and s0² = exp ē) where that is ≤ 0. Variances not above 0 or not
    finite, and dfs not above 0, are left out. The calibration's reference for the moderated
    rule (not the verdicts' rule: the module's docstring says why)."""
    s2 = np.asarray(variances, dtype=float)
    d = np.broadcast_to(np.asarray(dfs, dtype=float), s2.shape)
    ok = (d > 0) & np.isfinite(s2) & (s2 > 0)
    k = ok.sum(axis=-1)
    half = np.where(ok, d, 2.0) / 2
    e = np.where(ok, np.log(np.where(ok, s2, 1.0)) - special.digamma(half) + np.log(half), 0.0)
    mean = e.sum(axis=-1) / np.maximum(k, 1)
    var = (np.where(ok, np.square(e - mean[..., None]), 0.0).sum(axis=-1)
           / np.maximum(k - 1, 1)
           - np.where(ok, special.polygamma(1, half), 0.0).sum(axis=-1) / np.maximum(k, 1))
    finite = (var > 0) & (k > 1)
    d0 = np.where(finite, 2 * trigamma_inverse(np.where(finite, var, 1.0)), math.inf)
    h0 = np.where(finite, d0, 2.0) / 2
    s0 = np.where(finite, np.exp(mean + special.digamma(h0) - np.log(h0)), np.exp(mean))
    return d0, np.where(k > 0, s0, math.nan)


def trigamma_inverse(x: np.ndarray) -> np.ndarray:
    """y with ψ'(y) = x (x > 0): limma's Newton iteration on 1/ψ' from y = 1/2 + 1/x."""
    x = np.asarray(x, dtype=float)
    y = 0.5 + 1.0 / x
    for _ in range(60):
        tri = special.polygamma(1, y)
        step = tri * (1 - tri / x) / special.polygamma(2, y)
        y = y + step
        if np.all(np.abs(step / y) < 1e-10):
            break
    return y


# ---------------------------------------------------------------------------------------------
# The tests of a unit.


@dataclass(frozen=True)
class Test:
    """A unit's test: the contrast's ``estimate``, its standard error on ``df`` degrees of
    freedom, its (1 − 2α) interval [``low``, ``high``] (each bound one-sided at α), the seeds
    ``n`` with a margin, and the p-values of the claim's two nulls: ``p_for`` (small: the claim
    holds) and ``p_against`` (small: it is contradicted)."""

    estimate: float
    se: float
    df: float
    n: int
    low: float
    high: float
    p_for: float
    p_against: float


def _t_p(x: np.ndarray, se: np.ndarray, df: np.ndarray, upper: bool) -> np.ndarray:
    """One-sided p of the t statistic x / se on df: P(T ≥ t) (``upper``) or P(T ≤ t); se 0
    makes it ±inf (p 0 or 1; x 0: 1/2); no se: 1."""
    x, se, df = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (x, se, df)))
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(se > 0, x / np.where(se > 0, se, 1.0), np.sign(x) * math.inf)
    t = np.where(se == 0, np.where(x == 0, 0.0, t), t)
    ok = np.isfinite(se) & (df > 0)
    d = np.where(ok, df, 1.0)
    p = special.stdtr(d, -t if upper else t)  # the t cdf, without scipy.stats' checks
    return np.where(ok, p, 1.0)


def sign_ps(estimate: np.ndarray, se: np.ndarray, df: np.ndarray, slack: np.ndarray,
            sesoi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p_for, p_against) of the one-sided t tests of a sign claim, margin + ``slack`` > 0
    (module docstring), elementwise."""
    est = np.asarray(estimate, dtype=float)
    return (_t_p(est + slack, se, df, upper=True),
            _t_p(est + slack + sesoi, se, df, upper=False))


def equivalence_ps(estimate: np.ndarray, se: np.ndarray, df: np.ndarray, delta: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(p_for, p_against) of Schuirmann's TOST of |margin| ≤ ``delta`` and of its reverse
    (Bonferroni over its two sides: level α even as δ → 0), elementwise."""
    est = np.asarray(estimate, dtype=float)
    p_for = np.maximum(_t_p(est + delta, se, df, upper=True),
                       _t_p(est - delta, se, df, upper=False))
    p_against = np.minimum(1.0, 2 * np.minimum(_t_p(est - delta, se, df, upper=True),
                                               _t_p(est + delta, se, df, upper=False)))
    return p_for, p_against


def _interval(estimate: float, se: float, df: float, alpha: float) -> tuple[float, float]:
    if not (df > 0 and math.isfinite(se)):
        return math.nan, math.nan
    half = float(stats.t.ppf(1 - alpha, df)) * se
    return estimate - half, estimate + half


def sign_test(estimate: float, se: float, df: float, n: int, *, slack: float = 0.0,
              sesoi: float = SESOI, alpha: float = ALPHA) -> Test:
    """The one-sided t tests of a sign claim on a unit's contrast (module docstring)."""
    p_for, p_against = sign_ps(estimate, se, df, slack, sesoi)
    return Test(estimate, se, df, n, *_interval(estimate, se, df, alpha), float(p_for),
                float(p_against))


def equivalence_test(estimate: float, se: float, df: float, n: int, *, delta: float,
                     alpha: float = ALPHA) -> Test:
    """Schuirmann's TOST of |margin| ≤ ``delta``, and its reverse, on a unit's contrast."""
    p_for, p_against = equivalence_ps(estimate, se, df, delta)
    return Test(estimate, se, df, n, *_interval(estimate, se, df, alpha), float(p_for),
                float(p_against))


def sign_count(n_for: np.ndarray | int, n_against: np.ndarray | int
               ) -> tuple[np.ndarray | float, np.ndarray | float]:
    """(p_for, p_against) of the exact sign test on seeds that only count for or against the
    claim: each side's one-sided binomial p at 1/2 (P(X ≥ n_for), X ~ Bin(n, 1/2)); 1 with no
    such seed. Elementwise."""
    up, down = np.asarray(n_for), np.asarray(n_against)
    n = up + down
    p_for = np.where(n > 0, stats.binom.sf(up - 1, np.maximum(n, 1), 0.5), 1.0)
    p_against = np.where(n > 0, stats.binom.sf(down - 1, np.maximum(n, 1), 0.5), 1.0)
    if p_for.ndim == 0:
        return float(p_for), float(p_against)
    return p_for, p_against


def sign_fires(seeds: np.ndarray | int, alpha: float) -> np.ndarray | bool:
    """Whether the exact sign test on ``seeds`` seeds can reject at ``alpha``: 0.5^N ≤ α, its
    smallest p (the module's docstring: elsewhere it is not run)."""
    n = np.asarray(seeds)
    fires = (n > 0) & (np.power(0.5, n.astype(float)) <= alpha)
    return bool(fires) if fires.ndim == 0 else fires


def holm(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error at most α over the family) along
    the last axis."""
    p = np.asarray(p, dtype=float)
    if p.shape[-1] == 0:
        return p
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    stepped = np.maximum.accumulate((k - np.arange(k)) * np.take_along_axis(p, order, -1), -1)
    out = np.empty_like(p)
    np.put_along_axis(out, order, np.minimum(stepped, 1.0), -1)
    return out


def bh(p: Sequence[float], method: str = "bh") -> np.ndarray:
    """Benjamini–Hochberg q-values (``scipy.stats.false_discovery_control``; ``method`` 'by':
    Benjamini–Yekutieli's, under any dependence); NaN stays NaN and is not counted."""
    p = np.asarray(p, dtype=float)
    q = np.full(len(p), math.nan)
    known = ~np.isnan(p)
    if known.any():
        q[known] = stats.false_discovery_control(p[known], method=method)
    return q


def trend_contrast(levels: int) -> np.ndarray:
    """The coefficients c_j over ``levels`` ordered values whose contrast is the least-squares
    change from the first value to the last along their ranks (for two levels: last − first)."""
    r = np.arange(levels, dtype=float)
    centred = r - r.mean()
    return centred * (levels - 1) / float((centred**2).sum())


def detectable(n: int, scale: float, sigma: float, df: float, alpha: float = ALPHA,
               power: float = 0.8) -> float:
    """The smallest true margin that a one-sided t test on ``n`` seeds (run std ``sigma``,
    ``df`` degrees of freedom) detects with ``power``: (t_{1−α} + t_power) · se (the usual
    approximation by central t quantiles)."""
    if n < 1 or df <= 0:
        return math.inf
    se = sigma * math.sqrt(scale / n)
    return float((stats.t.ppf(1 - alpha, df) + stats.t.ppf(power, df)) * se)
