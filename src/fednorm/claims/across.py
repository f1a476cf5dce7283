"""Two claims-in-words ledgers of the same claims on disjoint seeds, side by side: does a verdict
survive a change of seeds? (docs/claims.md, Verdicts across seeds.)

A *judged* verdict is a firm one (``holds``, ``contradicted``, ``negligible``) or
``inconclusive`` / ``undecidable``; ``not run`` is not judged. Between two ledgers a claim
*keeps* its verdict, *moves* (between two other verdicts), or *flips* between holds and
contradicted: a flip is what seed noise must never do.

The two ledgers confirm each other only under one pre-registration: the same claims file and
the same deciding code and design (fednorm.claims.prereg; :func:`preregistrations` reads the
claims_prereg.json beside each ledger). Each ledger's Benjamini–Yekutieli q (``q_by``) stands
beside its verdict where both have one.

One pair of seed sets is one draw. :func:`regroupings` draws every pair that the runs of
several seed sets allow: their seeds pooled, then split into two disjoint sets of k seeds in
every way, each grid keeping its own number of seeds a set (a one-seed grid one seed), so that
the share of claims that keep their verdict can be averaged over many pairs
(``benchmarks/verdict_stability.py --regroup``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from fednorm.claims.prereg import beside, read_prereg
from fednorm.inputs import InputError

FIRM = ("holds", "contradicted", "negligible")
FLIP = {"holds", "contradicted"}
JUDGED = (*FIRM, "inconclusive", "undecidable")


def compare_ledgers(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of both ledgers (their ``id`` and ``verdict`` columns): ``a``, ``b``
    and ``change`` (``same``, ``moved``, ``flipped`` or ``not judged`` where either is not),
    then ``q_by_a`` and ``q_by_b`` where both ledgers have a ``q_by`` column."""
    for name, ledger in (("first", a), ("second", b)):
        missing = {"id", "verdict"} - set(ledger.columns)
        if missing:
            raise InputError(f"{name} ledger: no column {sorted(missing)}; allowed: a "
                             f"claims_words.csv (columns id, verdict, ...)")
    shown = ["id", "verdict", *(["q_by"] if {"q_by"} <= set(a.columns) & set(b.columns)
                                else [])]
    both = pd.merge(a[shown], b[shown], on="id", how="inner",
                    suffixes=("_a", "_b")).set_index("id")
    if both.empty:
        raise InputError("the two ledgers share no claim id; allowed: ledgers of the same "
                         "claims file")
    both = both.rename(columns={"verdict_a": "a", "verdict_b": "b"})

    def change(row: pd.Series) -> str:
        if row.a not in JUDGED or row.b not in JUDGED:
            return "not judged"
        if row.a == row.b:
            return "same"
        return "flipped" if {row.a, row.b} == FLIP else "moved"

    both["change"] = both.apply(change, axis=1)
    return both[["a", "b", "change", *(c for c in both.columns if c.startswith("q_by"))]
                ].reset_index()


def summary(table: pd.DataFrame) -> str:
    """One line: judged claims, how many keep their verdict (and the share), move, flip."""
    judged = table[table.change != "not judged"]
    same = int((judged.change == "same").sum())
    share = 100 * same / len(judged) if len(judged) else float("nan")
    return (f"{len(judged)} claims judged in both: {same} keep their verdict ({share:.1f} %), "
            f"{int((judged.change == 'moved').sum())} move to another verdict, "
            f"{int((judged.change == 'flipped').sum())} flip between holds and contradicted")


def compare_files(a: str | Path, b: str | Path) -> pd.DataFrame:
    return compare_ledgers(pd.read_csv(a), pd.read_csv(b))


def _seedless(record: dict) -> str | None:
    """A ledger's design but its seeds (fednorm.claims.prereg.design); an older record's
    design, which counted its seeds, as it is."""
    design = record.get("design")
    return None if design is None else design.get("seedless_sha256", design.get("sha256"))


def preregistrations(a: str | Path, b: str | Path) -> tuple[str, bool]:
    """One line on the pre-registrations of two ledgers (claims_words.csv files: the
    claims_prereg.json beside each), and whether they differ: both recorded, and a different
    claims file, rule, engine revision or design but its seeds (then the second ledger does
    not confirm the first; disjoint seeds are what the two are for)."""
    records = [read_prereg(beside(p)) for p in (a, b)]
    if any(r is None for r in records):
        missing = [str(beside(p)) for p, r in zip((a, b), records, strict=True) if r is None]
        return f"pre-registration: not recorded ({', '.join(missing)})", False
    first, second = records
    assert first is not None and second is not None
    hashes = (f"claims file {first['claims_sha256'][:12]}, rule {first['rule_sha256'][:12]}")
    if first["sha256"] == second["sha256"]:
        return f"pre-registration: the same in both ({first['sha256'][:12]}: {hashes})", False
    parts = [name for name, value in (
        ("claims file", lambda r: r["claims_sha256"]), ("rule", lambda r: r["rule_sha256"]),
        ("engine revision", lambda r: r.get("engine_revision")), ("design", _seedless))
        if value(first) != value(second)]
    if not parts:
        return (f"pre-registration: the same in both but the seeds ({first['sha256'][:12]} "
                f"against {second['sha256'][:12]}: {hashes})"), False
    files = [f for f in first["rule_files"] if first["rule_files"][f] !=
             second["rule_files"].get(f)]
    return (f"pre-registration differs: {' and '.join(parts)}"
            + (f" ({', '.join(files)})" if files else "")
            + f": {first['sha256'][:12]} against {second['sha256'][:12]}"), True


def regroupings(runs: pd.DataFrame, k: int, *, by: str = "figure_group"
                ) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], pd.DataFrame, pd.DataFrame]]:
    """Every pair (A, B) of disjoint sets of ``k`` seeds from the pooled runs of several seed
    sets (summaries of one profile on disjoint seeds, concatenated), each pair once, with the
    runs of each: a grid (the runs of one ``by`` value) with n pooled seeds, where the grid
    with the most has n_max, keeps its smallest max(1, ⌊n k / n_max⌋) seeds in the set (over
    seed sets of two seeds a grid, k = 2 keeps them all and a one-seed grid one). A pair
    where some grid has no seed in one of its sets is left out."""
    for key in ("seed", by):
        if key not in runs.columns:
            raise InputError(f"runs: no column {key!r}; allowed: a summary of runs (fednorm."
                             f"results.load_summary)")
    seeds = runs.groupby(by)["seed"].unique().map(lambda s: sorted(int(x) for x in s))
    pooled = sorted(set(itertools.chain.from_iterable(seeds)))
    if not 1 <= k <= len(pooled) // 2:
        raise InputError(f"k: {k}; allowed: 1 to {len(pooled) // 2} (half of the "
                         f"{len(pooled)} pooled seeds)")
    # every grid ran in every seed set: its share of the most seeds is its share of a set
    most = max(len(s) for s in seeds)
    share = {g: max(1, len(s) * k // most) for g, s in seeds.items()}

    def kept(chosen: tuple[int, ...]) -> pd.DataFrame | None:
        keep = []
        for group, own in seeds.items():
            mine = [s for s in own if s in chosen][:share[group]]
            if not mine:
                return None
            keep.append((runs[by] == group) & runs["seed"].isin(mine))
        return runs[pd.concat(keep, axis=1).any(axis=1)]

    for a in itertools.combinations(pooled, k):
        rest = [s for s in pooled if s not in a]
        for b in itertools.combinations(rest, k):
            if b < a:
                continue
            runs_a, runs_b = kept(a), kept(b)
            if runs_a is not None and runs_b is not None:
                yield a, b, runs_a, runs_b
