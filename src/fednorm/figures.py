"""Draw one configured figure from the summary table."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from fednorm.plan import Figure
from fednorm.plots import (
    Part,
    make_domains,
    make_figure,
    make_heatmap,
    make_parts_figure,
    make_table,
)
from fednorm.plots.cells import value_label
from fednorm.results import in_experiments
from fednorm.tuning import make_tuning_table, select_by_validation

log = logging.getLogger("fednorm.figures")
_X_LABELS = {"gamma": "heterogeneity γ (1 = iid)", "dirichlet": "Dirichlet α (small = non-iid)"}
_SYMBOLS = {"gamma": "γ", "dirichlet": "Dirichlet α"}  # heterogeneity's meaning per partition
_CURVE_X_LABELS = {"round": "communication round", "progress": "training progress"}
_LOGX = {True: "log", False: "linear", None: "auto"}  # Figure.logx -> plot_final_vs's logx
# How a metric reads in a legend when several share one axes (the FixBN paper's Fig. 3a)
METRIC_NAMES = {
    "stat_change": "‖S̄(t+1) − S̄(t)‖₁ (global statistics)",
    "stat_deviation": "‖S_m,B − S̄(t)‖₁ (local mini-batch)",
}


def _one_partition(rows: pd.DataFrame) -> str | None:
    partitions = rows["partition"].unique()
    return str(partitions[0]) if len(partitions) == 1 else None


def figure_rows(fig: Figure, summary: pd.DataFrame) -> pd.DataFrame:
    """The summary rows of the figure's experiments that match its ``where`` filters (a tuple
    of values keeps the rows whose key is any of them)."""
    rows = summary[in_experiments(summary, fig.experiments)]
    for key, value in fig.where:
        rows = rows[rows[key].isin(value) if isinstance(value, tuple) else rows[key] == value]
    return rows


def _panels(fig: Figure, rows: pd.DataFrame) -> dict:
    """make_figure's keywords for the panels, hue and log y of ``fig``."""
    partition = _one_partition(rows)
    panel_label = _SYMBOLS.get(partition) if fig.panel == "heterogeneity" else None
    return {"panel": fig.panel, "panel_values": fig.panel_values, "panel_label": panel_label,
            "logy": fig.logy, "hue": list(fig.hue), "title": fig.title or fig.name}


def _metric_lines(fig: Figure, rows: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """A curves figure with several metrics as ``y``: the rows once per metric, its name in a
    column ``metric`` (the lines' colour; the hue, their dash) and its value in ``value``."""
    frames = [rows.assign(metric=METRIC_NAMES.get(m, m), value=rows[m],
                          run_id=rows["run_id"] + ":" + m)  # a line per run and metric
              for m in fig.y]
    hue = ["metric", *fig.hue] if rows[fig.hue[0]].nunique() > 1 else ["metric"]
    return pd.concat(frames, ignore_index=True), {"y": "value", "hue": hue,
                                                  "ylabel": ", ".join(map(str, fig.y))}


def _curves_args(fig: Figure, rows: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    x = fig.x or "step"
    args = {"x": x, "y": fig.y, "xlabel": _CURVE_X_LABELS.get(x), **_panels(fig, rows)}
    if isinstance(fig.y, tuple):
        rows, metric = _metric_lines(fig, rows)
        args.update(metric)
    return rows, args


def _final_vs_args(fig: Figure, rows: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    partition = _one_partition(rows)
    x = fig.x or "heterogeneity"
    xlabel = _X_LABELS.get(partition, x) if x == "heterogeneity" else x
    return rows, {"x": x, "y": fig.y, "xlabel": xlabel, "logx": _LOGX[fig.logx],
                  **_panels(fig, rows)}


def _bars_args(fig: Figure, rows: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    return rows, {"x": fig.x, "y": fig.y, "ylabel": value_label(fig.y),
                  "order": dict(fig.orders), **_panels(fig, rows)}


# A kind drawn by make_figure: its rows and keywords from the figure and its rows.
_ARGS: dict[str, Callable[[Figure, pd.DataFrame], tuple[pd.DataFrame, dict]]] = {
    "curves": _curves_args,
    "final_vs": _final_vs_args,
    "bars": _bars_args,
}


def _plain(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    rows, args = _ARGS[fig.kind](fig, rows)
    return make_figure(fig.kind, rows, stem, **args)


def _parts(fig: Figure, summary: pd.DataFrame, stem: str | Path) -> list[Path]:
    parts = []
    for i, part in enumerate(fig.parts):
        rows, args = _ARGS[part.kind](part, figure_rows(part, summary))
        for key in ("panel", "panel_values", "panel_label", "title"):
            args.pop(key)
        parts.append(Part(part.kind, rows, part.title or f"({chr(ord('a') + i)})", args))
    return make_parts_figure(parts, stem, title=fig.title or fig.name)


def _heatmap(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    if rows.empty:
        raise ValueError(f"figure {stem}: no rows matched its selection")
    return make_heatmap(rows, stem, rows=fig.rows, cols=fig.cols, compare=fig.compare,
                        values=fig.compare_values, y=fig.y, order=dict(fig.orders),
                        title=fig.title or fig.name)


def _domains(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    if rows.empty:
        raise ValueError(f"figure {stem}: no rows matched its selection")
    assert fig.rows is not None and isinstance(fig.y, str)
    return make_domains(rows, stem, rows=fig.rows, domains=fig.domains, y=fig.y,
                        order=dict(fig.orders), title=fig.title or fig.name)


def _table(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    if rows.empty:
        raise ValueError(f"table {stem}: no rows matched its selection")
    return make_table(rows, stem, rows=fig.rows, cols=fig.cols, y=fig.y,
                      order=dict(fig.orders), title=fig.title or fig.name, extra=fig.extra)


def _tuning(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    if rows.empty:
        raise ValueError(f"table {stem}: no rows matched its selection")
    assert fig.rows is not None and fig.cols is not None and fig.select is not None
    return make_tuning_table(rows, stem, cells=[fig.rows, fig.cols], by=fig.select,
                             order=dict(fig.orders), title=fig.title or fig.name)


DRAW: dict[str, Callable[[Figure, pd.DataFrame, str | Path], list[Path]]] = {
    **dict.fromkeys(_ARGS, _plain),
    "heatmap": _heatmap,
    "domains": _domains,
    "table": _table,
    "tuning": _tuning,
}


def draw(fig: Figure, summary: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``fig``'s files under ``stem`` (see fednorm.plan.extensions) from the summary."""
    if fig.kind == "parts":  # each part selects its own rows
        return _parts(fig, summary, stem)
    rows = figure_rows(fig, summary)
    if fig.select is not None and fig.kind != "tuning":  # per cell, the lr chosen on val
        cells = [c for c in (fig.rows, fig.cols, fig.compare) if c is not None]
        rows = select_by_validation(rows, cells, by=fig.select)
    return DRAW[fig.kind](fig, rows, stem)


def draw_all(figures: Sequence[Figure], summary: pd.DataFrame, stems: Sequence[str | Path]
             ) -> list[Path]:
    """Draw each of ``figures`` under its stem, even when another fails; then raise
    RuntimeError naming every figure that could not be drawn and why (the tracebacks are
    logged). Returns the files written."""
    written, failed = [], []
    for fig, stem in zip(figures, stems, strict=True):
        try:
            paths = draw(fig, summary, stem)
        except Exception as error:  # the others are still drawn; the caller learns at the end
            log.exception("figure %s", fig.name)
            failed.append(f"{fig.name}: {error}")
            continue
        written += paths
        log.info("wrote %s", [str(p) for p in paths])
    if failed:
        raise RuntimeError("could not draw " + "; ".join(failed))
    return written
