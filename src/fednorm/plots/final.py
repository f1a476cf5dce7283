"""Final value of a metric against a per-run setting (e.g. heterogeneity γ), one line per hue."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from fednorm.plots import style
from fednorm.plots.curves import (
    Hue,
    add_legend,
    draw_hue,
    hue_keys,
    legend_title,
    mark_divergence,
    present_lines,
)
from fednorm.results import seed_stats

Scale = Literal["auto", "categorical", "log", "linear"]
SPAN_RATIO = 20.0


def final_data(
    df: pd.DataFrame,
    *,
    x: str = "heterogeneity",
    y: str = "test_accuracy",
    hue: Hue = "normalizer",
    last: int = 1,
) -> pd.DataFrame:
    """Per (hue, x): :func:`fednorm.results.seed_stats` of ``y`` (mean, std, min, max over
    seeds of the runs' final values, ``n_seeds``, ``n_diverged``)."""
    return seed_stats(df, [*hue_keys(hue), x], y=y, last=last)


def x_scale(values: pd.Series) -> Literal["categorical", "log", "linear"]:
    """How to lay out ``values`` on the x axis when they span more than SPAN_RATIO.

    "categorical" (evenly spaced) if some value is <= 0, "log" if all are positive, "linear"
    when the positive values span at most SPAN_RATIO (max / min).
    """
    positive = values[values > 0]
    if positive.empty or positive.max() / positive.min() <= SPAN_RATIO:
        return "linear"
    return "categorical" if (values <= 0).any() else "log"


def place_x(ax: Axes, values: pd.Series, scale: Scale) -> pd.Series:
    """Set up the x axis for ``values`` and return the position of each value on it."""
    if scale == "auto":
        scale = x_scale(values)
    if scale not in ("categorical", "log", "linear"):
        raise ValueError(f"logx must be 'auto', 'categorical', 'log' or 'linear', got {scale!r}")
    ticks = np.sort(values.unique())
    if scale == "linear":
        return values
    texts = [f"{v:g}" for v in ticks]
    if scale == "log":
        ax.set_xscale("log")
        ax.set_xticks(ticks, texts)
        ax.minorticks_off()
        return values
    ax.set_xticks(np.arange(len(ticks)), texts)
    return values.map({v: float(i) for i, v in enumerate(ticks)})


def plot_final_vs(
    ax: Axes,
    df: pd.DataFrame,
    *,
    x: str = "heterogeneity",
    y: str = "test_accuracy",
    hue: Hue = "normalizer",
    last: int = 1,
    logx: Scale = "auto",
    lines: list[style.Line] | None = None,
) -> pd.DataFrame:
    """One line with markers per hue: final ``y`` (mean over seeds) against ``x``, min–max band.

    ``logx`` picks the x layout: "auto" (see :func:`x_scale`), "categorical" (evenly spaced,
    values as tick labels), "log" or "linear". Each x where seeds diverged gets an "x" at the
    bottom of the axis, and the hue's legend label ends in " (k diverged)". ``lines``: as in
    :func:`fednorm.plots.curves.plot_curves`. Returns
    :func:`final_data`'s frame, i.e. exactly the numbers drawn.
    """
    keys = hue_keys(hue)
    data = final_data(df, x=x, y=y, hue=keys, last=last)
    positions = place_x(ax, data[x], logx)
    for line in present_lines(data, keys, lines):
        rows = line.rows(data, keys)
        part = data[rows]
        text = line.label
        if n_diverged := int(part["n_diverged"].sum()):
            text += f" ({n_diverged} diverged)"
        draw_hue(ax, positions[rows], part, line, text, with_marker=True)
        mark_divergence(ax, positions[rows & (data["n_diverged"] > 0)], line.colour)
    add_legend(ax, any_diverged=bool(data["n_diverged"].any()), title=legend_title(keys))
    return data
