"""The statistics behind a claim's verdict: textbook tests from ``scipy.stats``, each named by its
textbook name, its α and its assumptions stated once here (docs/claims.md, The rule, on one page).

**The data.** A *unit* of a claim is one comparison (one value of ``for_each``, one pair of a
``best``, one trend), measured on each seed s as a *margin* m_s: a linear contrast Σ_j c_j x_js
of the runs x_js that share the seed s (its partition and initialization stream), so the seed's
common part cancels (a randomized complete block design: seeds are blocks). ``scale`` = Σ c_j²
(2 for a difference of two runs) converts a run's variance into the margin's.

**The variance model.** Within an experiment the runs of one setting scatter around its mean
with one variance σ² (the error term of a randomized block ANOVA); each unit's sample variance
s_u² / scale has d_u = n_u − 1 degrees of freedom, and a unit is tested on the pooled variance
Σ d s² / Σ d of its own and the other units of its experiments that measure the same metric
(:func:`pooled`), on Σ d degrees of freedom: many where one unit's two seeds have one. The
assumption is checked, not trusted, unit by unit: where a unit's own variance is larger than
the others' pool by the one-sided F test at ``HOMOGENEITY`` (:func:`larger`: a unit four times
noisier than the rest would be held falsely far more often than α under the pool), it is tested
on its own variance and d_u instead (the paired t test). Assumed: margins normal and
independent across seeds.

**The tests** (α one-sided, ``ALPHA`` unless the claims file says):

- a sign (the claim: margin + slack > 0): ``holds`` when the one-sided t test rejects margin
  + slack ≤ 0 (p_for ≤ α: the lower (1 − α) bound is above −slack); ``contradicted`` when it
  rejects margin + slack ≥ −sesoi (p_against ≤ α: the upper bound is below −slack − sesoi), the
  smallest effect of interest ``sesoi`` keeping a negligible shortfall from contradicting;
- a near-equality (|margin| ≤ δ): Schuirmann's two one-sided tests (TOST): ``holds`` when
  both reject (the (1 − 2α) interval inside ±δ); ``contradicted`` when a one-sided test of
  margin ≤ δ or of margin ≥ −δ rejects at α / 2 (Bonferroni over the two sides: the
  (1 − α) interval lies outside ±δ);
- seeds with no margin (a diverged run) alone: the exact sign test (``scipy.stats.binomtest``,
  p = 1/2 under the null) on the seeds for and against the claim.

A claim of k units: ``holds`` when every unit holds (an intersection-union test: level α
with no correction, Berger 1982), ``contradicted`` when one does after Holm's step-down
correction over its k units (:func:`holm`). Across the ledger, Benjamini–Hochberg q-values
(:func:`bh`, ``scipy.stats.false_discovery_control``) stand beside the verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05  # one-sided, per claim (per look of a two-stage ledger: alpha / looks)
SESOI = 2.0  # points: the smallest effect of interest when the claims file names none
MIN_SEEDS = 2  # a unit with fewer seeds with a margin gets no firm verdict
HOMOGENEITY = 0.05  # the F test's level: a unit noisier than the others' pool is not pooled


@dataclass(frozen=True)
class Pool:
    """The variance a unit borrows from the other units of its experiment (see the module's
    docstring): ``variance`` on ``df`` degrees of freedom; df 0: none (no other unit with a
    variance, or a unit noisier than the others by the F test), the unit on its own."""

    variance: float = math.nan
    df: float = 0.0
    units: int = 0  # units that entered it

    def moderated(self, variance: float, df: float) -> tuple[float, float]:
        """A unit's (variance, degrees of freedom): its own ``variance`` on ``df`` pooled with
        the others'."""
        if self.df == 0:
            return variance, df
        if df == 0:
            return self.variance, self.df
        return (self.df * self.variance + df * variance) / (self.df + df), self.df + df


def pooled(variances: Sequence[float], dfs: Sequence[float]) -> Pool:
    """The pooled variance Σ d s² / Σ d of units with sample ``variances`` (each on the run's
    scale) on ``dfs`` degrees of freedom; units with no degrees of freedom, no spread at all
    (margins exactly equal: runs that do not differ, which says nothing of the seed noise) or
    a variance that is not finite are left out."""
    s2 = np.asarray(variances, dtype=float)
    d = np.asarray(dfs, dtype=float)
    keep = (d > 0) & np.isfinite(s2) & (s2 > 0)
    s2, d = s2[keep], d[keep]
    total = float(d.sum())
    if not total:
        return Pool()
    return Pool(float((d * s2).sum() / total), total, len(s2))


def larger(variance: float, df: float, pool: Pool, level: float = HOMOGENEITY) -> bool:
    """Whether a unit's own ``variance`` (on ``df`` degrees of freedom) is larger than the pool
    of the other units by the one-sided F test at ``level`` (``scipy.stats.f``): such a unit is
    not pooled but tested on its own variance."""
    if df <= 0 or pool.df == 0 or not math.isfinite(variance) or pool.variance <= 0:
        return False
    return bool(stats.f.sf(variance / pool.variance, df, pool.df) < level)


@dataclass(frozen=True)
class Test:
    """A unit's test: the margin's ``estimate`` (mean over seeds), its standard error on
    ``df`` degrees of freedom, its (1 − 2α) interval [``low``, ``high``] (each bound one-sided
    at α), and the p-values of the claim's two nulls: ``p_for`` (small: the claim holds) and
    ``p_against`` (small: it is contradicted)."""

    estimate: float
    se: float
    df: float
    n: int
    low: float
    high: float
    p_for: float
    p_against: float


def _t(margins: Sequence[float], scale: float, pool: Pool, alpha: float
       ) -> tuple[float, float, float, float]:
    """(mean, standard error, df, one-sided critical value) of the margins under the pool."""
    m = np.asarray(margins, dtype=float)
    n = len(m)
    own = float(m.var(ddof=1)) / scale if n > 1 else math.nan
    variance, df = pool.moderated(own if n > 1 else 0.0, n - 1.0)
    if df <= 0 or not math.isfinite(variance):
        return float(m.mean()), math.nan, 0.0, math.nan
    se = math.sqrt(variance * scale / n)
    return float(m.mean()), se, df, float(stats.t.ppf(1 - alpha, df))


def _p(statistic: float, df: float, upper: bool) -> float:
    """The one-sided p-value of a t statistic: P(T ≥ t) (``upper``) or P(T ≤ t); a zero standard
    error makes the statistic ±inf, its p 0 or 1."""
    if math.isnan(statistic):
        return 1.0
    return float(stats.t.sf(statistic, df) if upper else stats.t.cdf(statistic, df))


def _ratio(x: float, se: float) -> float:
    if math.isnan(se):
        return math.nan
    if se == 0:
        return math.copysign(math.inf, x) if x else 0.0
    return x / se


def sign_test(margins: Sequence[float], scale: float, pool: Pool, *, slack: float = 0.0,
              sesoi: float = SESOI, alpha: float = ALPHA) -> Test:
    """The one-sided t tests of a sign claim, margin + ``slack`` > 0 (module docstring)."""
    mean, se, df, crit = _t(margins, scale, pool, alpha)
    half = crit * se
    return Test(mean, se, df, len(margins), mean - half, mean + half,
                _p(_ratio(mean + slack, se), df, upper=True),
                _p(_ratio(mean + slack + sesoi, se), df, upper=False))


def equivalence_test(margins: Sequence[float], scale: float, pool: Pool, *, delta: float,
                     alpha: float = ALPHA) -> Test:
    """Schuirmann's TOST of |margin| ≤ ``delta``, and its reverse (module docstring)."""
    mean, se, df, crit = _t(margins, scale, pool, alpha)
    half = crit * se
    p_for = max(_p(_ratio(mean + delta, se), df, upper=True),
                _p(_ratio(mean - delta, se), df, upper=False))
    # two one-sided chances to contradict: Bonferroni keeps the pair at α even when δ → 0
    p_against = min(1.0, 2 * min(_p(_ratio(mean - delta, se), df, upper=True),
                                 _p(_ratio(mean + delta, se), df, upper=False)))
    return Test(mean, se, df, len(margins), mean - half, mean + half, p_for, p_against)


def sign_count(n_for: int, n_against: int) -> tuple[float, float]:
    """(p_for, p_against) of the exact sign test on seeds that only count for or against the
    claim (a diverged run): each side's one-sided binomial p at 1/2; 1 with no such seed."""
    n = n_for + n_against
    if n == 0:
        return 1.0, 1.0
    return (float(stats.binomtest(n_for, n, 0.5, alternative="greater").pvalue),
            float(stats.binomtest(n_against, n, 0.5, alternative="greater").pvalue))


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error at most α over the family)."""
    p = np.asarray(p, dtype=float)
    if len(p) == 0:
        return p
    order = np.argsort(p, kind="stable")
    k = len(p)
    stepped = np.maximum.accumulate((k - np.arange(k)) * p[order])
    out = np.empty(k)
    out[order] = np.minimum(stepped, 1.0)
    return out


def bh(p: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg q-values (``scipy.stats.false_discovery_control``); NaN stays NaN."""
    p = np.asarray(p, dtype=float)
    q = np.full(len(p), math.nan)
    known = ~np.isnan(p)
    if known.any():
        q[known] = stats.false_discovery_control(p[known], method="bh")
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
