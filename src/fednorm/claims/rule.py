"""The verdict rule, written once over arrays: the ledger calls it on one claim's units, the
calibration (:mod:`fednorm.claims.calibration`) on thousands of simulated ledgers at once.

A unit is a contrast of its experiment's settings (:func:`fednorm.claims.stats.fit_contrasts`:
the paired t on the unit's own margins, n − 1 df); :func:`decide` turns its estimate, standard
error and seed counts into a verdict code at one look at α:

- ``HOLDS`` (1): the claim's opposite rejected at α (sign: margin + slack ≤ 0; ``within``: TOST,
  |margin| ≥ δ) and no diverged run counts against it;
- ``CONTRADICTED`` (−1): the claim rejected by at least its smallest effect of interest (sign:
  margin + slack ≥ −sesoi; ``within``: the (1 − α) interval outside ±δ), Holm-adjusted over
  the claim's units, and no diverged run counts for it;
- 0: neither.

**Ties on the lattice.** Accuracies on a fixed test set sit on a lattice (0.1 points on 1,000
images): two equal margins have a sample sd of 0, which would make t infinite and the unit
firm. Each value carries a rounding error of variance h²/12 (h the lattice), so a margin
Σ c_j x_j carries h² Σ c_j² / 12: the margins' sd is floored there (:func:`floored`).

**Few seeds.** A unit with fewer than ``min_seeds`` margins (diverged runs) is judged by the
exact sign test on its seeds' signs, only where it can fire (0.5^N ≤ α).

    codes = verdict_codes(values, contrasts, claim=[0, 0, 1], alpha=0.05).codes
    # values (replicates, settings, seeds); codes (replicates, units)
"""

from __future__ import annotations

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

HOLDS, CONTRADICTED = 1, -1


def floored(se: np.ndarray, n: np.ndarray, scale: np.ndarray, lattice: float) -> np.ndarray:
    """The standard error of a unit's mean margin with its margins' sd floored at the rounding
    error of values on a ``lattice`` (points): sd ≥ h √(Σ c_j² / 12), ``scale`` = Σ c_j²."""
    se, n, scale = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (se, n, scale)))
    with np.errstate(invalid="ignore", divide="ignore"):
        floor = lattice * np.sqrt(scale / 12.0) / np.sqrt(n)
    return np.where((n > 1) & np.isfinite(se), np.maximum(se, floor), se)


@dataclass(frozen=True)
class Verdicts:
    """Per unit (leading replicate axes, units): the verdict ``codes``, the contrast's
    ``estimate``, its (floored) ``se`` and ``df``, the seeds ``n`` with a margin, ``p_for``
    and the Holm-adjusted ``p_against``."""

    codes: np.ndarray
    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray
    n: np.ndarray
    p_for: np.ndarray
    p_against: np.ndarray


def decide(estimate: np.ndarray, se: np.ndarray, df: np.ndarray, n: np.ndarray,
           ups: np.ndarray, downs: np.ndarray, *, claim: np.ndarray, within: np.ndarray,
           slack: np.ndarray, sesoi: np.ndarray, delta: np.ndarray, alpha: float,
           min_seeds: int, n_for: np.ndarray, n_against: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rule (the module's docstring) on units (..., U) of claims ``claim`` (U,): their
    contrast's ``estimate``, ``se`` (floored) and ``df``, the seeds ``n`` with a margin, and
    for the sign test the seeds ``ups`` and ``downs`` whose margin (+ slack) is above 0 and
    below −sesoi, diverged runs (``n_for``, ``n_against``) included. Returns (codes, p_for,
    Holm-adjusted p_against)."""
    sign_for, sign_against = sign_ps(estimate, se, df, slack, sesoi)
    near_for, near_against = equivalence_ps(estimate, se, df, np.where(within, delta, 0.0))
    p_for = np.where(within, near_for, sign_for)
    p_against = np.where(within, near_against, sign_against)
    seeds = n + n_for + n_against
    count_for = sign_count(ups, seeds - ups)[0]
    count_against = sign_count(seeds - downs, downs)[1]
    near_count = sign_count(np.zeros_like(n_against), n_against)[1]
    few = n < min_seeds
    fires = sign_fires(seeds, alpha)
    p_for = np.where(few, np.where(fires & ~within, count_for, 1.0), p_for)
    p_against = np.where(few, np.where(fires, np.where(within, near_count, count_against), 1.0),
                         p_against)
    adjusted = np.empty_like(np.asarray(p_against, dtype=float))
    for label in np.unique(claim):
        members = np.flatnonzero(claim == label)
        adjusted[..., members] = holm(p_against[..., members])
    codes = np.where((p_for <= alpha) & (n_against == 0), HOLDS,
                     np.where((adjusted <= alpha) & (n_for == 0), CONTRADICTED, 0))
    return codes, p_for, adjusted


def verdict_codes(values: np.ndarray, contrasts: np.ndarray, claim: np.ndarray | None = None,
                  *, within: np.ndarray | bool = False, slack: np.ndarray | float = 0.0,
                  sesoi: np.ndarray | float = SESOI, delta: np.ndarray | float = np.nan,
                  alpha: float = ALPHA, min_seeds: int = MIN_SEEDS, lattice: float = 0.0,
                  n_for: np.ndarray | int = 0, n_against: np.ndarray | int = 0) -> Verdicts:
    """The verdicts of the units ``contrasts`` (units, settings) of one experiment's
    ``values`` (..., settings, seeds; NaN: a missing or diverged run): ``claim`` (units,)
    groups the units into claims (Holm over each; default: each unit its own); ``within``,
    ``slack``, ``sesoi``, ``delta`` per unit or one for all; ``n_for``, ``n_against``: seeds of
    diverged runs per unit, (..., units) or one; ``lattice``: the values' lattice (points)."""
    y = np.asarray(values, dtype=float)
    c = np.atleast_2d(np.asarray(contrasts, dtype=float))
    units = len(c)
    claim = np.arange(units) if claim is None else np.asarray(claim)
    if claim.shape != (units,):
        raise ValueError(f"claim: shape {claim.shape}; allowed: ({units},), one per unit")
    within = np.broadcast_to(np.asarray(within, dtype=bool), (units,))
    slack, sesoi, delta = (np.broadcast_to(np.asarray(a, dtype=float), (units,))
                           for a in (slack, sesoi, delta))
    fit = fit_contrasts(y, c)
    lead = fit.estimate.shape
    up, down = (np.broadcast_to(np.asarray(a), lead) for a in (n_for, n_against))
    se = floored(fit.se, fit.n, np.square(c).sum(axis=1), lattice)
    margins = np.einsum("uk,...ks->...us", c, np.where(np.isfinite(y), y, 0.0))
    alive = (np.isfinite(y)[..., None, :, :] | (c == 0)[:, :, None]).all(axis=-2)
    shifted = np.where(alive, margins + slack[:, None], np.nan)
    ups = (shifted > 0).sum(axis=-1) + up
    downs = (shifted < -sesoi[:, None]).sum(axis=-1) + down
    codes, p_for, p_against = decide(fit.estimate, se, fit.df, fit.n, ups, downs, claim=claim,
                                     within=within, slack=slack, sesoi=sesoi, delta=delta,
                                     alpha=alpha, min_seeds=min_seeds, n_for=up, n_against=down)
    return Verdicts(codes, fit.estimate, se, fit.df, fit.n, p_for, p_against)
