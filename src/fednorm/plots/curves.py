"""A metric against training step: mean over seeds, min–max band, and where runs diverged.

Also holds the pieces shared with :mod:`fednorm.plots.final`: drawing one hue's line and band,
divergence marks and the legend. Statistics over seeds are :mod:`fednorm.results`'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from fednorm.plots import style
from fednorm.results import over_seeds, require_columns

DIVERGED_COLOUR = "#555555"
Hue = str | Sequence[str]  # the column(s) that tell the lines apart (see style.lines)
# x columns computed from a summary row: the FixBN paper's x axes (its Figs 1 and 6)
COMPUTED_X: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "round": lambda df: df["step"] / df["local_steps"],  # communication rounds so far
    "progress": lambda df: df["step"] / df["steps"],  # fraction of the training, in [0, 1]
}


def hue_keys(hue: Hue) -> list[str]:
    """``hue`` as a list of columns: "normalizer" -> ["normalizer"]."""
    return [hue] if isinstance(hue, str) else list(hue)


def run_ends(df: pd.DataFrame, *, x: str, hue: Hue) -> pd.DataFrame:
    """One row per run and hue (a run has several when a hue varies within it, e.g. the layers
    of fednorm.results.load_norm_error): ``run_id``, the hue column(s), the last ``x`` and
    whether the run diverged."""
    keys = ["run_id", *hue_keys(hue)]
    last = df.sort_values(x, kind="stable").groupby(keys, sort=True, dropna=False).tail(1)
    ends = last[[*keys, x]].copy()
    ends["diverged"] = last["status"].eq("diverged").to_numpy()
    return ends.reset_index(drop=True)


def with_x(df: pd.DataFrame, x: str) -> pd.DataFrame:
    """``df`` with the column ``x``: computed (see COMPUTED_X) when ``df`` lacks it."""
    if x in df.columns or x not in COMPUTED_X:
        return df
    return df.assign(**{x: COMPUTED_X[x](df)})


def present_lines(data: pd.DataFrame, keys: list[str],
                  lines: list[style.Line] | None) -> list[style.Line]:
    """The lines among ``lines`` (default: all of ``data``'s) that have rows in ``data``."""
    if lines is None:
        return style.lines(data, keys)
    return [line for line in lines if line.rows(data, keys).any()]


def curve_data(
    df: pd.DataFrame, *, x: str = "step", y: str = "test_accuracy", hue: Hue = "normalizer"
) -> pd.DataFrame:
    """The numbers a curve plot shows: one row per (hue, x), statistics of ``y`` over seeds.

    ``x`` is a column of ``df`` or one of COMPUTED_X ("round": step / local_steps, "progress":
    step / steps), computed from ``df``.

    Columns: the hue column(s), ``x``, ``mean``, ``std``, ``min``, ``max``, ``n_seeds`` (runs
    with a non-NaN value at this point), ``n_runs`` (runs of this hue), ``n_diverged`` (diverged
    runs of this hue) and ``diverged_here`` (runs of this hue whose last row, where they
    diverged, is at this x). A diverged run contributes its values up to where it stopped.
    """
    keys = hue_keys(hue)
    df = with_x(df, x)
    require_columns(df, ["run_id", "status", x, y, *keys])
    stats = over_seeds(df, [*keys, x], y)
    ends = run_ends(df, x=x, hue=keys)
    per_hue = ends.groupby(keys).agg(n_runs=("run_id", "size"), n_diverged=("diverged", "sum"))
    here = ends[ends["diverged"]].groupby([*keys, x]).size().rename("diverged_here")
    stats = stats.merge(per_hue.reset_index(), on=keys, how="left")
    stats = stats.merge(here.reset_index(), on=[*keys, x], how="left")
    stats["diverged_here"] = stats["diverged_here"].fillna(0).astype(int)
    stats["n_diverged"] = stats["n_diverged"].astype(int)
    return stats


def draw_hue(
    ax: Axes, xs: pd.Series, part: pd.DataFrame, line: style.Line, text: str, *,
    with_marker: bool,
) -> None:
    """Draw one line: its mean (labelled ``text``) and its min–max band, in its colour."""
    shape = line.marker if with_marker else None
    ax.plot(xs, part["mean"], color=line.colour, linestyle=line.dash, marker=shape,
            markersize=5, label=text)
    ax.fill_between(xs, part["min"], part["max"], color=line.colour, alpha=0.2, linewidth=0)


def mark_divergence(ax: Axes, xs: pd.Series, colour: str) -> None:
    """An "x" at the bottom edge of ``ax`` at each of ``xs`` (wherever the y-limits end up).

    Nothing is drawn for no ``xs``: an empty unclipped line would still claim layout space.
    """
    if xs.empty:
        return
    ax.plot(
        xs,
        [0.0] * len(xs),
        linestyle="none",
        marker="x",
        markersize=8,
        markeredgewidth=2,
        color=colour,
        transform=ax.get_xaxis_transform(),
        clip_on=False,
        zorder=5,
    )


def legend_title(keys: Sequence[str]) -> str | None:
    """The legend's title: none for hues whose labels name themselves (normalizers,
    scenarios), else the hue columns, e.g. 'local steps' for lines 1, 5, 25."""
    named = ("normalizer", "scenario")
    shown = [k.replace("_", " ") for k in keys if k not in named]
    return " / ".join(shown) if shown else None


def add_legend(ax: Axes, *, any_diverged: bool, **kw: Any) -> None:
    """Legend of the drawn hues, plus an entry explaining the "x" when some run diverged;
    ``kw`` goes to ``Axes.legend`` (e.g. where to put it, its title)."""
    handles, texts = ax.get_legend_handles_labels()
    if any_diverged:
        handles.append(
            Line2D([], [], linestyle="none", marker="x", markeredgewidth=2, color=DIVERGED_COLOUR)
        )
        texts.append("diverged run")
    ax.legend(handles, texts, **{"fontsize": "small", "framealpha": 0.85, **kw})


def plot_curves(
    ax: Axes,
    df: pd.DataFrame,
    *,
    x: str = "step",
    y: str = "test_accuracy",
    hue: Hue = "normalizer",
    lines: list[style.Line] | None = None,
) -> pd.DataFrame:
    """One line per hue (mean over seeds) with a min–max band; "x" where a run diverged.

    ``hue`` is one column or two (colour, then dash: see :func:`fednorm.plots.style.lines`);
    ``lines`` fixes the looks (e.g. chosen over a whole figure of panels), else they come from
    ``df``. Legend labels of hues with diverged runs end in " (k/N diverged)". Returns
    :func:`curve_data`'s frame, i.e. exactly the numbers drawn.
    """
    keys = hue_keys(hue)
    data = curve_data(df, x=x, y=y, hue=keys)
    for line in present_lines(data, keys, lines):
        part = data[line.rows(data, keys)]
        n_diverged, n_runs = int(part["n_diverged"].iloc[0]), int(part["n_runs"].iloc[0])
        text = line.label
        if n_diverged:
            text += f" ({n_diverged}/{n_runs} diverged)"
        draw_hue(ax, part[x], part, line, text, with_marker=False)
        mark_divergence(ax, part.loc[part["diverged_here"] > 0, x], line.colour)
    add_legend(ax, any_diverged=bool(data["n_diverged"].any()), title=legend_title(keys))
    return data
