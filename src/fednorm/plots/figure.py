"""One figure file set (PDF, PNG, CSV) from already-selected tidy rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from fednorm.plots.curves import plot_curves
from fednorm.plots.final import plot_final_vs
from fednorm.plots.save import save_figure

PLOTTERS: dict[str, Callable[..., pd.DataFrame]] = {
    "curves": plot_curves,
    "final_vs": plot_final_vs,
}
DEFAULT_X = {"curves": "step", "final_vs": "heterogeneity"}
FIGSIZE = (5.0, 3.6)


def readable(column: str) -> str:
    """Axis label for a column: its name with spaces for underscores."""
    return column.replace("_", " ")


def make_figure(
    kind: str,
    df: pd.DataFrame,
    stem: str | Path,
    *,
    title: str,
    x: str | None = None,
    y: str = "test_accuracy",
    hue: str = "normalizer",
    xlabel: str | None = None,
    ylabel: str | None = None,
    **kw: Any,
) -> list[Path]:
    """Draw ``df`` as a ``kind`` figure ("curves" or "final_vs") and save it under ``stem``.

    ``x`` defaults to "step" (curves) or "heterogeneity" (final_vs); axis labels default to the
    column names. ``kw`` goes to the plot function (e.g. ``last``, ``logx``). Returns the PDF,
    PNG and CSV paths (see :func:`save_figure`). Raises ValueError for an unknown ``kind`` or an
    empty ``df``.
    """
    if kind not in PLOTTERS:
        raise ValueError(f"unknown figure kind {kind!r}; allowed kinds: {sorted(PLOTTERS)}")
    if df.empty:
        raise ValueError(f"figure {stem}: no rows matched its selection")
    x = x or DEFAULT_X[kind]
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    data = PLOTTERS[kind](ax, df, x=x, y=y, hue=hue, **kw)
    ax.set_title(title)
    ax.set_xlabel(xlabel or readable(x))
    ax.set_ylabel(ylabel or readable(y))
    ax.grid(alpha=0.3)
    return save_figure(fig, data, stem)
