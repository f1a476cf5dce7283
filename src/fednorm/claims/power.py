"""Each claim's power, stated before the runs: what its design's seeds can detect, from a
committed table of seed noise measured on other seeds than the ledger judges (the claims
file's ``noise``, e.g. config/claims_noise.csv: per claim, the sd of its deciding unit's
margin across seeds, in points).

At n seeds, one look at one-sided α, power 0.8 (central-t quantiles on n − 1 df, the usual
approximation; :func:`fednorm.claims.stats.detectable`):

- a sign claim's *detectable margin*: (t_{1−α} + t_{0.8}) σ / √n, the smallest true margin
  it would find; a contradiction needs the margin below −sesoi by as much;
- a near-equality (|margin| ≤ δ) holds with power 0.8 at a true margin of 0 only where
  δ ≥ (t_{1−α} + t_{0.9}) σ / √n (both one-sided tests of the TOST at once): where δ is
  smaller the claim is **undecidable at this scale**, said before the runs, and an
  inconclusive verdict is shown as such (fednorm.claims.words_ledger).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from scipy import stats

from fednorm.claims.comparisons import compares_methods
from fednorm.claims.words import Relation, Words
from fednorm.config import ConfigError
from fednorm.plan import Plan

POWER = 0.8
NOISE_COLUMNS = ("id", "seeds", "sd")


@dataclass(frozen=True)
class Power:
    """A claim's design: ``seeds`` per setting, the margin's seed sd ``sigma`` measured
    beforehand (NaN: not measured), the smallest margin it detects (within: the δ it needs),
    and whether its design can decide it."""

    seeds: int
    sigma: float
    detectable: float
    decidable: bool = True


def read_noise(path: str | Path) -> dict[str, float]:
    """Claim id -> the sd of its deciding unit's margin across seeds (points), from a CSV of
    NOISE_COLUMNS (lines starting with '#' are its provenance)."""
    table = pd.read_csv(path, comment="#")
    missing = [c for c in NOISE_COLUMNS if c not in table.columns]
    if missing:
        raise ConfigError(f"noise table {path}: column '{missing[0]}' is missing; allowed: a "
                          f"CSV with columns {list(NOISE_COLUMNS)}")
    return {str(r.id): float(r.sd) for r in table.itertuples(index=False)}


def power_of(claim: Relation, sigma: float, seeds: int, alpha: float) -> Power:
    """The power of ``claim`` at ``seeds`` seeds, its margin's seed sd ``sigma`` (module
    docstring)."""
    if seeds < 2 or not math.isfinite(sigma):
        return Power(seeds, sigma, math.nan)
    df = seeds - 1
    se = sigma / math.sqrt(seeds)
    if claim.kind == "within":
        assert claim.delta is not None
        needed = float((stats.t.ppf(1 - alpha, df) + stats.t.ppf(1 - (1 - POWER) / 2, df)) * se)
        return Power(seeds, sigma, needed, claim.delta >= needed)
    return Power(seeds, sigma, float((stats.t.ppf(1 - alpha, df) + stats.t.ppf(POWER, df)) * se))


def planned_seeds(plan: Plan, name: str) -> int:
    """The number of distinct seeds of experiment ``name``'s planned runs (0 where it plans
    none: an experiment a profile dropped)."""
    return len(seeds_of(plan, name))


def design_seeds(words: Words, plan: Plan) -> dict[str, int]:
    """Claim id -> the seeds its design gives every setting: the fewest distinct seeds among
    its experiments' planned runs (:func:`planned_seeds`), or, for a claim judged at tuned
    values, the second stage's fresh seeds (fednorm.claims.stage2)."""
    fresh = len(plan.stage2.seeds) if plan.stage2 else 0
    out = {}
    for claim in words.claims:
        if fresh and words.tuning and compares_methods(claim):
            out[claim.id] = fresh
            continue
        counts = [c for c in (planned_seeds(plan, e) for e in claim.experiments) if c]
        out[claim.id] = min(counts) if counts else 0
    return out


def seeds_of(plan: Plan, name: str) -> set[int]:
    """The distinct seeds of experiment ``name``'s planned runs."""
    return {plan.runs[r].seed for r in plan.experiments.get(name, ())}


def judged_seeds(words: Words, plan: Plan) -> set[int]:
    """The seeds that judge a claim: the second stage's fresh seeds where a claim is judged at
    tuned values (:func:`design_seeds`), else the seeds of its experiments' planned runs (a
    tuning experiment's aside: its runs judge nothing, they choose)."""
    fresh = set(plan.stage2.seeds) if plan.stage2 else set()
    out = set(fresh)
    for claim in words.claims:
        if fresh and words.tuning and compares_methods(claim):
            continue
        out |= {s for e in claim.experiments if e not in words.tuning
                for s in seeds_of(plan, e)}
    return out


def check_tuning_seeds(words: Words, plan: Plan) -> None:
    """The tuning seeds (every planned seed of the claims' tuning experiments) share none with
    the seeds that judge (:func:`judged_seeds`): a choice's own seeds carry its winner's curse,
    so a seed it saw never judges (a ConfigError before any job naming the experiment, its
    seeds and the judged ones)."""
    judged = judged_seeds(words, plan)
    for name in words.tuning:
        shared = sorted(seeds_of(plan, name) & judged)
        if shared:
            raise ConfigError(
                f"experiments.{name}: key 'seed' has the judged seed(s) {shared}; allowed: "
                f"seeds none of which judges a claim (judged: {sorted(judged)}, the second "
                f"stage's seeds and the claims' experiments'): a tuning seed never judges")


def powers(words: Words, seeds: Mapping[str, int]) -> dict[str, Power]:
    """Claim id -> its power stated before the runs (none without a noise table)."""
    if words.noise is None:
        return {}
    noise = read_noise(words.noise)
    return {c.id: power_of(c, noise.get(c.id, math.nan), seeds.get(c.id, 0), words.rule.alpha)
            for c in words.claims}
