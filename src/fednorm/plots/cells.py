"""Final values of a metric per cell of a grid of categorical keys (a heatmap's cells, a bar
chart's bars, a table's entries): statistics over seeds, the order of each axis, the unit shown.

A cell's number is the mean over its seeds of each run's final value (see
:func:`fednorm.results.seed_stats`); a diverged seed is counted in ``n_diverged`` and left
out of the mean, and the cell is marked with :data:`DIVERGED_MARK`.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from fednorm.metrics import DIVERGED_MARK, percent
from fednorm.results import seed_stats

DIVERGED_NOTE = f"{DIVERGED_MARK} some seeds diverged: mean over the others"
STATS = ("mean", "std", "min", "max")
Orders = Mapping[str, Sequence[Any]]  # column -> the order of its values along an axis


def value_label(y: str) -> str:
    """Axis label of the final value of ``y``: e.g. 'test accuracy (%)'."""
    return y.replace("_", " ") + (" (%)" if percent(y) else "")


def axis_order(values: Iterable[Any], given: Sequence[Any] | None = None) -> list[Any]:
    """The order of ``values`` along an axis: ``given`` when there is one (it must hold every
    value, else ValueError), else ascending when all are numbers, else first appearance."""
    present = list(dict.fromkeys(values))
    if given is not None:
        missing = [v for v in present if v not in given]
        if missing:
            raise ValueError(f"values {missing} are not in the given order {list(given)}")
        return list(given)
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in present):
        return sorted(present)
    return present


def cell_stats(
    df: pd.DataFrame,
    axes: Sequence[str],
    *,
    y: str,
    order: Orders | None = None,
    last: int = 1,
) -> pd.DataFrame:
    """One row per combination of the ``axes`` columns' values, in axis order (see
    :func:`axis_order`; ``order`` fixes some), cells without any run included:
    ``mean``, ``std``, ``min``, ``max`` (in % for an accuracy), ``n_seeds``, ``n_diverged``.

    A cell without a run has NaN statistics and zero counts; one whose seeds all diverged has
    NaN statistics and ``n_diverged`` > 0.
    """
    axes = list(axes)
    order = order or {}
    stats = seed_stats(df, axes, y=y, last=last)
    if percent(y):
        stats[list(STATS)] *= 100.0
    levels = [axis_order(df[a], order.get(a)) for a in axes]
    grid = pd.DataFrame(list(itertools.product(*levels)), columns=axes)
    out = grid.merge(stats, on=axes, how="left")
    for count in ("n_seeds", "n_diverged"):
        out[count] = out[count].fillna(0).astype(int)
    return out


def seeds_text(counts: pd.Series) -> str:
    """The seeds behind some cells (their ``n_seeds``): '3', or a range '2–3' when they
    differ; empty cells (no run: 0 seeds) do not count."""
    counts = counts[counts > 0]
    if counts.empty:
        return "0"
    low, high = counts.min(), counts.max()
    return f"{low}" if low == high else f"{low}–{high}"


def mark(n_diverged: int) -> str:
    """The cell mark of ``n_diverged`` diverged seeds: '†' or ''."""
    return DIVERGED_MARK if n_diverged else ""


def value_text(value: Any) -> str:
    """A value as an axis tick or a label: numbers as ``:g`` (20, 0.1), anything else as text."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)
