"""The comparison of every method as rliable reads it (:mod:`fednorm.improvement`): a table of
each method's probability of improvement over a baseline with its interquartile mean, and a
performance profile, the fraction of (setting, seed) runs above τ with bootstrap bands."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from fednorm.improvement import improvement, profile
from fednorm.metrics import percent
from fednorm.plots import style
from fednorm.plots.cells import Orders, axis_order, value_label
from fednorm.plots.save import save_figure, save_table
from fednorm.plots.table import escape_cell
from fednorm.results import run_values

TAUS = 101  # points of a profile's τ grid, from the least to the largest finite value
BANDS = "95 % stratified-bootstrap band"


def improvement_runs(df: pd.DataFrame, *, rows: str, cols: str, y: str) -> pd.DataFrame:
    """The tidy frame of :mod:`fednorm.improvement` from summary rows: one row per run, its
    ``rows`` value as the method, its ``cols`` value as the setting, its seed and final ``y``
    (in % for an accuracy; NaN: diverged)."""
    runs = run_values(df, [rows, cols, "seed"], y=y)
    out = runs.rename(columns={rows: "method", cols: "setting"})[
        ["method", "setting", "seed", "value"]]
    return out.assign(value=out["value"] * (100.0 if percent(y) else 1.0))


def _ordered(runs: pd.DataFrame, order: Orders | None, rows: str) -> pd.DataFrame:
    methods = axis_order(runs["method"], (order or {}).get(rows))
    present = [m for m in methods if m in set(runs["method"])]
    return runs.set_index("method").loc[present].reset_index()


def improvement_markdown(data: pd.DataFrame, *, title: str, y: str) -> str:
    """The table's Markdown: one line per method."""
    unit = " (%)" if percent(y) else ""

    def num(v: float) -> str:
        return "–" if np.isnan(v) else f"{v:.2f}"

    lines = [f"**{title}**", "",
             f"| method | P(beats baseline) | settings | runs (diverged) | mean{unit} | "
             f"IQM{unit} |", "|---|---:|---:|---:|---:|---:|"]
    for _, r in data.iterrows():
        p = ("–" if np.isnan(r["probability"]) else
             f"{r['probability']:.2f} [{r['low']:.2f}, {r['high']:.2f}]")
        lines.append(f"| {escape_cell(style.label(r['method']))} | {p} | {r['settings']} | "
                     f"{r['runs']} ({r['diverged']}) | {num(r['mean'])} | {num(r['iqm'])} "
                     f"[{num(r['iqm_low'])}, {num(r['iqm_high'])}] |")
    lines += ["", f"P(X > {data['baseline'].iloc[0]}): a run of the method against a run of "
              "the baseline in the same setting, ties 1/2, averaged over the settings both ran; "
              "IQM: the mean of the middle 50 % of the method's runs; [95 % stratified-bootstrap "
              "interval over seeds]."]
    return "\n".join(lines) + "\n"


def make_improvement(df: pd.DataFrame, stem: str | Path, *, rows: str, cols: str,
                     baseline: Any, y: str = "test_accuracy", order: Orders | None = None,
                     title: str = "") -> list[Path]:
    """Write ``stem``.csv (:func:`fednorm.improvement.improvement` over the ``cols`` settings,
    the baseline first, then the methods in ``rows``' order) and ``stem``.md."""
    runs = _ordered(improvement_runs(df, rows=rows, cols=cols, y=y), order, rows)
    data = improvement(runs, baseline)
    return save_table(data, improvement_markdown(data, title=title, y=y), stem)


def plot_profile(ax: Axes, data: pd.DataFrame, *, y: str) -> None:
    """One line per method of :func:`fednorm.improvement.profile`'s frame, its band shaded."""
    methods = list(dict.fromkeys(data["method"]))
    for method in methods:
        part = data[data["method"] == method]
        colour = style.colour(method, methods)
        ax.plot(part["tau"], part["fraction"], color=colour, linestyle=style.dash(method,
                                                                                methods),
                label=style.label(method))
        ax.fill_between(part["tau"], part["low"], part["high"], color=colour, alpha=0.15,
                        linewidth=0)
    ax.set_xlabel(f"τ: final {value_label(y)}")
    ax.set_ylabel("fraction of runs above τ")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title=BANDS,
              title_fontsize="small")


def profile_taus(values: Sequence[float], points: int = TAUS) -> np.ndarray:
    """τ from the least to the largest finite value (one point where they are equal)."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        raise ValueError("a performance profile needs a run with a value; every run diverged")
    return np.linspace(finite.min(), finite.max(), points if np.ptp(finite) else 1)


def make_profile(df: pd.DataFrame, stem: str | Path, *, rows: str, cols: str,
                 y: str = "test_accuracy", order: Orders | None = None, title: str = ""
                 ) -> list[Path]:
    """Write ``stem``.pdf, .png and .csv: the performance profile of each method over the
    ``cols`` settings' runs (the CSV: :func:`fednorm.improvement.profile`'s frame)."""
    runs = _ordered(improvement_runs(df, rows=rows, cols=cols, y=y), order, rows)
    data = profile(runs, profile_taus(runs["value"]))
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    plot_profile(ax, data, y=y)
    ax.set_title(title, fontsize="medium")
    return save_figure(fig, data, stem)
