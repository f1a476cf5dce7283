"""Two settings compared over a grid (the FixBN paper's Fig 2): three heatmaps side by side,
the final ``y`` of A, of B, and B − A, each cell the mean over seeds, annotated.

The difference is on a diverging colour map centred at 0 with symmetric limits: green where A
wins (B − A < 0), purple where B wins, as the paper colours Acc(GN) − Acc(BN). A cell where some
seed diverged is marked '†' and averages the other seeds; a cell without any run is grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure

from fednorm.plots import style
from fednorm.plots.cells import (
    DIVERGED_NOTE,
    Orders,
    axis_order,
    cell_stats,
    mark,
    percent,
    value_text,
)
from fednorm.plots.save import save_figure
from fednorm.results import require_columns

VALUE_CMAP = "Blues"
DIFF_CMAP = "PRGn_r"  # low (A wins) green, high (B wins) purple
EMPTY = "#d9d9d9"  # a cell without any run
COLUMNS = ("panel", "mean", "std", "n_seeds", "n_diverged")  # after the row and col columns


def heatmap_data(
    df: pd.DataFrame,
    *,
    rows: str,
    cols: str,
    compare: str,
    values: Sequence[Any],
    y: str = "test_accuracy",
    order: Orders | None = None,
    last: int = 1,
) -> pd.DataFrame:
    """The numbers of the three panels, tidy: one row per (panel, row, col).

    Columns: ``panel`` (A, B, then 'B - A', with A and B the two ``values`` of ``compare``),
    ``rows``, ``cols``, ``mean``, ``std`` (over seeds; in % for an accuracy), ``n_seeds``,
    ``n_diverged``. Rows and cols in axis order (see :func:`fednorm.plots.cells.axis_order`)
    over both settings' runs, every cell present (NaN without runs). A difference row has
    ``mean`` = B's − A's, no ``std``, and the counts of both sides added up.
    """
    a, b = values
    require_columns(df, [rows, cols, compare])
    df = df[df[compare].isin([a, b])]
    if df.empty:
        raise ValueError(f"no rows with {compare} in {[a, b]}")
    order = dict(order or {})
    axes = {key: axis_order(df[key], order.get(key)) for key in (rows, cols)}
    stats = cell_stats(df, [compare, rows, cols], y=y, last=last,
                       order={**order, **axes, compare: [a, b]})
    side = {v: stats[stats[compare] == v].drop(columns=compare).reset_index(drop=True)
            for v in (a, b)}
    diff = side[a][[rows, cols]].assign(
        mean=side[b]["mean"] - side[a]["mean"], std=math.nan,
        n_seeds=side[a]["n_seeds"] + side[b]["n_seeds"],
        n_diverged=side[a]["n_diverged"] + side[b]["n_diverged"])
    panels = [side[a].assign(panel=str(a)), side[b].assign(panel=str(b)),
              diff.assign(panel=f"{b} - {a}")]
    return pd.concat(panels, ignore_index=True)[["panel", rows, cols, *COLUMNS[1:]]]


def _grid(part: pd.DataFrame, rows: str, cols: str, column: str) -> pd.DataFrame:
    return part.pivot(index=rows, columns=cols, values=column).reindex(
        index=list(dict.fromkeys(part[rows])), columns=list(dict.fromkeys(part[cols])))


def _text_colour(rgba: tuple[float, ...]) -> str:
    """Black on light cells, white on dark ones (relative luminance)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "white"


def draw_panel(
    ax: Axes, part: pd.DataFrame, *, rows: str, cols: str, cmap: Colormap, norm: Normalize,
    signed: bool, digits: int, unit: str,
) -> None:
    """One panel: the cells' means in colour, each annotated (with '†' when a seed diverged);
    cells without a number left grey; a colour bar labelled ``unit``."""
    means = _grid(part, rows, cols, "mean")
    marks = _grid(part, rows, cols, "n_diverged")
    cmap = cmap.with_extremes(bad=EMPTY)
    image = ax.imshow(np.ma.masked_invalid(means.to_numpy(float)), cmap=cmap, norm=norm,
                      aspect="auto")
    ax.figure.colorbar(image, ax=ax, shrink=0.9, label=unit)
    for (i, j), value in np.ndenumerate(means.to_numpy(float)):
        sign = "+" if signed else ""
        text = "" if math.isnan(value) else f"{value:{sign}.{digits}f}"
        text += mark(int(marks.iat[i, j]))
        colour = "black" if math.isnan(value) else _text_colour(cmap(norm(value)))
        ax.text(j, i, text, ha="center", va="center", fontsize="small", color=colour)
    ax.set_xticks(range(means.shape[1]), [value_text(v) for v in means.columns])
    ax.set_yticks(range(means.shape[0]), [value_text(v) for v in means.index])
    ax.set_xlabel(cols.replace("_", " "))
    ax.set_ylabel(rows.replace("_", " "))


def limits(values: pd.Series) -> tuple[float, float]:
    """A sequential colour scale's limits: the values' least and largest (±0.5 when equal)."""
    low, high = values.min(), values.max()
    if not (math.isfinite(low) and math.isfinite(high)):
        return 0.0, 1.0
    return (low - 0.5, high + 0.5) if low == high else (low, high)


def heatmap_figure(
    df: pd.DataFrame,
    *,
    rows: str,
    cols: str,
    compare: str,
    values: Sequence[Any],
    y: str = "test_accuracy",
    order: Orders | None = None,
    title: str = "",
    last: int = 1,
) -> tuple[Figure, pd.DataFrame]:
    """The figure of :func:`heatmap_data`'s numbers (returned with it): A and B share one
    sequential colour scale; B − A is on DIFF_CMAP with limits ±max|B − A|."""
    data = heatmap_data(df, rows=rows, cols=cols, compare=compare, values=values, y=y,
                        order=order, last=last)
    names = list(dict.fromkeys(data["panel"]))
    short = "Acc" if percent(y) else y.replace("_", " ")
    a, b = (style.label(v) for v in values)
    titles = [f"{short}({a})", f"{short}({b})", f"{short}({b}) − {short}({a})"]
    n_rows, n_cols = data[rows].nunique(), data[cols].nunique()
    fig = Figure(figsize=(3 * (0.8 * n_cols + 1.8), 0.45 * n_rows + 1.6), layout="constrained")
    sides = data[data["panel"].isin(names[:2])]["mean"]
    spread = np.nanmax(np.abs(data[data["panel"] == names[2]]["mean"].to_numpy(float)),
                       initial=0.0)
    spread = spread if spread > 0 else 1.0
    norms = [Normalize(*limits(sides))] * 2 + [Normalize(-spread, spread)]
    cmaps = [colormaps[VALUE_CMAP]] * 2 + [colormaps[DIFF_CMAP]]
    digits = 1 if percent(y) else 3
    for ax, name, text, cmap, norm in zip(fig.subplots(1, 3), names, titles, cmaps, norms,
                                          strict=True):
        draw_panel(ax, data[data["panel"] == name], rows=rows, cols=cols, cmap=cmap, norm=norm,
                   signed=name == names[2], digits=digits, unit="%" if percent(y) else "")
        ax.set_title(text, fontsize="medium")
    for ax in fig.axes[1:3]:
        ax.set_ylabel("")
    if notes := cell_notes(data):
        fig.supxlabel("; ".join(notes), fontsize="small")
    if title:
        fig.suptitle(title)
    return fig, data


def cell_notes(data: pd.DataFrame) -> list[str]:
    """What a reader must know of a heatmap's cells (rows of :func:`cell_stats`): that '†'
    marks a diverged seed, that grey is a cell without any run."""
    notes = [DIVERGED_NOTE] if data["n_diverged"].any() else []
    if (data["n_seeds"] + data["n_diverged"]).eq(0).any():
        notes.append("grey: no run")
    return notes


def make_heatmap(df: pd.DataFrame, stem: str | Path, **kw: Any) -> list[Path]:
    """:func:`heatmap_figure` saved as ``stem``.pdf/.png/.csv (the CSV: :func:`heatmap_data`)."""
    return save_figure(*heatmap_figure(df, **kw), stem)
