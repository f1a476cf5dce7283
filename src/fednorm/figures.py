"""Draw one configured figure from the summary table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fednorm.config import Figure
from fednorm.plots import make_figure

_X_LABELS = {"gamma": "heterogeneity γ (1 = iid)", "dirichlet": "Dirichlet α (small = non-iid)"}
_SYMBOLS = {"gamma": "γ", "dirichlet": "Dirichlet α"}  # heterogeneity's meaning per partition


def _one_partition(rows: pd.DataFrame) -> str | None:
    partitions = rows["partition"].unique()
    return str(partitions[0]) if len(partitions) == 1 else None


def figure_rows(fig: Figure, summary: pd.DataFrame) -> pd.DataFrame:
    """The summary rows of the figure's experiments that match its ``where`` filters (a tuple
    of values keeps the rows whose key is any of them)."""
    groups = summary["figure_group"].astype(str).str.split("|")
    rows = summary[groups.apply(lambda g: any(e in g for e in fig.experiments))]
    for key, value in fig.where:
        rows = rows[rows[key].isin(value) if isinstance(value, tuple) else rows[key] == value]
    return rows


def draw(fig: Figure, summary: pd.DataFrame, stem: str | Path) -> list[Path]:
    rows = figure_rows(fig, summary)
    partition = _one_partition(rows)
    panel_label = _SYMBOLS.get(partition) if fig.panel == "heterogeneity" else None
    panels = {"panel": fig.panel, "panel_values": fig.panel_values, "panel_label": panel_label,
              "logy": fig.logy, "hue": list(fig.hue)}
    title = fig.title or fig.name
    if fig.kind == "final_vs":
        x = fig.x or "heterogeneity"
        xlabel = _X_LABELS.get(partition, x) if x == "heterogeneity" else x
        return make_figure("final_vs", rows, stem, title=title, x=x, y=fig.y, xlabel=xlabel,
                           **panels)
    return make_figure("curves", rows, stem, title=title, x=fig.x or "step", y=fig.y, **panels)
