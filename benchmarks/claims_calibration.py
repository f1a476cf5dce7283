"""The claims' verdicts' error rates by simulation: margins with a known truth, judged as
fednorm.claims.verdicts judges them (tests/test_claims_calibration.py asserts the rates).

    python benchmarks/claims_calibration.py                 # half a minute on one core
    python benchmarks/claims_calibration.py --experiments 4000

An *experiment* is ``UNITS`` units sharing one run spread σ; a unit is ``n`` seeds, each seed
one run per side (its common part ``BLOCK`` cancels in the margin, as a seed's partition and
initialization do). The units' variances are pooled as verdicts.pools pools them: each unit's
own with stats.pooled of the other units' (the plain pooled variance on Σ d), except a unit
whose own variance is larger than the others' pool by the one-sided F test (stats.larger at
HOMOGENEITY; :func:`larger` here), which is tested on its own (the paired t test);
:func:`real_pools` calls verdicts.pools, :func:`pools` is the same arithmetic vectorized
(``level`` 0: no F test, every unit pooled, for comparison). The units are tested as
stats.sign_test / equivalence_test and verdicts._verdict do, vectorized over the experiments
(the test checks the F test against stats.larger, the pools against verdicts.pools, and the
verdicts against verdicts.judge_claim on the same runs).

Prints, per relation, σ and seeds: the rate of false ``holds`` at the truth on the boundary of
holds' null (greater: margin 0; within: |margin| = δ; trend: total change 0), of false
``contradicted`` at the boundary of its null (greater, trend: −sesoi; within: δ), each over
experiments × units draws with its Monte Carlo standard error (the larger of the binomial SE
at α and the SE of the experiments' rates, whose units share a pool), and the share of units
the F test sends to their own variance; then the F test's selection (false holds of the units
it pools and of those it does not), a claim of five units (Holm), two looks at α / 2 (the
second with two more seeds where the first is not firm), the power at stats.detectable's
margin, and the rule where its variance model is strained (few units; one unit noisier than
the rest; σ spread over the units, log-spaced or at random), beside the plain pool with no F
test.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.claims.stats import HOMOGENEITY, MIN_SEEDS, detectable, trend_contrast
from fednorm.claims.verdicts import Comparison, Margins, Side
from fednorm.claims.verdicts import pools as verdicts_pools

ALPHA, SESOI, DELTA = 0.05, 2.0, 3.0  # one-sided α; points
UNITS = 12  # units an experiment pools: a quick experiment's
SIGMAS = (1.0, 5.0, 20.0)  # points: the run spreads the quick profile shows
SEEDS = (1, 2, 3, 6)
BLOCK = 10.0  # points: the spread of a seed's common part, which a paired margin cancels
HOLDS, CONTRADICTED = 1, -1  # verdict codes; 0: inconclusive


@dataclass(frozen=True)
class Case:
    """A relation: its kind, the contrast of its sides' runs that is its margin, and the true
    margins on the boundary of the null of ``holds`` and of ``contradicted``."""

    kind: str
    coefs: tuple[float, ...]
    holds_null: float
    contradicted_null: float

    @property
    def scale(self) -> float:
        return float(np.sum(np.square(self.coefs)))

    def levels(self, margin: float) -> np.ndarray:
        """Each side's true mean with contrast ``margin``: linear in the sides' ranks."""
        return margin * np.asarray(self.coefs) / self.scale


CASES = {
    "greater": Case("greater", (1.0, -1.0), 0.0, -SESOI),
    "within": Case("within", (1.0, -1.0), DELTA, DELTA),
    "trend": Case("trend", tuple(float(c) for c in trend_contrast(3)), 0.0, -SESOI),
}


def runs(rng: np.random.Generator, case: Case, experiments: int, seeds: int,
         sigma: float | np.ndarray, units: int = UNITS) -> np.ndarray:
    """Runs with no effect, (experiments, units, seeds, sides): a seed's common part plus each
    run's noise of std ``sigma`` (a float, one per unit, or one per experiment and unit)."""
    spread = np.broadcast_to(np.asarray(sigma, dtype=float), (experiments, units))[..., None, None]
    common = BLOCK * rng.standard_normal((experiments, units, seeds, 1))
    return common + spread * rng.standard_normal((experiments, units, seeds, len(case.coefs)))


def _moments(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seeds, mean, sample variance with ddof 1, NaN under two) of margins padded with NaN."""
    n = np.sum(~np.isnan(m), axis=-1)
    mean = np.nansum(m, axis=-1) / np.maximum(n, 1)
    squares = np.nansum(np.square(m - mean[..., None]), axis=-1)
    return n, mean, np.where(n > 1, squares / np.maximum(n - 1, 1), np.nan)


def _others(m: np.ndarray, scale: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(s², d, s0², d0) per unit (experiments, units) of margins (experiments, units, seeds;
    NaN: no such seed): its own sample variance / scale on n − 1 degrees of freedom, and
    stats.pooled of the *other* units' (those with degrees of freedom and some spread; NaN, 0
    where none is)."""
    n, _, variance = _moments(m)
    s2, d = variance / scale, np.maximum(n - 1, 0).astype(float)
    keep = (d > 0) & np.isfinite(s2) & (s2 > 0)
    units = s2.shape[1]
    others = np.array([j for u in range(units) for j in range(units) if j != u],
                      dtype=int).reshape(units, units - 1)
    kept = keep[:, others]  # (experiments, unit, its others)
    total = np.where(kept, d[:, others], 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        plain = np.where(kept, np.where(keep, d * s2, 0.0)[:, others], 0.0).sum(axis=-1) / total
    return s2, d, np.where(total > 0, plain, np.nan), total


def larger(s2: np.ndarray, d: np.ndarray, s0: np.ndarray, d0: np.ndarray,
           level: float = HOMOGENEITY) -> np.ndarray:
    """stats.larger, vectorized: a variance ``s2`` on ``d`` degrees of freedom is larger than a
    pool ``s0`` on ``d0`` by the one-sided F test at ``level``, P(F_{d, d0} ≥ s2 / s0) < level;
    False with no degrees of freedom either side, a variance that is not finite or no pooled
    variance above 0 (and at ``level`` 0: never)."""
    tested = (d > 0) & (d0 > 0) & np.isfinite(s2) & (s0 > 0)  # a NaN s0 compares False
    one = np.ones_like(s2)
    p = stats.f.sf(np.where(tested, s2, one) / np.where(tested, s0, one),
                   np.where(tested, d, one), np.where(tested, d0, one))
    return tested & (p < level)


def alone(m: np.ndarray, scale: float, level: float = HOMOGENEITY) -> np.ndarray:
    """Per unit (experiments, units) of margins ``m``: whether verdicts.pools sends it to its
    own variance, larger than the others' pool by the F test at ``level`` (:func:`larger`)."""
    return larger(*_others(m, scale), level)


def pools(m: np.ndarray, scale: float, level: float = HOMOGENEITY
          ) -> tuple[np.ndarray, np.ndarray]:
    """(s0², d0) per unit (experiments, units) of margins (experiments, units, seeds; NaN: no
    such seed), as verdicts.pools pools them, vectorized: stats.pooled of the *other* units'
    variances / scale on n − 1 degrees of freedom each (with the unit's own, by Pool.moderated:
    the plain pooled variance on Σ d), except where the unit's own variance is larger than that
    pool by the F test at ``level`` (:func:`larger`; 0: never): no pool (NaN, 0: the unit on its
    own variance, the paired t test)."""
    s2, d, s0, d0 = _others(m, scale)
    pooling = ~larger(s2, d, s0, d0, level) & (d0 > 0)
    return np.where(pooling, s0, np.nan), np.where(pooling, d0, 0.0)


def real_pools(m: np.ndarray, coefs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pools` by verdicts.pools itself, one experiment at a time (slow: the reference):
    each unit a Comparison of one run per coefficient in ``coefs`` with the margins ``m``."""
    s0, d0 = np.empty(m.shape[:2]), np.empty(m.shape[:2])
    for e, experiment in enumerate(m):
        units = []
        for u, values in enumerate(experiment):
            sides = tuple(Side(f"unit {u} side {j}", pd.DataFrame(),
                               pd.DataFrame({"run_id": [f"unit {u} side {j}"]}))
                          for j in range(len(coefs)))
            units.append((Comparison(f"unit {u}", sides, tuple(coefs), ("experiment",)),
                          Margins(tuple(values[~np.isnan(values)].tolist()))))
        pool_of = verdicts_pools(units)
        for u, (unit, _) in enumerate(units):
            s0[e, u], d0[e, u] = pool_of[unit.key].variance, pool_of[unit.key].df
    return s0, d0


def p_values(m: np.ndarray, case: Case, pool: tuple[np.ndarray, np.ndarray]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seeds, p_for, p_against) per unit: stats.sign_test (slack 0, sesoi SESOI) or
    stats.equivalence_test (δ DELTA) under the unit's ``pool`` (Pool.moderated), vectorized;
    a unit under MIN_SEEDS margins gets p 1 (verdicts._ps's sign test on one seed gives 1/2 or
    1: at α < 1/2 no firm verdict either way)."""
    scale = case.scale
    s0, d0 = pool
    n, mean, variance = _moments(m)
    d = np.maximum(n - 1, 0)
    own = np.where(n > 1, variance / scale, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mixed = np.where(d > 0, (d0 * s0 + d * own) / (d0 + d), s0)
        var = np.where(d0 == 0, own, mixed)
        df = np.where(d0 == 0, d, d0 + d)
        se = np.where(df > 0, np.sqrt(var * scale / np.maximum(n, 1)), np.nan)
        if case.kind == "within":
            p_for = np.maximum(stats.t.sf((mean + DELTA) / se, df),
                               stats.t.cdf((mean - DELTA) / se, df))
            p_against = np.minimum(1.0, 2 * np.minimum(stats.t.sf((mean - DELTA) / se, df),
                                                       stats.t.cdf((mean + DELTA) / se, df)))
        else:
            p_for = stats.t.sf(mean / se, df)
            p_against = stats.t.cdf((mean + SESOI) / se, df)
    untested = np.isnan(se) | (n < MIN_SEEDS)
    return n, np.where(untested, 1.0, p_for), np.where(untested, 1.0, p_against)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment along the last axis (stats.holm, vectorized)."""
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    stepped = np.maximum.accumulate((k - np.arange(k)) * np.take_along_axis(p, order, -1), -1)
    out = np.empty_like(p)
    np.put_along_axis(out, order, np.minimum(stepped, 1.0), -1)
    return out


def verdicts(m: np.ndarray, case: Case, pool: tuple[np.ndarray, np.ndarray] | None = None,
             claim: int = 1, alpha: float = ALPHA) -> np.ndarray:
    """Verdict codes (experiments, claims, ``claim`` units) of margins ``m``: the experiment's
    first units in claims of ``claim`` units each, Holm over a claim's units
    (verdicts.judge_claim, _verdict); ``pool``: the units' (s0², d0), else pooled here."""
    _, p_for, p_against = p_values(m, case, pools(m, case.scale) if pool is None else pool)
    experiments, units = p_for.shape
    shape = (experiments, units // claim, claim)
    p_for = p_for[:, :shape[1] * claim].reshape(shape)
    adjusted = holm(p_against[:, :shape[1] * claim].reshape(shape))
    return np.where(p_for <= alpha, HOLDS, np.where(adjusted <= alpha, CONTRADICTED, 0))


@dataclass(frozen=True)
class Rate:
    """A rate over ``draws`` (experiments × claims) and its Monte Carlo standard error: the
    larger of the binomial SE at α and the SE of the experiments' own rates."""

    rate: float
    draws: int
    se: float

    @classmethod
    def of(cls, hits: np.ndarray) -> Rate:
        per_experiment = hits.reshape(len(hits), -1).mean(axis=1)
        binomial = math.sqrt(ALPHA * (1 - ALPHA) / hits.size)
        cluster = float(per_experiment.std(ddof=1)) / math.sqrt(len(hits))
        return cls(float(hits.mean()), hits.size, max(binomial, cluster))

    @classmethod
    def among(cls, hits: np.ndarray, chosen: np.ndarray) -> Rate:
        """The rate of ``hits`` (experiments, units) among the ``chosen`` units, its SE the
        larger of the binomial SE at α and the ratio estimator's over the experiments (each
        experiment's hits less the rate, summed over its chosen units)."""
        count = int(chosen.sum())
        rate = float(hits[chosen].mean()) if count else math.nan
        binomial = math.sqrt(ALPHA * (1 - ALPHA) / max(count, 1))
        residuals = np.where(chosen, hits - rate, 0.0).reshape(len(hits), -1).sum(axis=1)
        experiments = len(hits)
        cluster = (math.sqrt(float(np.square(residuals).sum()) * experiments
                             / max(experiments - 1, 1)) / max(count, 1))
        return cls(rate, count, max(binomial, cluster))

    def bound(self) -> float:
        """α plus three standard errors: the most a rate at or under α reads as."""
        return ALPHA + 3 * self.se

    def __str__(self) -> str:
        return f"{self.rate:.4f} ± {self.se:.4f} (MC SE, {self.draws} draws)"


def noise_margins(rng: np.random.Generator, case: Case, experiments: int, seeds: int,
                  sigma: float | np.ndarray, units: int = UNITS) -> np.ndarray:
    """Margins with no effect (experiments, units, seeds)."""
    return runs(rng, case, experiments, seeds, sigma, units) @ np.asarray(case.coefs)


def error_rates(case: Case, noise: np.ndarray, claim: int = 1) -> tuple[Rate, Rate]:
    """(false holds, false contradicted) of claims of ``claim`` units on ``noise`` margins
    shifted to the boundary of each verdict's null."""
    pool = pools(noise, case.scale)  # a shift of the margins leaves their variances
    holds = verdicts(noise + case.holds_null, case, pool, claim) == HOLDS
    contradicted = verdicts(noise + case.contradicted_null, case, pool, claim) == CONTRADICTED
    return Rate.of(holds.all(axis=-1)), Rate.of(contradicted.any(axis=-1))


def two_looks(case: Case, noise: np.ndarray, truth: float, verdict: int, added: int = 2
              ) -> Rate:
    """The rate of ``verdict`` at either of two looks at α / 2 (verdicts.judge_compared's
    looks): the first on ``noise``'s seeds but the last ``added``, the second with them where the
    first is not firm (fednorm.claims.stage2's seeds), every unit judged again."""
    m = noise + truth
    early = np.pad(m[..., :-added], ((0, 0), (0, 0), (0, added)), constant_values=np.nan)
    first = verdicts(early, case, alpha=ALPHA / 2)[..., 0]
    second = verdicts(np.where((first != 0)[..., None], early, m), case, alpha=ALPHA / 2)[..., 0]
    return Rate.of((first == verdict) | (second == verdict))


def by_gate(case: Case, noise: np.ndarray) -> tuple[float, Rate, Rate]:
    """The F test's selection: (the share of units it sends to their own variance, false holds
    of the units it pools, of those it does not) at the boundary of holds' null (each rate
    :meth:`Rate.among` the units: those of an experiment share their pools)."""
    solo = alone(noise, case.scale)
    holds = (verdicts(noise + case.holds_null, case) == HOLDS).reshape(solo.shape)
    return float(solo.mean()), Rate.among(holds, ~solo), Rate.among(holds, solo)


def strained(case: Case, noise: np.ndarray, level: float = HOMOGENEITY) -> np.ndarray:
    """Verdict codes (experiments, units) at the boundary of holds' null with the F test at
    ``level`` (0: never rejects, the plain pool of every unit)."""
    return verdicts(noise + case.holds_null, case, pools(noise, case.scale, level))[..., 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng, r = np.random.default_rng(args.seed), args.experiments
    print(f"α {ALPHA} one-sided, sesoi {SESOI}, δ {DELTA} points, {UNITS} units an experiment, "
          f"{r} experiments a row; rate ± MC SE; a unit's F test against the others' pool at "
          f"{HOMOGENEITY}")
    print(f"{'relation':<10}{'σ':>5}{'seeds':>6}   {'false holds':<18}{'false contradicted':<21}"
          "alone")
    for case in CASES.values():
        for sigma in SIGMAS:
            for seeds in SEEDS:
                noise = noise_margins(rng, case, r, seeds, sigma)
                holds, contradicted = error_rates(case, noise)
                print(f"{case.kind:<10}{sigma:>5g}{seeds:>6}   {holds.rate:.4f} ± {holds.se:.4f}"
                      f"   {contradicted.rate:.4f} ± {contradicted.se:.4f}"
                      f"   {alone(noise, case.scale).mean():.4f}")
    greater = CASES["greater"]
    print("\nThe F test's selection (greater, σ 5, margin 0): false holds of the units it pools"
          " / of those it tests alone")
    for seeds in SEEDS[1:]:
        share, pooled, solo = by_gate(greater, noise_margins(rng, greater, r, seeds, 5.0))
        print(f"  {seeds} seeds: alone {share:.4f}; pooled {pooled}; alone {solo}")
    print("\nA claim of 5 units all at −sesoi (greater, σ 5): false contradicted, Holm / none")
    for seeds in SEEDS[1:]:
        noise = noise_margins(rng, greater, r, seeds, 5.0)
        _, adjusted = error_rates(greater, noise, claim=5)
        raw = verdicts(noise - SESOI, greater)[:, :10].reshape(r, 2, 5) == CONTRADICTED
        print(f"  {seeds} seeds: {adjusted}   unadjusted {raw.any(axis=-1).mean():.4f}")
    print("\nTwo looks at α / 2, two seeds added where the first is not firm (greater, σ 5)")
    for seeds in SEEDS:
        noise = noise_margins(rng, greater, r, seeds + 2, 5.0)
        print(f"  {seeds} then {seeds + 2} seeds: false holds {two_looks(greater, noise, 0.0, 1)}"
              f"; false contradicted {two_looks(greater, noise, -SESOI, -1)}")
    print(f"\nPower: holds at stats.detectable's margin (df {UNITS} × (seeds − 1)), greater, σ 5")
    for seeds in SEEDS[1:]:
        truth = detectable(seeds, greater.scale, 5.0, UNITS * (seeds - 1))
        codes = verdicts(noise_margins(rng, greater, r, seeds, 5.0) + truth, greater)
        print(f"  {seeds} seeds, margin {truth:.2f}: {Rate.of(codes == HOLDS)}")
    print("\nStrained: false holds of greater at margin 0")
    for units in (2, 3, 6):
        holds, _ = error_rates(greater, noise_margins(rng, greater, r, 3, 5.0, units))
        print(f"  3 seeds, {units} units at σ 5 (not {UNITS}): {holds}")
    spreads = {"one unit at 2 × the others' σ 5": np.r_[10.0, np.full(UNITS - 1, 5.0)],
               "one unit at 4 × the others' σ 5": np.r_[20.0, np.full(UNITS - 1, 5.0)],
               "σ from 20 to 1, log-spaced": np.geomspace(20.0, 1.0, UNITS),
               "σ² scattered at random: 5² · 5 / χ²_5 a unit":
                   5.0 * np.sqrt(5.0 / rng.chisquare(5.0, (r, UNITS)))}
    for label, sigma in spreads.items():
        print(f"  {label}")
        for seeds in SEEDS[1:]:
            noise = noise_margins(rng, greater, r, seeds, sigma)
            codes, plain = strained(greater, noise), strained(greater, noise, 0.0)
            solo = alone(noise, greater.scale)
            print(f"    {seeds} seeds: alone {solo.mean():.4f} (unit 1 {solo[:, 0].mean():.4f}); "
                  f"every unit {Rate.of(codes == HOLDS)}; unit 1 (the noisiest, where one is) "
                  f"{Rate.of(codes[:, 0] == HOLDS)}; unit 1 with no F test "
                  f"{(plain[:, 0] == HOLDS).mean():.4f}")


if __name__ == "__main__":
    main()
