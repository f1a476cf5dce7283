"""One figure file set (PDF, PNG, CSV) from already-selected tidy rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from fednorm.plots import style
from fednorm.plots.bars import plot_bars
from fednorm.plots.cells import value_text
from fednorm.plots.curves import Hue, hue_keys, plot_curves
from fednorm.plots.final import plot_final_vs
from fednorm.plots.save import save_figure

PLOTTERS: dict[str, Callable[..., pd.DataFrame]] = {
    "curves": plot_curves,
    "final_vs": plot_final_vs,
    "bars": plot_bars,
}
DEFAULT_X = {"curves": "step", "final_vs": "heterogeneity", "bars": "split"}
FIGSIZE = (5.0, 3.6)


def readable(column: str) -> str:
    """Axis label for a column: its name with spaces for underscores."""
    return column.replace("_", " ")


def draw_axes(
    ax: Any, kind: str, rows: pd.DataFrame, *, x: str, y: str, hue: Hue,
    lines: list[style.Line], xlabel: str | None = None, ylabel: str | None = None,
    logy: bool = False, **kw: Any,
) -> pd.DataFrame:
    """One axes of a ``kind`` figure (one of PLOTTERS): the plot, its labels and grid; returns
    the numbers drawn."""
    data = PLOTTERS[kind](ax, rows, x=x, y=y, hue=hue, lines=lines, **kw)
    ax.set_xlabel(xlabel or readable(x))
    ax.set_ylabel(ylabel or readable(y))
    ax.grid(alpha=0.3)
    if logy:
        ax.set_yscale("log")
    return data


def make_figure(
    kind: str,
    df: pd.DataFrame,
    stem: str | Path,
    *,
    title: str,
    x: str | None = None,
    y: str = "test_accuracy",
    hue: Hue = "normalizer",
    xlabel: str | None = None,
    ylabel: str | None = None,
    panel: str | None = None,
    panel_values: Sequence[Any] = (),
    panel_label: str | None = None,
    logy: bool = False,
    **kw: Any,
) -> list[Path]:
    """Draw ``df`` as a ``kind`` figure (one of PLOTTERS) and save it under ``stem``.

    ``x`` defaults to DEFAULT_X[kind]; axis labels default to the
    column names; ``hue`` is the column (or two: colour, then dash) that tells lines apart, each
    line drawn alike in every panel.
    With ``panel``, one axes per value in ``panel_values`` (side by side, rows
    where ``df[panel]`` equals it, titled ``panel_label`` (default: the column) = value), and the
    CSV gets a ``panel`` column first; ``logy`` puts the
    y axis on a log scale (errors spanning orders of magnitude). ``kw`` goes to the
    plot function (e.g. ``last``, ``logx``, ``order``). Returns the PDF, PNG and CSV paths (see
    :func:`save_figure`). Raises ValueError for an unknown ``kind`` or an empty selection.
    """
    _check_kind(kind)
    x = x or DEFAULT_X[kind]
    values = list(panel_values) if panel else [None]
    fig = Figure(figsize=(FIGSIZE[0] * len(values), FIGSIZE[1]), layout="constrained")
    frames = []
    lines = style.lines(df, hue_keys(hue))  # one look per line across all panels
    for ax, value in zip(fig.subplots(1, len(values), squeeze=False)[0], values, strict=True):
        rows = df if panel is None else df[df[panel] == value]
        if rows.empty:
            where = "" if panel is None else f" ({panel} = {value})"
            raise ValueError(f"figure {stem}: no rows matched its selection{where}")
        data = draw_axes(ax, kind, rows, x=x, y=y, hue=hue, lines=lines, xlabel=xlabel,
                         ylabel=ylabel, logy=logy, **kw)
        if panel is not None:
            data.insert(0, panel, value)
            ax.set_title(f"{panel_label or readable(panel)} = {value_text(value)}")
        frames.append(data)
    if panel is None:
        fig.axes[0].set_title(title)
    else:
        fig.suptitle(title)
    return save_figure(fig, pd.concat(frames, ignore_index=True), stem)


@dataclass
class Part:
    """One axes of a figure made of parts: its kind, rows and :func:`draw_axes` keywords
    (``x``, ``y``, ``hue``, labels, ...), titled ``title``."""

    kind: str
    rows: pd.DataFrame
    title: str
    options: dict[str, Any]


def make_parts_figure(parts: Sequence[Part], stem: str | Path, *, title: str) -> list[Path]:
    """Several figures side by side in one file (e.g. the FixBN paper's Fig. 3, panels (a)-(d),
    each of other rows, kind and axes), each part titled; the CSV gets a ``part`` column (the
    part's title) first. Returns the PDF, PNG and CSV paths."""
    fig = Figure(figsize=(FIGSIZE[0] * len(parts), FIGSIZE[1]), layout="constrained")
    frames = []
    for ax, part in zip(fig.subplots(1, len(parts), squeeze=False)[0], parts, strict=True):
        _check_kind(part.kind)
        if part.rows.empty:
            raise ValueError(f"figure {stem}: no rows matched the selection of part "
                             f"{part.title!r}")
        options = {"x": DEFAULT_X[part.kind], "hue": "normalizer", **part.options}
        lines = style.lines(part.rows, hue_keys(options["hue"]))
        data = draw_axes(ax, part.kind, part.rows, lines=lines, **options)
        data.insert(0, "part", part.title)
        ax.set_title(part.title)
        frames.append(data)
    fig.suptitle(title)
    return save_figure(fig, pd.concat(frames, ignore_index=True), stem)


def _check_kind(kind: str) -> None:
    if kind not in PLOTTERS:
        raise ValueError(f"unknown figure kind {kind!r}; allowed kinds: {sorted(PLOTTERS)}")
