"""Two claims-in-words ledgers of the same claims on disjoint seeds, side by side: does a verdict
survive a change of seeds? (docs/claims.md, Verdicts across seeds.)

A *judged* verdict is ``holds`` or ``contradicted`` or ``inconclusive``; ``not run`` is not
judged. Between two ledgers a claim *keeps* its verdict, *moves* between a firm verdict
(holds, contradicted) and inconclusive, or *flips* between holds and contradicted: a flip is
what seed noise must never do.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fednorm.inputs import InputError

FIRM = ("holds", "contradicted")
JUDGED = (*FIRM, "inconclusive")


def compare_ledgers(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of both ledgers (their ``id`` and ``verdict`` columns): ``a``, ``b``
    and ``change`` (``same``, ``moved``, ``flipped`` or ``not judged`` where either is not)."""
    for name, ledger in (("first", a), ("second", b)):
        missing = {"id", "verdict"} - set(ledger.columns)
        if missing:
            raise InputError(f"{name} ledger: no column {sorted(missing)}; allowed: a "
                             f"claims_words.csv (columns id, verdict, ...)")
    both = pd.merge(a[["id", "verdict"]], b[["id", "verdict"]], on="id", how="inner",
                    suffixes=("_a", "_b")).set_index("id")
    if both.empty:
        raise InputError("the two ledgers share no claim id; allowed: ledgers of the same "
                         "claims file")
    both.columns = ["a", "b"]

    def change(row: pd.Series) -> str:
        if row.a not in JUDGED or row.b not in JUDGED:
            return "not judged"
        if row.a == row.b:
            return "same"
        return "flipped" if {row.a, row.b} == set(FIRM) else "moved"

    both["change"] = both.apply(change, axis=1)
    return both.reset_index()


def summary(table: pd.DataFrame) -> str:
    """One line: judged claims, how many keep their verdict (and the share), move, flip."""
    judged = table[table.change != "not judged"]
    same = int((judged.change == "same").sum())
    share = 100 * same / len(judged) if len(judged) else float("nan")
    return (f"{len(judged)} claims judged in both: {same} keep their verdict ({share:.1f} %), "
            f"{int((judged.change == 'moved').sum())} move between firm and inconclusive, "
            f"{int((judged.change == 'flipped').sum())} flip between holds and contradicted")


def compare_files(a: str | Path, b: str | Path) -> pd.DataFrame:
    return compare_ledgers(pd.read_csv(a), pd.read_csv(b))
