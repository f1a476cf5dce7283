"""The verdict rule, on one page, read top to bottom; written once over arrays: the ledger calls
it on one claim's units, the calibration (:mod:`fednorm.claims.calibration`) on thousands of
simulated ledgers at once. docs/claims.md states it in the same order.

1. **The claim and its units.** A claim is judged in units, each a contrast c of its
   experiment's settings (settings × seeds; :mod:`fednorm.claims.comparisons` builds them).
   Its margin on seed s is m_s = Σ_j c_j x_js, in which the seed's common part cancels.
2. **Hypotheses, the claim and its mirror alike.** A sign claim says margin + slack > 0. Its
   unit *holds* when H0: margin + slack ≤ 0 is rejected; it is *contradicted* when the mirror
   H0: margin + slack ≥ 0 is rejected; it is *negligible* when neither and Schuirmann's
   equivalence test rejects |margin + slack| ≥ sesoi (TOST). A near-equality (``within``, |margin|
   ≤ δ) holds by TOST and is contradicted when the (1 − α) interval lies outside ±δ. Swapping a
   claim's sides (c → −c) swaps holds and contradicted and keeps negligible, whatever the data.
3. **The test.** The paired t on the unit's own margins (n − 1 df; exact under unequal noise and
   runs shared with other units: :func:`fednorm.claims.stats.fit_contrasts`), its sd floored at
   the values' lattice (:func:`floored`). Beside it, never instead: the exact sign-flip
   (permutation) p of the same margins and a flag for a seed more than 3 MADs from the median.
   A unit with fewer than ``min_seeds`` margins (diverged runs) is judged by the exact sign test
   on its seeds' signs, where it can fire (0.5^N ≤ α).
4. **α.** One look at one-sided α on the design fixed before the runs; a unit's code is its own
   tests at α, unadjusted, so the mirror is exact unit by unit.
5. **Multiplicity.** Within a claim: ``holds`` when every unit holds and ``negligible`` when every
   unit is (intersection–union: level α without correction, Berger 1982); ``contradicted`` when
   some unit's Holm-adjusted p_against ≤ α (family-wise over the claim's units). Across claims the
   ledger reports Benjamini–Yekutieli q-values (:mod:`fednorm.claims.words_ledger`); they decide
   nothing.
6. **Overrides**, each the same for a verdict and its mirror: a diverged run on the side a verdict
   favours vetoes it (it counts against the claim for ``holds``, for it against ``contradicted``,
   against ``negligible`` always); a side whose tuned value sits at an edge of its (extended)
   grid vetoes a verdict that disfavours that side (its optimum may lie beyond: ``tuning``);
   an inconclusive claim whose power stated before the runs cannot decide it is
   ``undecidable`` (:func:`claim_verdict`).
7. **Recheck.** None: every unit is judged once, at its design's budget (the claims' second stage
   trains only the tuned methods' fresh seeds).
8. **The verdict** of the claim: :func:`claim_codes` (arrays) and :func:`claim_verdict` (one).

The numeric ledger (:func:`fednorm.claims.numbers.verdict`), beside it: a number a paper states
is ``reproduced`` when ours (mean over seeds) lies within the larger of the claim's tolerance and
√(paper's spread² + our seed sd²) of it with no seed diverged, else ``differs``; it compares
scales, it tests nothing, and no words verdict reads it.

    v = verdict_codes(values, contrasts, claim=[0, 0, 1], alpha=0.05)
    v.codes                          # (replicates, units); claim_codes(v, [0, 0, 1], 0.05)
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np

from fednorm.claims.stats import (
    ALPHA,
    MIN_SEEDS,
    SESOI,
    equivalence_ps,
    fit_contrasts,
    holm,
    sign_count,
    sign_fires,
    sign_ps,
)

HOLDS, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE = 1, -1, 2, 0
UNDECIDABLE = 3  # a claim inconclusive where its design said before the runs it could not decide
OUTLIER_MADS = 3.0  # a seed's margin this many MADs (normal-scaled) from the median is flagged
_MAD_SCALE = 1.4826  # MAD × this estimates σ under normal margins
SIGN_FLIP_EXACT = 10  # seeds up to which the sign-flip p enumerates every flip (2^10)


def floored(se: np.ndarray, n: np.ndarray, scale: np.ndarray, lattice: float) -> np.ndarray:
    """The standard error of a unit's mean margin with its margins' sd floored at the rounding
    error of values on a ``lattice`` (points): each value carries h²/12, a margin Σ c_j x_j
    carries h² Σ c_j² / 12 (``scale`` = Σ c_j²), so sd ≥ h √(scale / 12). Two equal margins
    would otherwise have sd 0 and an infinite t."""
    se, n, scale = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (se, n, scale)))
    with np.errstate(invalid="ignore", divide="ignore"):
        floor = lattice * np.sqrt(scale / 12.0) / np.sqrt(n)
    return np.where((n > 1) & np.isfinite(se), np.maximum(se, floor), se)


def sign_flip_ps(margins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact sign-flip (permutation) test of margins symmetric about 0: (p_for, p_against)
    = the shares of the 2^S sign patterns whose sum is ≥ (≤) the observed sum, the identity
    included. ``margins`` (..., seeds), NaN: no margin (flipping a 0 changes nothing, so every
    pattern of the observed seeds is counted 2^missing times: the shares are exact). Up to
    SIGN_FLIP_EXACT seeds; beyond, the identity and 2^SIGN_FLIP_EXACT − 1 patterns drawn from a
    fixed stream (a Monte Carlo p, the same on every machine)."""
    m = np.where(np.isfinite(margins), margins, 0.0)
    seeds = m.shape[-1]
    if seeds == 0:
        ones = np.ones(m.shape[:-1])
        return ones, ones
    if seeds <= SIGN_FLIP_EXACT:
        flips = np.array(list(itertools.product((1.0, -1.0), repeat=seeds)))  # (2^S, S)
    else:
        drawn = np.random.default_rng(0).choice((1.0, -1.0), (2**SIGN_FLIP_EXACT - 1, seeds))
        flips = np.vstack([np.ones((1, seeds)), drawn])
    observed = m.sum(axis=-1, keepdims=True)
    sums = m @ flips.T  # (..., 2^S)
    tol = 1e-9 * (1 + np.abs(m).sum(axis=-1, keepdims=True))
    return ((sums >= observed - tol).mean(axis=-1), (sums <= observed + tol).mean(axis=-1))


def outlier_seeds(margins: np.ndarray, lattice: float = 0.0) -> np.ndarray:
    """How many seeds' margins lie more than OUTLIER_MADS normal-scaled MADs from the median of
    the unit's margins (the MAD floored at the values' ``lattice``): a collapsing seed, which a
    mean and a t hide. ``margins`` (..., seeds), NaN: none."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a unit with no margin at all
        med = np.nanmedian(margins, axis=-1, keepdims=True)
        mad = _MAD_SCALE * np.nanmedian(np.abs(margins - med), axis=-1, keepdims=True)
        far = np.abs(margins - med) > OUTLIER_MADS * np.maximum(mad, max(lattice, 1e-9))
    return np.where(np.isfinite(margins), far, False).sum(axis=-1)


@dataclass(frozen=True)
class Verdicts:
    """Per unit (leading replicate axes, units): the verdict ``codes``; the contrast's
    ``estimate``, its (floored) ``se`` and ``df``; the seeds ``n`` with a margin; the p of each
    of the three nulls rejected by a verdict (``p_for``: holds, ``p_against``: contradicted,
    ``p_negligible``), ``p_holm`` (p_against Holm-adjusted over the claim's units); the sign-flip
    p's beside the t's (``flip_for``, ``flip_against``) and the seeds ``outliers`` flagged."""

    codes: np.ndarray
    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray
    n: np.ndarray
    p_for: np.ndarray
    p_against: np.ndarray
    p_negligible: np.ndarray
    p_holm: np.ndarray
    flip_for: np.ndarray
    flip_against: np.ndarray
    outliers: np.ndarray


def decide(estimate: np.ndarray, se: np.ndarray, df: np.ndarray, n: np.ndarray,
           ups: np.ndarray, downs: np.ndarray, *, claim: np.ndarray, within: np.ndarray,
           slack: np.ndarray, sesoi: np.ndarray, delta: np.ndarray, alpha: float,
           min_seeds: int, n_for: np.ndarray, n_against: np.ndarray,
           edge: np.ndarray | int = 0
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps 2–6 of the module's docstring on units (..., U) of claims ``claim`` (U,): their
    contrast's ``estimate``, ``se`` (floored) and ``df``, the seeds ``n`` with a margin, and for
    the sign test the seeds ``ups`` and ``downs`` whose margin + slack is above and below 0,
    diverged runs (``n_for``, ``n_against``) included. ``edge`` per unit: +1 where a side the
    contrast counts positively sits at an edge of its tuning grid, −1 a negative side, 2 both,
    0 none. Returns (codes, p_for, p_against, p_negligible, Holm-adjusted p_against)."""
    # 2–3. the three nulls' p by the t test: the claim's, its mirror's, and equivalence's
    sign_for, sign_against = sign_ps(estimate, se, df, slack, 0.0)
    near_for, near_against = equivalence_ps(estimate, se, df, np.where(within, delta, 0.0))
    small, _ = equivalence_ps(estimate + slack, se, df, sesoi)
    p_for = np.where(within, near_for, sign_for)
    p_against = np.where(within, near_against, sign_against)
    p_negligible = np.where(within, 1.0, small)
    # 3. few seeds with a margin: the exact sign test on the seeds' signs, where it can fire
    seeds = n + n_for + n_against
    count_for, count_against = sign_count(ups, downs)
    near_count = sign_count(np.zeros_like(n_against), n_against)[1]
    few = n < min_seeds
    fires = sign_fires(seeds, alpha)
    p_for = np.where(few, np.where(fires & ~within, count_for, 1.0), p_for)
    p_against = np.where(few, np.where(fires, np.where(within, near_count, count_against), 1.0),
                         p_against)
    p_negligible = np.where(few, 1.0, p_negligible)
    # 4. α, unit by unit; 6. the diverged runs' vetoes
    codes = np.where((p_for <= alpha) & (n_against == 0), HOLDS,
                     np.where((p_against <= alpha) & (n_for == 0), CONTRADICTED,
                              np.where((p_negligible <= alpha) & (n_for + n_against == 0),
                                       NEGLIGIBLE, INCONCLUSIVE)))
    # 6. a side at an edge of its grid vetoes a verdict that disfavours it
    codes = np.where(_disfavours_edge(codes, estimate, within, np.asarray(edge)), INCONCLUSIVE,
                     codes)
    # 5. Holm over each claim's units, for the claim's contradiction
    adjusted = np.empty_like(np.asarray(p_against, dtype=float))
    for label in np.unique(claim):
        members = np.flatnonzero(claim == label)
        adjusted[..., members] = holm(p_against[..., members])
    return codes, p_for, p_against, p_negligible, adjusted


def _disfavours_edge(codes: np.ndarray, estimate: np.ndarray, within: np.ndarray,
                     edge: np.ndarray) -> np.ndarray:
    """Where a verdict disfavours a side at an edge of its grid: ``holds`` (the positive sides
    favoured) a negative side's, ``contradicted`` a positive side's, ``negligible`` and a
    near-equality's ``holds`` any side's, a near-equality's contradiction the lower side's."""
    pos = (edge == 1) | (edge == 2)
    neg = (edge == -1) | (edge == 2)
    lower_pos = np.where(np.asarray(estimate) < 0, pos, neg)
    equal = (codes == NEGLIGIBLE) | (within & (codes == HOLDS))
    return np.where(equal, pos | neg,
                    np.where(codes == HOLDS, neg,
                             np.where(codes == CONTRADICTED, np.where(within, lower_pos, pos),
                                      False)))


def claim_codes(v: Verdicts, claim: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Step 5 and 8: each claim's code (..., claims in order of np.unique(claim)) from its
    units': HOLDS when every unit holds, CONTRADICTED when some contradicted unit's Holm-adjusted
    p_against ≤ α, NEGLIGIBLE when every unit is negligible, else INCONCLUSIVE."""
    claim = np.asarray(claim)
    out = []
    for label in np.unique(claim):
        members = np.flatnonzero(claim == label)
        codes = v.codes[..., members]
        against = ((codes == CONTRADICTED) & (v.p_holm[..., members] <= alpha)).any(axis=-1)
        out.append(np.where((codes == HOLDS).all(axis=-1), HOLDS,
                            np.where(against, CONTRADICTED,
                                     np.where((codes == NEGLIGIBLE).all(axis=-1), NEGLIGIBLE,
                                              INCONCLUSIVE))))
    return np.stack(out, axis=-1)


def claim_verdict(codes: list[int], p_holm: list[float], alpha: float,
                  decidable: bool = True) -> int:
    """Step 8 for one claim: :func:`claim_codes` on its units' codes and Holm-adjusted
    p_against, and UNDECIDABLE where it is inconclusive and its power stated before the runs
    said it could not be decided (fednorm.claims.power)."""
    if not codes:
        return INCONCLUSIVE
    if all(c == HOLDS for c in codes):
        return HOLDS
    if any(c == CONTRADICTED and p <= alpha for c, p in zip(codes, p_holm, strict=True)):
        return CONTRADICTED
    if all(c == NEGLIGIBLE for c in codes):
        return NEGLIGIBLE
    return INCONCLUSIVE if decidable else UNDECIDABLE


def verdict_codes(values: np.ndarray, contrasts: np.ndarray, claim: np.ndarray | None = None,
                  *, within: np.ndarray | bool = False, slack: np.ndarray | float = 0.0,
                  sesoi: np.ndarray | float = SESOI, delta: np.ndarray | float = np.nan,
                  alpha: float = ALPHA, min_seeds: int = MIN_SEEDS, lattice: float = 0.0,
                  n_for: np.ndarray | int = 0, n_against: np.ndarray | int = 0,
                  edge: np.ndarray | int = 0) -> Verdicts:
    """The verdicts of the units ``contrasts`` (units, settings) of one experiment's
    ``values`` (..., settings, seeds; NaN: a missing or diverged run): ``claim`` (units,)
    groups the units into claims (Holm over each; default: each unit its own); ``within``,
    ``slack``, ``sesoi``, ``delta``, ``edge`` per unit or one for all; ``n_for``, ``n_against``:
    seeds of diverged runs per unit, (..., units) or one; ``lattice``: the values' lattice
    (points)."""
    y = np.asarray(values, dtype=float)
    c = np.atleast_2d(np.asarray(contrasts, dtype=float))
    units = len(c)
    claim = np.arange(units) if claim is None else np.asarray(claim)
    if claim.shape != (units,):
        raise ValueError(f"claim: shape {claim.shape}; allowed: ({units},), one per unit")
    within = np.broadcast_to(np.asarray(within, dtype=bool), (units,))
    slack, sesoi, delta = (np.broadcast_to(np.asarray(a, dtype=float), (units,))
                           for a in (slack, sesoi, delta))
    edge = np.broadcast_to(np.asarray(edge), (units,))
    fit = fit_contrasts(y, c)
    lead = fit.estimate.shape
    up, down = (np.broadcast_to(np.asarray(a), lead) for a in (n_for, n_against))
    se = floored(fit.se, fit.n, np.square(c).sum(axis=1), lattice)
    margins = np.einsum("uk,...ks->...us", c, np.where(np.isfinite(y), y, 0.0))
    alive = (np.isfinite(y)[..., None, :, :] | (c == 0)[:, :, None]).all(axis=-2)
    shifted = np.where(alive, margins + slack[:, None], np.nan)
    ups = (shifted > 0).sum(axis=-1) + up
    downs = (shifted < 0).sum(axis=-1) + down
    codes, p_for, p_against, p_negligible, p_holm = decide(
        fit.estimate, se, fit.df, fit.n, ups, downs, claim=claim, within=within, slack=slack,
        sesoi=sesoi, delta=delta, alpha=alpha, min_seeds=min_seeds, n_for=up, n_against=down,
        edge=edge)
    flip_for, flip_against = sign_flip_ps(shifted)
    return Verdicts(codes, fit.estimate, se, fit.df, fit.n, p_for, p_against, p_negligible,
                    p_holm, flip_for, flip_against, outlier_seeds(shifted, lattice))
