"""Is the second stage's chance of a firm verdict (fednorm.claims.stage2.firm_chances) what the
second look then gives, and where to stop buying (MIN_POWER)? A simulated ledger of sign claims
(docs/claims.md, The second stage):

- a unit's true margin μ ~ N(0, ``--spread``²) points, a seed's margin sd σ_m = √2 σ with σ
  (one run's seed noise) drawn from {1, 3, 7} points (the quick ledger's Byzantine grids: about
  7), first looks on 1 or 2 seeds, the variance a pool of ``--pool-df`` degrees of freedom
  beside the unit's own (σ_m² χ²_df / df), judged at α / 2 (sesoi 2 points); the units not
  firm at the first look are those that would ask for seeds;
- each of them predicted (``firm_chances`` on its first look), then judged again after two more
  seeds (its mean over n + 2 seeds, its variance the pool updated by the new seeds' spread,
  t_{df + 2}): firm or not, and falsely so (holds where μ ≤ 0, contradicted where μ ≥ −sesoi).

    python benchmarks/stage2_power.py --units 6000
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.claims.stage2 import LOOKS, firm_chances
from fednorm.claims.stats import ALPHA, SESOI

BINS = (0.0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0001)


def simulate(units: int, spread: float, pool_df: int, k: int, seed: int) -> pd.DataFrame:
    """One row per undecided unit: its predicted chance and the second look's outcome."""
    rng = np.random.default_rng(seed)
    alpha = ALPHA / LOOKS
    n = rng.choice([1, 2], units)
    sigma_m = np.sqrt(2) * rng.choice([1.0, 3.0, 7.0], units)
    mu = rng.normal(0.0, spread, units)
    df = pool_df + n - 1
    first = mu + sigma_m / np.sqrt(n) * rng.standard_normal(units)
    variance = sigma_m**2 * rng.chisquare(df) / df
    se = np.sqrt(variance / n)
    crit = stats.t.ppf(1 - alpha, df)
    undecided = ~((first > crit * se) | (first + SESOI < -crit * se))
    rows = []
    for i in np.flatnonzero(undecided):
        holds, against = firm_chances(float(first[i]), float(se[i]), int(n[i]), float(df[i]),
                                      k, alpha, sesoi=SESOI)
        new = rng.normal(mu[i], sigma_m[i], k)
        mean = (n[i] * first[i] + new.sum()) / (n[i] + k)
        var2 = (df[i] * variance[i] + sigma_m[i]**2 * rng.chisquare(k)) / (df[i] + k)
        se2 = np.sqrt(var2 / (n[i] + k))
        crit2 = stats.t.ppf(1 - alpha, df[i] + k)
        held, contra = mean > crit2 * se2, mean + SESOI < -crit2 * se2
        rows.append({"predicted": holds + against, "firm": held or contra,
                     "false": (held and mu[i] <= 0) or (contra and mu[i] >= -SESOI)})
    return pd.DataFrame(rows)


def table(found: pd.DataFrame) -> pd.DataFrame:
    """By bin of predicted chance: units, their mean prediction, the share firm and falsely
    firm at the second look, with the share's Monte Carlo standard error."""
    found = found.assign(bin=pd.cut(found["predicted"], BINS, right=False))
    out = found.groupby("bin", observed=True).agg(units=("firm", "size"),
                                                  predicted=("predicted", "mean"),
                                                  firm=("firm", "mean"),
                                                  false=("false", "mean"))
    out["firm_se"] = np.sqrt(out["firm"] * (1 - out["firm"]) / out["units"])
    return out


def thresholds(found: pd.DataFrame, cuts: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4)
               ) -> pd.DataFrame:
    """Buying every unit at or above each cut: its share of the units bought, the firm verdicts
    gained per unit bought, and per unit the cut leaves out, what buying it would have given."""
    rows = []
    for cut in cuts:
        bought = found[found["predicted"] >= cut]
        left = found[found["predicted"] < cut]
        rows.append({"cut": cut, "bought": len(bought) / len(found),
                     "firm_per_bought": bought["firm"].mean(),
                     "firm_per_left_out": left["firm"].mean() if len(left) else np.nan,
                     "firm_kept": bought["firm"].sum() / max(found["firm"].sum(), 1)})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=6000)
    parser.add_argument("--spread", type=float, default=8.0, help="sd of true margins, points")
    parser.add_argument("--pool-df", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=2, help="seeds the second stage adds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = simulate(args.units, args.spread, args.pool_df, args.seeds, args.seed)
    print(f"{len(found)} undecided units of {args.units}")
    print(table(found).to_string(float_format=lambda x: f"{x:.3f}"))
    print(thresholds(found).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
