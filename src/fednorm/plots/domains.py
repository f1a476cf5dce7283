"""Feature shift at a glance: one heatmap, a row per method and a column per domain (the final
accuracy on that domain's test set), then one for a metric over the domains (their mean,
``domain_accuracy``), each cell the mean over seeds as :func:`fednorm.plots.cells.cell_stats`
gives it. Each row's worst domain (its least mean among the domain columns) is boxed.

The cells are drawn as the heatmap's (:func:`fednorm.plots.heatmap.draw_panel`): one sequential
colour scale, '†' where a seed diverged, grey without any run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from fednorm.metrics import DOMAINS, domain_metric
from fednorm.plots import style
from fednorm.plots.cells import Orders, cell_stats, percent, seeds_text
from fednorm.plots.heatmap import VALUE_CMAP, cell_notes, draw_panel, limits
from fednorm.plots.save import save_figure
from fednorm.results import require_columns

DOMAIN = "domain"  # the data's column of the figure's columns: a domain, or the summary metric
WORST = "#d62728"  # the box around a row's worst domain
# How a metric over the domains heads its column
SUMMARY_LABELS = {"domain_accuracy": "mean", "worst_domain_accuracy": "worst",
                  "test_accuracy": "all test"}


def present_domains(df: pd.DataFrame) -> list[str]:
    """The domains (in the order of fednorm.metrics.DOMAINS) whose accuracy column ``df`` has
    with at least one number."""
    return [d for d in DOMAINS
            if domain_metric(d) in df.columns and df[domain_metric(d)].notna().any()]


def domain_data(
    df: pd.DataFrame,
    *,
    rows: str = "method",
    domains: Sequence[str] | None = None,
    y: str = "domain_accuracy",
    order: Orders | None = None,
    last: int = 1,
) -> pd.DataFrame:
    """One row per (row, column) cell, tidy: ``rows``, ``domain`` (each of ``domains``, default
    :func:`present_domains`, then ``y``), ``metric`` (the summary column behind it),
    ``mean``, ``std`` (over seeds, in % for an accuracy), ``n_seeds``, ``n_diverged``, and
    ``worst``: the row's domain cell with the least mean (never the ``y`` column).

    Rows in ``order[rows]`` when given, else the methods' order (fednorm.plots.style.order).
    """
    domains = list(present_domains(df) if domains is None else domains)
    if not domains:
        raise ValueError("no domain's accuracy in the rows (columns test_accuracy_<domain>)")
    columns = {**{d: domain_metric(d) for d in domains}, y: y}
    require_columns(df, [rows, *columns.values()])
    order = {rows: style.order(df[rows]), **(order or {})}
    data = pd.concat([cell_stats(df, [rows], y=metric, order=order, last=last)
                      .assign(**{DOMAIN: name, "metric": metric})
                      for name, metric in columns.items()], ignore_index=True)
    cells = data[data[DOMAIN].isin(domains)].dropna(subset=["mean"])
    data["worst"] = data.index.isin(cells.groupby(rows, sort=False)["mean"].idxmin())
    return data[[rows, DOMAIN, "metric", "mean", "std", "n_seeds", "n_diverged", "worst"]]


def domains_figure(
    df: pd.DataFrame,
    *,
    rows: str = "method",
    domains: Sequence[str] | None = None,
    y: str = "domain_accuracy",
    order: Orders | None = None,
    title: str = "",
    last: int = 1,
) -> tuple[Figure, pd.DataFrame]:
    """The one-axes heatmap of :func:`domain_data`'s numbers (returned with it): rows labelled
    by method, columns by domain (fednorm.plots.style.DOMAIN_LABELS), the ``y`` column set
    off by a white line, each row's worst domain boxed in WORST."""
    data = domain_data(df, rows=rows, domains=domains, y=y, order=order, last=last)
    names, methods = list(dict.fromkeys(data[DOMAIN])), list(dict.fromkeys(data[rows]))
    fig = Figure(figsize=(0.85 * len(names) + 3.2, 0.36 * len(methods) + 1.7),
                 layout="constrained")
    ax = fig.subplots()
    draw_panel(ax, data, rows=rows, cols=DOMAIN, cmap=colormaps[VALUE_CMAP],
               norm=Normalize(*limits(data["mean"])), signed=False,
               digits=1 if percent(y) else 3, unit="%" if percent(y) else "")
    ax.set_xticks(range(len(names)), [style.DOMAIN_LABELS.get(n, SUMMARY_LABELS.get(
        n, n.replace("_", " "))) for n in names], rotation=30, ha="right")
    ax.set_yticks(range(len(methods)), [style.label(m) for m in methods])
    ax.set_xlabel("")
    ax.axvline(len(names) - 1.5, color="white", linewidth=4)
    for _, cell in data[data["worst"]].iterrows():
        i, j = methods.index(cell[rows]), names.index(cell[DOMAIN])
        ax.add_patch(Rectangle((j - 0.46, i - 0.44), 0.92, 0.88, fill=False, edgecolor=WORST,
                               linewidth=2.2))
    notes = [f"mean over {seeds_text(data['n_seeds'])} seeds; red box: each row's worst domain",
             *cell_notes(data)]
    fig.supxlabel("; ".join(notes), fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig, data


def make_domains(df: pd.DataFrame, stem: str | Path, **kw: Any) -> list[Path]:
    """:func:`domains_figure` saved as ``stem``.pdf/.png/.csv (the CSV: :func:`domain_data`)."""
    return save_figure(*domains_figure(df, **kw), stem)
