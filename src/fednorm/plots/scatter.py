"""Figures of the 2-D toy (FBN paper, Figures 1 and 2): points before/after normalization, and
the normalization error against heterogeneity.

Input tables are those of :mod:`fednorm.toy`: :func:`fednorm.toy.points_table` (columns x, y,
label, stage) and :func:`fednorm.toy.error_table` (columns scheme, gamma, seed, error).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fednorm.plots.figure import make_figure
from fednorm.plots.save import save_figure
from fednorm.results import require_columns

STAGE_MARKERS = {"before": "o", "after": "+"}  # the paper's "●" and "+"
STAGE_LABELS = {"before": "before normalization", "after": "after normalization"}
MARKER_SIZE = {"before": 8.0, "after": 18.0}  # points², as in Axes.scatter's ``s``
LEGEND_GREY = "#444444"
SCATTER_FIGSIZE = (4.2, 4.2)


def class_colour(label: int) -> tuple[float, float, float, float]:
    """Colour of class ``label``: tab10 for labels 0..9 (10 distinct colours), tab20 cycled past."""
    if 0 <= label < 10:
        return colormaps["tab10"](label)
    return colormaps["tab20"](label % 20)


def plot_points(ax: Axes, table: pd.DataFrame) -> pd.DataFrame:
    """Scatter each (stage, class) of ``table``: "o" before, "+" after normalization, one colour
    per class; equal aspect; a legend of the two markers. Returns the rows drawn (all of
    ``table``, in its order, with a fresh index)."""
    require_columns(table, ["x", "y", "label", "stage"])
    unknown = sorted(set(table["stage"]) - set(STAGE_MARKERS))
    if unknown:
        raise ValueError(f"unknown stage values {unknown}; allowed: {list(STAGE_MARKERS)}")
    for stage, marker in STAGE_MARKERS.items():
        for label, part in table[table["stage"] == stage].groupby("label", sort=True):
            ax.scatter(part["x"], part["y"], marker=marker, s=MARKER_SIZE[stage], linewidths=0.9,
                       color=class_colour(int(label)))
    ax.set_aspect("equal", adjustable="datalim")
    handles = [
        Line2D([], [], linestyle="none", marker=marker, color=LEGEND_GREY,
               label=STAGE_LABELS[stage])
        for stage, marker in STAGE_MARKERS.items()
    ]
    # Below the axes, so that it hides no point.
    ax.legend(handles=handles, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.06),
              ncols=2, frameon=False)
    return table.reset_index(drop=True)


def toy_figure(table: pd.DataFrame, stem: str | Path, title: str) -> list[Path]:
    """One square axes of :func:`plot_points`, saved as ``stem``.pdf/.png/.csv (the drawn rows)."""
    fig = Figure(figsize=SCATTER_FIGSIZE, layout="constrained")
    ax = fig.subplots()
    data = plot_points(ax, table)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return save_figure(fig, data, stem)


def as_runs(errors: pd.DataFrame) -> pd.DataFrame:
    """``errors`` (scheme, gamma, seed, error) as one-row runs for :func:`plot_final_vs`:
    adds ``run_id`` "<scheme>-g<gamma>-s<seed>", ``status`` "ok" and ``step`` 0."""
    require_columns(errors, ["scheme", "gamma", "seed", "error"])
    runs = errors.copy()
    runs["run_id"] = [
        f"{s}-g{g:g}-s{seed}" for s, g, seed in zip(runs["scheme"], runs["gamma"], runs["seed"],
                                                   strict=True)
    ]
    if runs["run_id"].duplicated().any():
        raise ValueError("errors has several rows for the same (scheme, gamma, seed)")
    runs["status"] = "ok"
    runs["step"] = 0
    return runs


def error_figure(errors: pd.DataFrame, stem: str | Path, title: str) -> list[Path]:
    """Error vs γ, one line per scheme (mean over seeds) with a min–max band over seeds, via
    :func:`fednorm.plots.figure.make_figure` ("final_vs"). The CSV has one row per (scheme, γ):
    mean, std, min, max, n_seeds, n_diverged of the per-seed errors."""
    return make_figure(
        "final_vs", as_runs(errors), stem, title=title, x="gamma", y="error", hue="scheme",
        xlabel="γ (similarity between clients)", ylabel="normalization error", logx="linear",
    )
