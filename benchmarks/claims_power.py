"""What a claims ledger's seeds could detect: for each judged claim, the smallest true margin its
deciding unit would find with probability ``--power`` at its own standard error and degrees of
freedom (fednorm.claims.stats.detectable: (t_{1−α/looks} + t_power) · se), from a
claims_words.csv (docs/claims.md, Power).

    python benchmarks/claims_power.py figures/quick/claims_words.csv --looks 2
"""

from __future__ import annotations

import argparse
import math

import pandas as pd
from scipy import stats

from fednorm.claims.stats import ALPHA


def detectable(se: float, df: float, alpha: float, power: float) -> float:
    """The margin a one-sided t test at ``alpha`` detects with ``power`` (central t quantiles,
    as fednorm.claims.stats.detectable), from the ledger's own se and df."""
    if not (se > 0 and df > 0):
        return math.nan
    return float((stats.t.ppf(1 - alpha, df) + stats.t.ppf(power, df)) * se)


def power_table(ledger: pd.DataFrame, alpha: float, power: float) -> pd.DataFrame:
    judged = ledger[ledger["verdict"] != "not run"].copy()
    judged["detectable"] = [detectable(se, df, alpha, power)
                            for se, df in zip(judged["se"], judged["df"], strict=True)]
    return judged[["id", "n_seeds", "df", "se", "detectable", "sesoi", "delta", "verdict"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ledger", help="a claims_words.csv")
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--looks", type=int, default=1, help="2 for a two-stage ledger")
    parser.add_argument("--power", type=float, default=0.8)
    args = parser.parse_args()
    table = power_table(pd.read_csv(args.ledger), args.alpha / args.looks, args.power)
    print("| claim | seeds | df | se | detectable (points) | verdict |")
    print("|---|---:|---:|---:|---:|---|")
    for r in table.itertuples(index=False):
        found = "–" if math.isnan(r.detectable) else f"{r.detectable:.1f}"
        se = "–" if math.isnan(r.se) else f"{r.se:.2f}"
        df = "–" if math.isnan(r.df) or not r.df else f"{r.df:.0f}"
        print(f"| {r.id} | {r.n_seeds} | {df} | {se} | {found} | {r.verdict} |")


if __name__ == "__main__":
    main()
