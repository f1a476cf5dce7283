"""Each method at its own learning rate, chosen on data held out of the training set.

One learning rate for every method misleads: a method whose best step size differs from the
common recipe's looks worse than it is (the Hybrid BN authors warn of it; FBN barely learns at
the FixBN recipe's step size on the quick digits). So a tuning experiment trains every method
at several ``lr_scale`` factors on the recipe's schedule, with ``val_fraction`` of the training
images held out (fednorm.data.arrays.hold_out), and :func:`select_by_validation` keeps, per
cell of a table, the factor whose final validation accuracy is best. The choice reads the
validation column alone: the test set only reports the chosen runs. A choice at the largest or
smallest factor of its cell's sweep is marked (``edge``): the best may lie beyond it, and the
sweep should be widened before the choice is trusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fednorm.plots import style
from fednorm.plots.cells import DIVERGED_NOTE, Orders, cell_stats, percent, value_text
from fednorm.plots.save import save_table
from fednorm.plots.table import NO_RUN, SEEDS, cell_text, escape_cell, extra_text
from fednorm.results import matches, seed_stats

OVER = "lr_scale"  # the hyper-parameter chosen
EDGES = {"high": "↑", "low": "↓"}  # a choice at the largest / smallest value swept


def choices(rows: pd.DataFrame, cells: Sequence[str], by: str = "val_accuracy",
            over: str = OVER) -> pd.DataFrame:
    """Per combination of the ``cells`` columns: the ``over`` value whose runs' final ``by``
    (fednorm.results.run_values), averaged over the seeds, is highest. A value with a diverged
    run (status ``diverged``) or without any ``by`` is never chosen over one without; ties go
    to the smaller value. Only ``by`` is read among the metrics. Returns the ``cells``
    columns, ``over``, ``score`` (the mean ``by``; -inf: ruled out), ``n_seeds`` and ``edge``:
    'high' / 'low' when the chosen value is the largest / smallest of the cell's (two or
    more) values, else ''."""
    cells = list(cells)
    stats = seed_stats(rows, [*cells, over], y=by)
    ruled_out = (stats["n_diverged"] > 0) | (stats["n_seeds"] == 0)
    stats["score"] = stats["mean"].where(~ruled_out, float("-inf"))
    best = stats.sort_values([*cells, "score", over],
                             ascending=[True] * len(cells) + [False, True], kind="stable")
    best = best.groupby(cells, sort=False, dropna=False).head(1)
    swept = stats.groupby(cells, sort=False, dropna=False)[over].agg(
        lowest="min", highest="max", values="nunique").reset_index()
    best = best[[*cells, over, "score", "n_seeds"]].merge(swept, on=cells, how="left")
    several = best["values"] > 1
    best["edge"] = ""
    best.loc[several & (best[over] == best["lowest"]), "edge"] = "low"
    best.loc[several & (best[over] == best["highest"]), "edge"] = "high"
    return best[[*cells, over, "score", "n_seeds", "edge"]].reset_index(drop=True)


def select_by_validation(rows: pd.DataFrame, cells: Sequence[str], by: str = "val_accuracy",
                         over: str = OVER) -> pd.DataFrame:
    """The rows (every evaluation point) of the runs at each cell's chosen ``over`` value
    (:func:`choices`)."""
    chosen = choices(rows, cells, by, over)[[*cells, over]]
    return rows.merge(chosen, on=[*cells, over], how="inner")


COMMON = 1.0  # the lr_scale of the common recipe: every method at the recipe's own schedule


def tuning_table(rows: pd.DataFrame, cells: Sequence[str], *, by: str = "val_accuracy",
                 y: str = "test_accuracy", order: Orders | None = None,
                 common: float = COMMON) -> pd.DataFrame:
    """One row per combination of the ``cells`` columns (in axis order, fednorm.plots.cells):
    ``lr_scale`` chosen on ``by`` (:func:`choices`), ``by`` (its mean over seeds at that
    choice; NaN where every value is ruled out), then ``y``'s ``mean``, ``std``, ``cell``
    (the table's text) at the chosen value (``tuned_*``) and at ``lr_scale`` = ``common``
    (``common_*``), the chosen runs' ``n_seeds`` and ``n_diverged``, and ``edge``
    (:func:`choices`). Accuracies in %."""
    cells = list(cells)
    chosen = choices(rows, cells, by).rename(columns={"score": by})
    chosen[by] = chosen[by].where(chosen[by] > float("-inf"))
    if percent(by):
        chosen[by] *= 100.0
    out = chosen[[*cells, OVER, by, "edge"]]
    for name, part in (("tuned", select_by_validation(rows, cells, by)),
                       ("common", rows[matches(rows[OVER], common)])):
        stats = cell_stats(part, cells, y=y, order=order) if not part.empty else None
        if stats is None:  # no run at the common value: its columns stay empty
            out = out.assign(**{f"{name}_{k}": math.nan for k in ("mean", "std")},
                             **{f"{name}_cell": NO_RUN})
            continue
        stats[f"{name}_cell"] = [cell_text(m, s, n, d, y=y) for m, s, n, d in zip(
            stats["mean"], stats["std"], stats["n_seeds"], stats["n_diverged"], strict=True)]
        keep = [*cells, "mean", "std", f"{name}_cell",
                *(("n_seeds", "n_diverged") if name == "tuned" else ())]
        stats = stats[keep].rename(columns={"mean": f"{name}_mean", "std": f"{name}_std"})
        out = out.merge(stats, on=cells, how="left")
    levels = cell_stats(rows, cells, y=by, order=order)[cells]  # the axis order
    out = levels.merge(out, on=cells, how="left")
    # a combination of the axes that no run has (a method the grid tunes at one E only)
    for name in ("tuned", "common"):
        out[f"{name}_cell"] = out[f"{name}_cell"].fillna(NO_RUN)
    out["n_seeds"] = out["n_seeds"].fillna(0).astype(int)
    out["n_diverged"] = out["n_diverged"].fillna(0).astype(int)
    out["edge"] = out["edge"].fillna("")
    return out


def tuning_markdown(data: pd.DataFrame, cells: Sequence[str], *, by: str = "val_accuracy",
                    title: str = "") -> str:
    """:func:`tuning_table` as a Markdown table: the ``cells`` columns (their values' labels),
    the chosen lr_scale (↑ / ↓: at the sweep's edge), ``by`` at it, the test accuracy at it
    and at the common recipe, the seeds."""
    cells = list(cells)
    header = [*(c.replace("_", " ") for c in cells), "lr × (chosen)",
              f"{by.replace('_', ' ')} (chosen)", "test (chosen lr)",
              f"test (lr × {COMMON:g}, common recipe)", SEEDS]
    lines = ["| " + " | ".join(map(escape_cell, header)) + " |",
             "|" + "---|" * len(cells) + "---:|" * (len(header) - len(cells))]
    for row in data.itertuples(index=False):
        values = row._asdict()
        scale = values[OVER]
        line = [*(style.label(value_text(values[c])) for c in cells),
                NO_RUN if pd.isna(scale) else f"{scale:g}{EDGES.get(values['edge'], '')}",
                extra_text(values[by], by),
                values["tuned_cell"], values["common_cell"], str(values["n_seeds"])]
        lines.append("| " + " | ".join(map(escape_cell, line)) + " |")
    notes = [f"{DIVERGED_NOTE}."] if data["n_diverged"].any() else []
    notes.append(f"The lr × is chosen on {by.replace('_', ' ')} (images held out of the "
                 "training set), never on the test set.")
    edges = sorted({e for e in data["edge"] if e})
    if edges:
        notes.append("; ".join(f"{EDGES[e]}: the {'largest' if e == 'high' else 'smallest'} "
                               f"lr × swept" for e in edges)
                     + " (the best may lie beyond it: widen the sweep).")
    head = [f"**{title}**", ""] if title else []
    return "\n".join([*head, *lines, "", *notes]) + "\n"


def make_tuning_table(rows: pd.DataFrame, stem: str | Path, *, cells: Sequence[str],
                      by: str = "val_accuracy", order: Orders | None = None,
                      title: str = "") -> list[Path]:
    """Write ``stem``.csv (:func:`tuning_table`) and ``stem``.md (:func:`tuning_markdown`)."""
    data = tuning_table(rows, cells, by=by, order=order)
    return save_table(data, tuning_markdown(data, cells, by=by, title=title), stem)
