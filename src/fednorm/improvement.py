"""A comparison of methods as few-seed ML reads it (rliable: Agarwal et al., *Deep RL at the edge
of the statistical precipice*, NeurIPS 2021): pure functions of a tidy frame of runs, one row
per (method, setting, seed) with its final ``value`` (NaN: a diverged run).

- **Probability of improvement** of X over Y (:func:`improvement`): per setting, P(X > Y) of a
  run of X against a run of Y, the Mann–Whitney statistic over every pair of their runs,
  U / (n_X n_Y) with a tie counting 1/2; averaged over the settings where both have runs. A
  diverged run is below every finite one (two diverged runs tie).
- **Interquartile mean** (IQM): the mean of the middle 50 % of a method's finite runs pooled
  over its settings (``scipy.stats.trim_mean`` at 0.25, rliable's estimand: robust to a seed
  that collapses, unlike the mean, and less noisy than the median), beside the mean.
- **Performance profile** (:func:`profile`): the fraction of a method's (setting, seed) runs
  whose value is above τ, a curve over τ (a diverged run is above none).

Each comes with a percentile 95 % interval from the **stratified bootstrap** (:func:`draws`):
within each setting, each method's runs resampled with replacement, independently of the
other method's (rliable's ``StratifiedIndependentBootstrap``), so every setting keeps its
count of runs and the interval is over seeds, not over the choice of settings.

    table = improvement(runs, baseline="bn")  # runs: method, setting, seed, value
    curves = profile(runs, taus)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

REPLICATES = 2_000  # bootstrap replicates
SEED = 20211206  # of the bootstrap's draws: the same table every run
CONFIDENCE = 0.95
TRIM = 0.25  # the IQM's trimmed share at each end
COLUMNS = ("method", "setting", "seed", "value")


def check_runs(runs: pd.DataFrame) -> None:
    """A frame of runs: the :data:`COLUMNS`, one row per (method, setting, seed)."""
    missing = [c for c in COLUMNS if c not in runs.columns]
    if missing:
        raise ValueError(f"runs: columns {missing} missing; allowed: a frame with {COLUMNS}")
    if runs.duplicated(["method", "setting", "seed"]).any():
        raise ValueError("runs: a (method, setting, seed) appears twice; allowed: one run each")


def pair_scores(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per pair (i, j): 1 where x_i > y_j, 1/2 where they tie, else 0; NaN (diverged) is
    below every number and ties NaN."""
    a = np.where(np.isnan(x), -np.inf, x)[:, None]
    b = np.where(np.isnan(y), -np.inf, y)[None, :]
    return (a > b) + 0.5 * (a == b)


def probability(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) of one setting's runs ``x`` and ``y``: the mean of :func:`pair_scores`."""
    return float(pair_scores(np.asarray(x, float), np.asarray(y, float)).mean())


def draws(rng: np.random.Generator, n: int, replicates: int) -> np.ndarray:
    """The bootstrap's resampled runs of one method in one setting as counts (replicates, n):
    how often each of its n runs is drawn in n draws with replacement."""
    picks = rng.integers(0, n, (replicates, n))
    return (picks[:, :, None] == np.arange(n)).sum(axis=1)


def interval(samples: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of bootstrap ``samples``."""
    a = (1 - confidence) / 2
    low, high = np.quantile(samples, [a, 1 - a])
    return float(low), float(high)


def _by_setting(runs: pd.DataFrame, method: str) -> dict[object, np.ndarray]:
    part = runs[runs["method"] == method].sort_values("seed")
    return {s: g["value"].to_numpy(float) for s, g in part.groupby("setting", sort=True)}


def _iqm(values: np.ndarray, weights: np.ndarray) -> float:
    """The IQM of ``values`` each taken ``weights`` times (a bootstrap's counts), finite only."""
    keep = np.isfinite(values) & (weights > 0)
    repeated = np.repeat(values[keep], weights[keep].astype(int))
    return float(stats.trim_mean(repeated, TRIM)) if repeated.size else np.nan


def improvement(runs: pd.DataFrame, baseline: str, *, replicates: int = REPLICATES,
                seed: int = SEED, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Per method (the baseline first, then in order of appearance): ``probability`` of
    improvement over ``baseline`` with its bootstrap ``low`` and ``high`` (the module's
    docstring; NaN for the baseline and where no setting has both), the ``settings`` it was
    averaged over, its ``runs`` and ``diverged`` runs, its ``mean`` and ``iqm`` over its finite
    runs with the IQM's bootstrap interval (``iqm_low``, ``iqm_high``). The draws come
    method by method, then setting by setting (sorted), the method's counts then the
    baseline's."""
    check_runs(runs)
    methods = list(dict.fromkeys(runs["method"]))
    if baseline not in methods:
        raise ValueError(f"baseline: {baseline!r}; allowed: a method of the runs, {methods}")
    if replicates < 1:
        raise ValueError(f"replicates: {replicates}; allowed: an integer >= 1")
    base = _by_setting(runs, baseline)
    rng = np.random.default_rng(seed)
    rows = []
    for method in [baseline, *(m for m in methods if m != baseline)]:
        own = _by_setting(runs, method)
        values = np.concatenate(list(own.values()))
        row = {"method": method, "baseline": baseline, "runs": len(values),
               "diverged": int(np.isnan(values).sum()),
               "mean": float(np.nanmean(values)) if np.isfinite(values).any() else np.nan,
               "iqm": _iqm(values, np.ones(len(values)))}
        shared = [s for s in own if s in base] if method != baseline else []
        boot = np.zeros((replicates, 0))
        weights = []
        for s in own:
            counts = draws(rng, len(own[s]), replicates)
            weights.append(counts)
            if s in shared:
                scores = pair_scores(own[s], base[s])
                other = draws(rng, len(base[s]), replicates)
                p = np.einsum("ri,ij,rj->r", counts, scores, other) / scores.size
                boot = np.column_stack([boot, p])
        if shared:
            point = np.mean([probability(own[s], base[s]) for s in shared])
            row |= dict(zip(("probability", "low", "high"),
                            (float(point), *interval(boot.mean(axis=1), confidence)),
                            strict=True))
        else:
            row |= {"probability": np.nan, "low": np.nan, "high": np.nan}
        iqms = np.array([_iqm(values, w) for w in np.hstack(weights)])
        row |= {"settings": len(shared),
                **dict(zip(("iqm_low", "iqm_high"), interval(iqms[np.isfinite(iqms)],
                                                             confidence)
                           if np.isfinite(iqms).any() else (np.nan, np.nan), strict=True))}
        rows.append(row)
    return pd.DataFrame(rows)


def profile(runs: pd.DataFrame, taus: Sequence[float], *, replicates: int = REPLICATES,
            seed: int = SEED, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """One row per (method, τ): ``fraction`` of the method's runs with a value above τ (a
    diverged run: none), its stratified-bootstrap ``low`` and ``high``, and its ``runs``.
    The draws come method by method (in order of appearance), setting by setting (sorted)."""
    check_runs(runs)
    taus = np.asarray(taus, dtype=float)
    rng = np.random.default_rng(seed)
    rows = []
    for method in dict.fromkeys(runs["method"]):
        own = _by_setting(runs, method)
        values = np.concatenate(list(own.values()))
        above = np.where(np.isnan(values), -np.inf, values)[:, None] > taus[None, :]
        counts = np.hstack([draws(rng, len(v), replicates) for v in own.values()])
        boot = counts @ above / len(values)  # (replicates, taus)
        a = (1 - confidence) / 2
        low, high = np.quantile(boot, [a, 1 - a], axis=0)
        rows.append(pd.DataFrame({"method": method, "tau": taus, "fraction": above.mean(axis=0),
                                  "low": low, "high": high, "runs": len(values)}))
    return pd.concat(rows, ignore_index=True)
