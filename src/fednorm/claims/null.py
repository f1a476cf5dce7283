"""Each ledger measures its own null: the same claims judged on the same runs with their
labels shuffled.

Within a *block* (experiments that share runs, taken together: the connected parts of the
graph whose nodes are experiments and whose edges are the runs in two of them) and one seed,
the runs' trajectories (every metric, the step and the status: SUMMARY_METRICS) are permuted
among the runs, each run keeping its config. Every compared group of a claim then has the same
distribution, so a firm verdict (holds, contradicted) is a false one; its share over the judged
claims estimates the ledger's error rate under the null, which the rule keeps near α
(docs/claims.md, The ledger's own null).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.claims.words import CONTRADICTED, HOLDS, NOT_RUN, Words
from fednorm.claims.words_ledger import words_ledger
from fednorm.metrics import SUMMARY_METRICS

PERMUTATIONS = 3  # a few: each judges the whole ledger again
NULL_COLUMNS = ("permutation", "judged", "holds", "contradicted", "firm_share")


def blocks(summary: pd.DataFrame) -> pd.Series:
    """Run id -> its block: the smallest experiment name of the connected part that its
    experiments (``figure_group``, joined by '|') belong to."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    groups = summary.groupby("run_id")["figure_group"].first()
    for names in groups:
        first, *rest = str(names).split("|")
        for other in rest:
            a, b = sorted((root(first), root(other)))
            parent[b] = a
    return groups.map(lambda names: root(str(names).split("|")[0]))


def permuted(summary: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """``summary`` with its runs' trajectories permuted within block and seed (the module's
    docstring); the config columns stay with their runs."""
    moving = [c for c in SUMMARY_METRICS if c in summary.columns]
    fixed = [c for c in summary.columns if c not in moving]
    block = blocks(summary)
    runs = summary.groupby("run_id")["seed"].first().to_frame().assign(block=block)
    source = {}
    for _, part in runs.groupby(["block", "seed"], sort=True):
        ids = part.index.to_numpy()
        source.update(zip(ids, rng.permutation(ids), strict=True))
    trajectories = {run: rows[moving] for run, rows in summary.groupby("run_id", sort=False)}
    configs = summary.groupby("run_id", sort=False)[[c for c in fixed if c != "run_id"]].first()
    parts = []
    for run, donor in source.items():
        rows = trajectories[donor].reset_index(drop=True)
        config = configs.loc[[run] * len(rows)].reset_index(names="run_id")
        parts.append(pd.concat([config, rows], axis=1))
    return pd.concat(parts, ignore_index=True)[list(summary.columns)]


def null_shares(words: Words, summary: pd.DataFrame, permutations: int = PERMUTATIONS,
                seed: int = 0, looks: int = 1) -> pd.DataFrame:
    """One row per permutation: the claims judged (not ``not run``), the firm verdicts among
    them and their share (NULL_COLUMNS)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(permutations):
        verdicts = words_ledger(words, permuted(summary, rng), looks)["verdict"]
        judged = int((verdicts != NOT_RUN).sum())
        holds, contra = int((verdicts == HOLDS).sum()), int((verdicts == CONTRADICTED).sum())
        rows.append({"permutation": i, "judged": judged, "holds": holds,
                     "contradicted": contra, "firm_share": (holds + contra) / max(judged, 1)})
    return pd.DataFrame(rows, columns=list(NULL_COLUMNS))


def null_lines(null: pd.DataFrame, alpha: float, real: Sequence[str] = ()) -> list[str]:
    """Markdown lines under the ledger's counts: the share of firm verdicts under the
    permutation null (and on the real labels, ``real``: the ledger's verdicts)."""
    if null.empty:
        return []
    firm = int(null["holds"].sum() + null["contradicted"].sum())
    judged = int(null["judged"].sum())
    verdicts = pd.Series(list(real), dtype=object)
    real_text = ""
    if len(verdicts):
        n_real = int(verdicts.isin([HOLDS, CONTRADICTED]).sum())
        real_text = (f" (on the real labels: {n_real} of {int((verdicts != NOT_RUN).sum())})")
    return [f"**The ledger's own null** ({len(null)} permutations of the runs' trajectories "
            f"within experiment block and seed, claims_null.csv): {firm} firm verdicts of "
            f"{judged} judged, {firm / max(judged, 1):.1%}, against α = {alpha:g}{real_text}."]


def expected_false(null: pd.DataFrame, judged: int, level: float = 0.95
                   ) -> tuple[float, float, float]:
    """The firm verdicts expected false among ``judged`` claims, and its ``level`` interval:
    the null's firm share (its firm verdicts over its judged claims, every permutation
    together) times ``judged``, the interval Clopper–Pearson's on that share
    (``scipy.stats.binomtest``). It is the expected count were every claim null, with the
    ledger's own dependence and rule (a bound on the expected false ones: a true claim adds
    no false verdict), the π0 = 1 estimate of Benjamini–Hochberg's and Storey's. Its interval
    treats the permutations' claims as independent draws, which they are not (claims share
    runs): it is the narrowest the counts allow."""
    firm = int(null["holds"].sum() + null["contradicted"].sum())
    total = int(null["judged"].sum())
    if not total:
        return math.nan, math.nan, math.nan
    interval = stats.binomtest(firm, total).proportion_ci(level, method="exact")
    return judged * firm / total, judged * interval.low, judged * interval.high


def expected_false_lines(null: pd.DataFrame, table: pd.DataFrame, alpha: float) -> list[str]:
    """A markdown line under the null's: the ledger's firm verdicts, those expected false
    (:func:`expected_false`), and the firm verdicts whose Benjamini–Yekutieli q is at most
    ``alpha`` (``table``: the ledger, its ``verdict`` and ``q_by``)."""
    if null.empty or table.empty:
        return []
    verdicts = table["verdict"]
    judged = int((verdicts != NOT_RUN).sum())
    firm = verdicts.isin([HOLDS, CONTRADICTED])
    mean, low, high = expected_false(null, judged)
    by = int((firm & (table["q_by"].astype(float) <= alpha)).sum())
    return [f"**Expected false**: of the {int(firm.sum())} firm verdicts of {judged} judged, "
            f"{mean:.1f} expected false under the ledger's null (its firm share × {judged}; "
            f"95 % interval {low:.1f}–{high:.1f}); {by} firm with a Benjamini–Yekutieli q ≤ "
            f"{alpha:g}."]
