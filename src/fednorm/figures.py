"""Draw one configured figure from the summary table."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from fednorm.config import FIELDS
from fednorm.plan import Figure
from fednorm.plots import (
    Part,
    make_domains,
    make_figure,
    make_heatmap,
    make_parts_figure,
    make_table,
    style,
)
from fednorm.plots.cells import DIVERGED_NOTE, Orders, cell_stats, percent, value_label, value_text
from fednorm.plots.improvement import make_improvement, make_profile
from fednorm.plots.save import save_table
from fednorm.plots.table import NO_RUN, SEEDS, cell_text, escape_cell, extra_text
from fednorm.results import in_experiments
from fednorm.tuning import (
    COMMON,
    EDGES,
    at_choice,
    at_common,
    choices,
    chosen_text,
    filled,
    grid_text,
    in_cell,
    select_by_validation,
    swept,
    tuned_keys,
    tuning_seeds,
)

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


# Kinds whose lines a varying key can tell apart (it joins the hue); the others refuse it
HUED = ("curves", "final_vs", "bars")


def averaged_keys(fig: Figure, rows: pd.DataFrame) -> list[str]:
    """The config keys that take more than one value among the runs of one of ``fig``'s cells
    (the runs that share its x, hue, panel, rows, cols, compare and seed): drawn as they are,
    their values would be averaged as if they were more seeds. A tuning table's swept keys
    are its subject, not such a key."""
    declared = {k for k in (fig.x, fig.panel, fig.rows, fig.cols, fig.compare, *fig.hue) if k}
    if fig.kind == "tuning":
        declared.update(tuned_keys(rows))
    runs = rows.drop_duplicates("run_id") if "run_id" in rows.columns else rows
    cell = [k for k in (*sorted(declared), "seed") if k in runs.columns]
    keys = [k for k in FIELDS if k in runs.columns and k not in declared and k != "seed"]
    if runs.empty or not keys:
        return []
    counts = (runs[[*cell, *keys]].astype(str).groupby(cell, dropna=False).nunique()
              if cell else runs[keys].astype(str).nunique().to_frame().T)
    return [k for k in keys if (counts[k] > 1).any()]


def kept_apart(fig: Figure, rows: pd.DataFrame) -> Figure:
    """``fig`` with every key that :func:`averaged_keys` finds added to its hue (curves,
    final_vs, bars: each value its own line or bar); ValueError naming the key for the other
    kinds, whose cells have no room for it."""
    extra = averaged_keys(fig, rows)
    if not extra:
        return fig
    if fig.kind not in HUED:
        values = sorted(map(str, rows[extra[0]].unique()))
        raise ValueError(f"figure {fig.name}: key '{extra[0]}' varies within its cells "
                         f"({', '.join(values)}) and is none of its axes; name it in rows, cols "
                         f"or where")
    log.warning("figure %s: %s vary within its lines: each value drawn apart (hue)",
                fig.name, extra)
    return dataclasses.replace(fig, hue=(*fig.hue, *extra))


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
        selected = figure_rows(part, summary)
        rows, args = _ARGS[part.kind](kept_apart(part, selected), selected)
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


def _improvement(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    if rows.empty:
        raise ValueError(f"table {stem}: no rows matched its selection")
    assert fig.rows is not None and fig.cols is not None and isinstance(fig.y, str)
    return make_improvement(rows, stem, rows=fig.rows, cols=fig.cols, baseline=fig.baseline,
                            y=fig.y, order=dict(fig.orders), title=fig.title or fig.name)


def _profile(fig: Figure, rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    if rows.empty:
        raise ValueError(f"figure {stem}: no rows matched its selection")
    assert fig.rows is not None and fig.cols is not None and isinstance(fig.y, str)
    return make_profile(rows, stem, rows=fig.rows, cols=fig.cols, y=fig.y,
                        order=dict(fig.orders), title=fig.title or fig.name)


DRAW: dict[str, Callable[[Figure, pd.DataFrame, str | Path], list[Path]]] = {
    **dict.fromkeys(_ARGS, _plain),
    "heatmap": _heatmap,
    "domains": _domains,
    "table": _table,
    "tuning": _tuning,
    "improvement": _improvement,
    "profile": _profile,
}


def draw(fig: Figure, summary: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``fig``'s files under ``stem`` (see fednorm.plan.extensions) from the summary."""
    if fig.kind == "parts":  # each part selects its own rows
        return _parts(fig, summary, stem)
    rows = figure_rows(fig, summary)
    if fig.select is not None and fig.kind != "tuning":  # per cell, the lr chosen on val
        cells = [c for c in (fig.rows, fig.cols, fig.compare) if c is not None]
        rows = select_by_validation(rows, cells, by=fig.select)
    return DRAW[fig.kind](kept_apart(fig, rows), rows, stem)


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


# ---------------------------------------------------------------------------------------------
# The tuning table: each method's choice beside its score at the common recipe.


def tuning_table(rows: pd.DataFrame, cells: Sequence[str], *, by: str = "val_accuracy",
                 y: str = "test_accuracy", order: Orders | None = None,
                 common: float = COMMON) -> pd.DataFrame:
    """One row per combination of the ``cells`` columns (in axis order, fednorm.plots.cells):
    the tuned keys' chosen values (:func:`choices`; ``chosen``: in words, ``grid``: what was
    swept), ``by`` (its mean over the tuning seeds at that choice; NaN where every value is
    ruled out), then ``y``'s ``mean``, ``std``, ``cell`` (the table's text) at the choice on
    the tuning seeds (``tuned_*``), on the seeds beyond them (``fresh_*``: the seeds that
    judge the claims) and at the common recipe on the tuning seeds (``common_*``), the chosen
    runs' ``n_seeds`` and ``n_diverged`` on the tuning seeds, and ``edge``; only the
    combinations that have runs. Accuracies in %."""
    cells = list(cells)
    rows = rows.reset_index(drop=True)
    if y == "test_accuracy" and "domain_accuracy" in rows.columns:
        # feature shift: the test as its claims read it, the mean over the domains (each
        # through its clients' models), as the validation accuracy is scored there
        rows = rows.assign(test_accuracy=rows["domain_accuracy"].where(
            rows["domain_accuracy"].notna(), rows["test_accuracy"]))
    over = tuned_keys(rows)
    chosen = choices(rows, cells, by, over).rename(columns={"score": by})
    chosen[by] = chosen[by].where(chosen[by] > float("-inf"))
    if percent(by):
        chosen[by] *= 100.0
    cell_rows = [in_cell(rows, cells, c) for _, c in chosen.iterrows()]
    chosen["chosen"] = [chosen_text(c, swept(part, over))
                        for (_, c), part in zip(chosen.iterrows(), cell_rows, strict=True)]
    chosen["grid"] = [grid_text(part, over) for part in cell_rows]
    out = chosen[[*cells, *over, "chosen", "grid", by, "edge"]]
    picked = at_choice(rows, chosen, cells, over)
    tuning = tuning_seeds(filled(rows, over), cells, over)
    seen = tuning.loc[picked.index].to_numpy()
    parts = (("tuned", picked[seen]), ("fresh", picked[~seen]),
             ("common", at_common(rows[tuning.to_numpy()], over, common)))
    for name, part in parts:
        out = out.merge(_stats(part, cells, name, y, order), on=cells, how="left")
    # in the axes' order; a combination that no run has (a method not tuned in a setting) is
    # left out: five settings by sixteen methods would be mostly empty rows
    levels = cell_stats(rows, cells, y=by, order=order)[cells]
    out = levels.merge(out, on=cells, how="inner")
    for name in ("tuned", "fresh", "common"):
        out[f"{name}_cell"] = out[f"{name}_cell"].fillna(NO_RUN)
    for count in ("n_seeds", "n_diverged", "fresh_seeds"):
        out[count] = out[count].fillna(0).astype(int)
    out[["edge", "chosen", "grid"]] = out[["edge", "chosen", "grid"]].fillna("")
    return out


def _stats(part: pd.DataFrame, cells: Sequence[str], name: str, y: str,
           order: Orders | None) -> pd.DataFrame:
    """``name``_mean, _std, _cell per cell of ``part`` (the tuned part's seeds and diverged
    counts as n_seeds, n_diverged; the fresh part's seeds as fresh_seeds)."""
    columns = [*cells, f"{name}_mean", f"{name}_std", f"{name}_cell"]
    counts = {"tuned": ["n_seeds", "n_diverged"], "fresh": ["fresh_seeds"]}.get(name, [])
    if part.empty:
        return pd.DataFrame(columns=[*columns, *counts])
    stats = cell_stats(part, cells, y=y, order=order)
    stats[f"{name}_cell"] = [cell_text(m, s, n, d, y=y) for m, s, n, d in zip(
        stats["mean"], stats["std"], stats["n_seeds"], stats["n_diverged"], strict=True)]
    stats = stats.rename(columns={"mean": f"{name}_mean", "std": f"{name}_std",
                                  **({"n_seeds": "fresh_seeds"} if name == "fresh" else {})})
    return stats[[*columns, *counts]]


def tuning_markdown(data: pd.DataFrame, cells: Sequence[str], *, by: str = "val_accuracy",
                    title: str = "") -> str:
    """:func:`tuning_table` as a Markdown table: the ``cells`` columns (their values' labels),
    what was swept, the chosen values (↑ / ↓: at the sweep's edge), ``by`` at them, the test
    accuracy at them on the tuning seeds and on fresh seeds, at the common recipe, the
    seeds."""
    cells = list(cells)
    header = [*(c.replace("_", " ") for c in cells), "swept", "chosen",
              f"{by.replace('_', ' ')} (chosen)", "test (chosen, tuning seeds)",
              "test (chosen, fresh seeds)", f"test (lr × {COMMON:g}, common recipe)", SEEDS]
    lines = ["| " + " | ".join(map(escape_cell, header)) + " |",
             "|" + "---|" * (len(cells) + 2) + "---:|" * (len(header) - len(cells) - 2)]
    for row in data.itertuples(index=False):
        values = row._asdict()
        seeds = f"{values['n_seeds']} + {values['fresh_seeds']}"
        line = [*(style.label(value_text(values[c])) for c in cells), values["grid"] or NO_RUN,
                values["chosen"] or NO_RUN, extra_text(values[by], by), values["tuned_cell"],
                values["fresh_cell"], values["common_cell"], seeds]
        lines.append("| " + " | ".join(map(escape_cell, line)) + " |")
    notes = [f"{DIVERGED_NOTE}."] if data["n_diverged"].any() else []
    notes.append("Test: under feature shift the mean over the domains (domain_accuracy).")
    notes.append(f"The values are chosen on {by.replace('_', ' ')} (images held out of the "
                 "training set, scored as the test is), never on the test set, on the tuning "
                 "seeds (seeds: tuning + fresh); the claims are judged on the fresh seeds, "
                 "which the choice never saw.")
    edges = sorted({e.split(":")[1] for es in data["edge"] for e in str(es).split(",") if e})
    if edges:
        notes.append("; ".join(f"{EDGES[e]}: the {'largest' if e == 'high' else 'smallest'} "
                               f"value swept" for e in edges)
                     + " (the best may lie beyond it: widen the sweep).")
    head = [f"**{title}**", ""] if title else []
    return "\n".join([*head, *lines, "", *notes]) + "\n"


def make_tuning_table(rows: pd.DataFrame, stem: str | Path, *, cells: Sequence[str],
                      by: str = "val_accuracy", order: Orders | None = None,
                      title: str = "") -> list[Path]:
    """Write ``stem``.csv (:func:`tuning_table`) and ``stem``.md (:func:`tuning_markdown`)."""
    data = tuning_table(rows, cells, by=by, order=order)
    return save_table(data, tuning_markdown(data, cells, by=by, title=title), stem)
