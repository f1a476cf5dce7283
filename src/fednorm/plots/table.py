"""A table of final values (the FixBN paper's Table 1): one row per value of ``rows``, one column
per value of ``cols``, each cell "mean ± std" over seeds (in % with two decimals for an
accuracy), and a last column with the number of seeds. Written as CSV (tidy numbers) and
Markdown (the table as read)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fednorm.plots import style
from fednorm.plots.cells import (
    DIVERGED_MARK,
    DIVERGED_NOTE,
    Orders,
    cell_stats,
    mark,
    percent,
    seeds_text,
    value_text,
)
from fednorm.plots.save import save_table

NO_RUN = "–"
SEEDS = "seeds"


def cell_text(mean: float, std: float, n_seeds: int, n_diverged: int, *, y: str) -> str:
    """'87.46 ± 0.57' (in % for an accuracy; 3 significant digits otherwise); no '±' with a
    single seed; '†' appended when seeds diverged; '–' without a number."""
    if math.isnan(mean):
        return NO_RUN + mark(n_diverged)
    spec = ".2f" if percent(y) else ".3g"
    text = f"{mean:{spec}}" if n_seeds < 2 else f"{mean:{spec}} ± {std:{spec}}"
    return text + (f" {DIVERGED_MARK}" if n_diverged else "")


def table_data(
    df: pd.DataFrame,
    *,
    rows: str,
    cols: str,
    y: str = "test_accuracy",
    order: Orders | None = None,
    last: int = 1,
) -> pd.DataFrame:
    """One row per (row, col) cell in axis order: ``rows``, ``cols``, ``mean``, ``std``,
    ``n_seeds``, ``n_diverged`` (see :func:`fednorm.plots.cells.cell_stats`) and ``cell``, the
    text the table shows (:func:`cell_text`)."""
    stats = cell_stats(df, [rows, cols], y=y, order=order, last=last)
    stats["cell"] = [cell_text(m, s, n, d, y=y) for m, s, n, d in zip(
        stats["mean"], stats["std"], stats["n_seeds"], stats["n_diverged"], strict=True)]
    return stats[[rows, cols, "mean", "std", "n_seeds", "n_diverged", "cell"]]


def escape_cell(text: str) -> str:
    """Text safe in a Markdown table's cell: its '|' escaped."""
    return text.replace("|", r"\|")


def extra_text(value: float, y: str) -> str:
    """A row's extra number: a count in full ('580,000'), an accuracy in %, else 3 digits."""
    if math.isnan(value):
        return NO_RUN
    if y == "comm_rounds":
        return f"{value:,.0f}"
    return f"{value:.2f}" if percent(y) else f"{value:.3g}"


def markdown(data: pd.DataFrame, *, rows: str, cols: str, title: str = "",
             extra: tuple[str, ...] = ()) -> str:
    """:func:`table_data`'s cells as a Markdown table; the seeds column gives, per row, the
    number of seeds behind its cells (a range when they differ); each of ``extra`` (columns of
    ``data``, one value per row) is a column before it. Row and column headers are the
    values' labels (:func:`fednorm.plots.style.label`)."""
    columns = list(dict.fromkeys(data[cols]))
    header = [rows.replace("_", " "), *(style.label(value_text(c)) for c in columns),
              *(e.replace("_", " ") for e in extra), SEEDS]
    lines = ["| " + " | ".join(map(escape_cell, header)) + " |",
             "|" + "---|" + "---:|" * (len(header) - 1)]
    for value, part in data.groupby(rows, sort=False):
        cells = part.set_index(cols)["cell"].reindex(columns)
        more = [extra_text(part[e].iloc[0], e) for e in extra]
        line = [style.label(value_text(value)), *cells, *more, seeds_text(part["n_seeds"])]
        lines.append("| " + " | ".join(map(escape_cell, line)) + " |")
    notes = [f"{DIVERGED_NOTE}."] if data["n_diverged"].any() else []
    head = [f"**{title}**", ""] if title else []
    return "\n".join([*head, *lines, *(["", *notes] if notes else [])]) + "\n"


def make_table(
    df: pd.DataFrame,
    stem: str | Path,
    *,
    rows: str,
    cols: str,
    y: str = "test_accuracy",
    order: Orders | None = None,
    title: str = "",
    last: int = 1,
    extra: tuple[str, ...] = (),
) -> list[Path]:
    """Write ``stem``.csv (:func:`table_data`) and ``stem``.md (:func:`markdown`) atomically.
    Each metric of ``extra`` is a column: per row, the mean over its runs (every column's
    seeds) of their final value, e.g. the communication rounds a scheme needs."""
    data = table_data(df, rows=rows, cols=cols, y=y, order=order, last=last)
    for metric in extra:
        per_row = cell_stats(df, [rows], y=metric, order=order, last=last)
        data = data.merge(per_row[[rows, "mean"]].rename(columns={"mean": metric}), on=rows,
                          how="left")
    return save_table(data, markdown(data, rows=rows, cols=cols, title=title, extra=extra),
                      stem)
