"""Each claim whose verdict differs between two claims-in-words ledgers of the same claims (an
earlier rule's and today's), with both verdicts, their seeds, today's p and what decided it, as
a Markdown table (docs/claims.md, Verdicts that changed).

    python benchmarks/verdict_changes.py /tmp/old_ledger.csv figures/quick/claims_words.csv
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

FIRM = ("holds", "contradicted")


def reason(old: pd.Series, new: pd.Series) -> str:
    """What decided today's verdict, in words, from the two rows."""
    if new.verdict in FIRM:
        return (f"the one-sided test rejects at α on {new.n_seeds} seeds, p = {new.p:.2g}"
                + (" (the second stage's runs)" if new.n_seeds > old.n_seeds else ""))
    needs = str(new.needs) if isinstance(new.needs, str) else ""
    if old.verdict in FIRM and old.n_seeds <= 1 and new.n_seeds <= 1:
        return ("one seed: no verdict (before: a 5-point spread assumed); the second stage's "
                "time did not reach it")
    if "budget" in needs:
        return "a side behind still climbs (the settled test)"
    p = "–" if math.isnan(new.p) else f"{new.p:.2g}"
    return f"not significant at α (p = {p}, {new.n_seeds} seeds)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    args = parser.parse_args()
    old = pd.read_csv(args.old).set_index("id")
    new = pd.read_csv(args.new).set_index("id")
    both = old.index.intersection(new.index, sort=False)
    print("| claim | before (seeds) | now (seeds) | why |")
    print("|---|---|---|---|")
    for cid in both:
        a, b = old.loc[cid], new.loc[cid]
        if a.verdict != b.verdict:
            print(f"| {cid} | {a.verdict} ({a.n_seeds}) | {b.verdict} ({b.n_seeds}) | "
                  f"{reason(a, b)} |")


if __name__ == "__main__":
    main()
