"""The verdict rule over many replicates at once: arrays in, verdict codes out.

The same rule as :func:`fednorm.claims.verdicts.judge_claim` (tests/test_claims_calibration.py
checks it unit by unit), for simulations and permutation nulls: per experiment a matrix of
values (settings × seeds; NaN: a missing or diverged run) with any leading replicate axes, and
per unit a contrast over the experiment's settings, the claim it belongs to (Holm over a
claim's units), its relation (a sign with ``slack`` and ``sesoi``, or ``within`` δ) and the
seeds that only count for or against it (diverged runs). Settling and tuned rates are not
modelled here: their inputs are the runs themselves.

    codes = verdict_codes(values, contrasts, claim=[0, 0, 1], alpha=0.025).codes
    # values (replicates, settings, seeds); codes (replicates, units): HOLDS 1, CONTRADICTED −1

Codes: ``HOLDS`` 1, ``CONTRADICTED`` −1, 0 inconclusive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

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

HOLDS, CONTRADICTED = 1, -1


@dataclass(frozen=True)
class Verdicts:
    """Per unit (leading replicate axes, units): the verdict ``codes``, the contrast's
    ``estimate``, ``se`` and ``df``, the seeds ``n`` with a margin, ``p_for`` and the
    Holm-adjusted ``p_against``."""

    codes: np.ndarray
    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray
    n: np.ndarray
    p_for: np.ndarray
    p_against: np.ndarray


def verdict_codes(values: np.ndarray, contrasts: np.ndarray, claim: np.ndarray | None = None,
                  *, within: np.ndarray | bool = False, slack: np.ndarray | float = 0.0,
                  sesoi: np.ndarray | float = SESOI, delta: np.ndarray | float = np.nan,
                  alpha: float = ALPHA, min_seeds: int = MIN_SEEDS,
                  n_for: np.ndarray | int = 0, n_against: np.ndarray | int = 0,
                  variances: str = "unit") -> Verdicts:
    """The verdicts of the units ``contrasts`` (units, settings) of one experiment's
    ``values`` (..., settings, seeds) at ``alpha`` (a look's): ``claim`` (units,) groups the
    units into claims (Holm over each; default: each unit its own); ``within``, ``slack``,
    ``sesoi``, ``delta`` per unit or one for all; ``n_for``, ``n_against``: seeds of diverged
    runs per unit, (..., units) or one. ``variances``: stats.fit_contrasts' (the rule: 'unit')."""
    y = np.asarray(values, dtype=float)
    c = np.atleast_2d(np.asarray(contrasts, dtype=float))
    units = len(c)
    claim = np.arange(units) if claim is None else np.asarray(claim)
    if claim.shape != (units,):
        raise ValueError(f"claim: shape {claim.shape}; allowed: ({units},), one per unit")
    within = np.broadcast_to(np.asarray(within, dtype=bool), (units,))
    slack, sesoi, delta = (np.broadcast_to(np.asarray(a, dtype=float), (units,))
                           for a in (slack, sesoi, delta))
    fit = fit_contrasts(y, c, variances=variances)
    lead = fit.estimate.shape
    up, down = (np.broadcast_to(np.asarray(a), lead) for a in (n_for, n_against))
    sign_for, sign_against = sign_ps(fit.estimate, fit.se, fit.df, slack, sesoi)
    near_for, near_against = equivalence_ps(fit.estimate, fit.se, fit.df,
                                            np.where(within, delta, 0.0))
    p_for = np.where(within, near_for, sign_for)
    p_against = np.where(within, near_against, sign_against)
    # under min_seeds margins: the exact sign test on the seeds' signs, where it can fire
    margins = np.einsum("uk,...ks->...us", c, np.where(np.isfinite(y), y, 0.0))
    involved = c != 0
    alive = (np.isfinite(y)[..., None, :, :] | ~involved[:, :, None]).all(axis=-2)
    shifted = np.where(alive, margins + slack[:, None], np.nan)
    ups = (shifted > 0).sum(axis=-1) + up
    downs = (shifted < -sesoi[:, None]).sum(axis=-1) + down
    seeds = fit.n + up + down
    count_for = sign_count(ups, seeds - ups)[0]
    count_against = sign_count(seeds - downs, downs)[1]
    near_count = sign_count(np.zeros_like(down), down)[1]
    few = fit.n < min_seeds
    fires = sign_fires(seeds, alpha)
    p_for = np.where(few, np.where(fires & ~within, count_for, 1.0), p_for)
    p_against = np.where(few, np.where(fires, np.where(within, near_count, count_against), 1.0),
                         p_against)
    adjusted = np.empty_like(p_against)
    for label in np.unique(claim):
        members = np.flatnonzero(claim == label)
        adjusted[..., members] = holm(p_against[..., members])
    codes = np.where((p_for <= alpha) & (down == 0), HOLDS,
                     np.where((adjusted <= alpha) & (up == 0), CONTRADICTED, 0))
    return Verdicts(codes, fit.estimate, fit.se, fit.df, fit.n, p_for, adjusted)


def room(codes: np.ndarray, estimate: np.ndarray, se: np.ndarray, df: np.ndarray, *,
         within: bool, slack: float, sesoi: float, delta: float, alpha: float, k: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """How far (points) each unit's mean margin may fall and rise before its firm verdict
    (``codes``: HOLDS, CONTRADICTED, 0) would: from the bound of its interval that decides it
    to the decision's threshold, ≥ 0; inf where a move that way only strengthens it (and for an
    inconclusive unit). ``holds``: low + slack (``within``: low + δ and δ − high), the
    (1 − 2α) interval; ``contradicted``: −slack − sesoi − high (``within``: low − δ or
    −δ − high), each bound at α / k (α / 2k within), Bonferroni over the claim's ``k`` units,
    which bounds Holm's step from below, so the room is never overstated. Without a t
    interval (df 0 or no finite SE: the exact sign test decided) the room is 0 each way a move
    could undo it. The settled veto's (fednorm.claims.verdicts.veto, and the null's)."""
    inf = np.inf
    codes, estimate, se, df = np.broadcast_arrays(*(np.asarray(a, dtype=float)
                                                    for a in (codes, estimate, se, df)))
    tested = (df > 0) & np.isfinite(se)
    dfs = np.where(tested, df, 1.0)
    ses = np.where(tested, se, 0.0)
    half = stats.t.ppf(1 - alpha, dfs) * ses
    low, high = estimate - half, estimate + half
    strict = stats.t.ppf(1 - alpha / (k * (2 if within else 1)), dfs) * ses
    c_low, c_high = estimate - strict, estimate + strict
    if within:
        hold = (np.maximum(low + delta, 0.0), np.maximum(delta - high, 0.0))
        against_down = np.where(c_high < -delta, inf, np.where(c_low > delta,
                                np.maximum(c_low - delta, 0.0), 0.0))
        against_up = np.where(c_high < -delta, -delta - c_high, np.where(c_low > delta, inf, 0.0))
        untested = (0.0, 0.0, 0.0, 0.0)
    else:
        hold = (np.maximum(low + slack, 0.0), np.full(estimate.shape, inf))
        against_down = np.full(estimate.shape, inf)
        against_up = np.maximum(-slack - sesoi - c_high, 0.0)
        untested = (0.0, inf, inf, 0.0)
    down = np.where(codes == HOLDS, np.where(tested, hold[0], untested[0]),
                    np.where(codes == CONTRADICTED, np.where(tested, against_down, untested[2]),
                             inf))
    up = np.where(codes == HOLDS, np.where(tested, hold[1], untested[1]),
                  np.where(codes == CONTRADICTED, np.where(tested, against_up, untested[3]), inf))
    return down, up
