"""A results folder as tidy frames, for notebooks and for the figure and claims code alike.

A results folder (``results/``, ``results/quick/``, ``.test/results/``) holds ``summary.csv``
(one row per run x evaluation point, :mod:`fednorm.summarize`) and one folder per run,
``runs/<run_id>/`` (``metrics.csv``, ``norm_error.csv``, ``run.json``, ...). This module reads
them and answers the questions every figure asks, in one place:

- :func:`load_summary`, :func:`load_norm_error` (per evaluation point x BN layer), each row
  with its run's config columns (:func:`run_table`);
- :func:`select`: the rows of some experiments whose keys equal given values; an unknown
  experiment, key or value is an error naming it and what is allowed;
- :func:`run_values`: a run's value of a metric at its final evaluation point (the mean of its
  last ``last`` non-NaN values, by step) or its best (``at="max"``); :func:`final_points`: that,
  for every metric, one row per run with its config columns;
- :func:`seed_stats`: mean, std (ddof = 1), min and max over seeds of the runs' values, per
  group of keys. **A diverged run** (status ``diverged``) has no value: it is left out of the
  statistics and counted in ``n_diverged``, so a seed that diverged is never averaged in and
  never silently dropped. ``n_seeds`` counts the runs that contribute a number;
- :func:`settling`: whether a group of runs has settled at the end of its budget (its seed
  mean gains at most max(1 point, its seed spread) over the last quarter of the budget), the
  rule the claims ledgers judge final and best accuracies by.

Values are as the summary stores them (an accuracy is a fraction); the figures show % where
they say so.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fednorm.config import FIELDS, Paths
from fednorm.metrics import RUN_METRICS, RUN_STATUS, SUMMARY_METRICS

AT = {"final": "last", "max": "max"}  # a run's value: its last evaluation point(s), or its best
SUMMARY = "summary.csv"
NORM_ERROR = "norm_error.csv"  # per run: step, layer, mean_error, var_error (fednorm.fl.train)


# ---------------------------------------------------------------------------------------------
# Reading a results folder.


def load_summary(results: str | Path) -> pd.DataFrame:
    """``<results>/summary.csv``; FileNotFoundError naming the path when it is missing."""
    path = Path(results) / SUMMARY
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: run the pipeline first (e.g. `make quick` writes "
                                "results/quick/summary.csv), or pass the results folder that "
                                "holds summary.csv")
    return pd.read_csv(path)


def run_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run: ``run_id`` and every column of the summary that is not a metric of an
    evaluation point (the config keys, ``figure_group``, ``scenario``, ``split``, ``regime``,
    ``status``, ``wall_time_s``)."""
    columns = [c for c in summary.columns if c not in SUMMARY_METRICS or c in RUN_STATUS]
    return summary.drop_duplicates("run_id")[columns].reset_index(drop=True)


def load_run_files(results: str | Path, name: str,
                   summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every run's ``runs/<run_id>/<name>`` (a CSV) stacked, each row with its run's config
    columns (:func:`run_table`) after its own; the runs are the summary's (default: read from
    ``results``). A run without the file, or without rows in it, contributes no row."""
    runs = run_table(load_summary(results) if summary is None else summary)
    paths = Paths(results=str(results))
    files = {r: Path(paths.run_dir(r)) / name for r in runs["run_id"]}
    frames = [pd.read_csv(path).assign(run_id=r) for r, path in files.items() if path.is_file()]
    frames = [f for f in frames if not f.empty]  # e.g. a run without BN layers: a header only
    if not frames:
        raise FileNotFoundError(f"no run under {results}/runs has rows in its {name}")
    return pd.concat(frames, ignore_index=True).merge(runs, on="run_id", how="left")


def load_norm_error(results: str | Path, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """The normalization error of each BN layer at each evaluation point (see
    :mod:`fednorm.fl.norm_error`): ``step``, ``layer``, ``mean_error``, ``var_error``,
    ``run_id`` and the run's config columns."""
    return load_run_files(results, NORM_ERROR, summary)


# ---------------------------------------------------------------------------------------------
# Selecting runs.


def require_columns(df: pd.DataFrame, columns: Iterable[str]) -> None:
    """Raise ValueError naming the columns of ``columns`` missing from ``df``."""
    missing = [c for c in dict.fromkeys(columns) if c not in df.columns]
    if missing:
        raise ValueError(f"missing columns {missing}; have {list(df.columns)}")


def experiments(df: pd.DataFrame) -> list[str]:
    """The experiments of ``df``'s runs (``figure_group`` joins a run's by '|'), sorted."""
    return sorted({e for group in df["figure_group"].astype(str) for e in group.split("|")})


def in_experiments(df: pd.DataFrame, names: Iterable[str]) -> pd.Series:
    """The rows of ``df`` whose run belongs to any of the experiments ``names``."""
    wanted = set(names)
    groups = df["figure_group"].astype(str).str.split("|")
    return groups.apply(lambda g: not wanted.isdisjoint(g)).astype(bool)


def varying_keys(df: pd.DataFrame, but: Sequence[str] = ("seed",)) -> list[str]:
    """The config keys (RunConfig's fields, in their order) that take more than one value
    among ``df``'s rows, except ``but``: what tells its runs apart beyond their seeds."""
    return [k for k in FIELDS if k in df.columns and k not in but
            and df[k].nunique(dropna=False) > 1]


def matches(column: pd.Series, value: Any) -> pd.Series:
    """The rows of ``column`` equal to ``value``: None matches an empty value (NaN); numbers
    compare to a relative 1e-12 (a CSV may parse a decimal one unit in the last place away);
    anything else exactly."""
    if value is None:
        return column.isna()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        numeric = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
        return pd.Series(np.isclose(numeric, float(value), rtol=1e-12, atol=0.0),
                         index=column.index)
    return column == value


def values_of(column: pd.Series) -> list[Any]:
    """The distinct values of ``column``, sorted (numbers before an empty value)."""
    present = column.drop_duplicates()
    if pd.api.types.is_numeric_dtype(present):
        return present.sort_values().tolist()
    return sorted(present.tolist(), key=str)


def select(df: pd.DataFrame, experiment: str | Sequence[str] | None = None,
           **where: Any) -> pd.DataFrame:
    """The rows of ``df`` (the summary, or any frame with its columns) of the runs of
    ``experiment`` (a name or several) whose columns equal ``where``'s values (a list or tuple:
    any of them; None: an empty value, e.g. ``heterogeneity=None`` for IID).

    Raises ValueError naming the experiment, key or value that selects nothing, with what is
    allowed: the experiments, columns, or the key's values among the rows selected so far.
    """
    if experiment is not None:
        require_columns(df, ["figure_group"])
        names = [experiment] if isinstance(experiment, str) else list(experiment)
        known = experiments(df)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"experiment {unknown[0]!r} has no run; allowed: one of {known}")
        df = df[in_experiments(df, names)]
    for key, value in where.items():
        if key not in df.columns:
            raise ValueError(f"key {key!r} is not a column; allowed: {list(df.columns)}")
        wanted = list(value) if isinstance(value, list | tuple) else [value]
        for one in wanted:
            if not matches(df[key], one).any():
                raise ValueError(f"key {key!r} has no row with value {one!r}; allowed: one of "
                                 f"{values_of(df[key])}")
        mask = pd.Series(False, index=df.index)
        for one in wanted:
            mask |= matches(df[key], one)
        df = df[mask]
    return df


# ---------------------------------------------------------------------------------------------
# A run's value, and statistics over seeds.


def run_values(df: pd.DataFrame, keys: Sequence[str] = (), *, y: str = "test_accuracy",
               at: str = "final", last: int = 1, per: Sequence[str] = ("run_id",)
               ) -> pd.DataFrame:
    """One row per run (sorted): its ``per`` columns, the ``keys`` columns, ``diverged`` and
    ``value``.

    ``per`` names the columns that tell one series of evaluation points from another: a run
    (``run_id``), or a run and a layer in a frame of :func:`load_norm_error`. ``value`` is, of
    the series' non-NaN ``y`` ordered by step, the mean of the last ``last`` (``at="final"``)
    or the largest (``at="max"``); NaN for a diverged run (its status is ``diverged``) and for
    a series without any ``y``. Raises ValueError for an unknown ``at``, ``last`` < 1, a
    missing column, or a key that varies within a series.
    """
    if at not in AT:
        raise ValueError(f"at has value {at!r}; allowed: one of {list(AT)}")
    if last < 1:
        raise ValueError(f"last has value {last}; allowed: an integer >= 1")
    per = list(per)
    keys = [k for k in keys if k not in per]
    require_columns(df, [*per, "status", "step", y, *keys])
    series = df.groupby(per, sort=True, dropna=False)
    if keys:
        varying = series[keys].nunique(dropna=False).max()
        if (varying > 1).any():
            raise ValueError(f"{list(varying[varying > 1].index)} vary within a run")
    runs = series[keys].first() if keys else pd.DataFrame(index=series.size().index)
    runs["diverged"] = series["status"].agg(lambda s: s.eq("diverged").any()).astype(bool)
    measured = df.dropna(subset=[y]).sort_values("step", kind="stable")
    measured = measured.groupby(per, dropna=False)[y]
    value = measured.agg(lambda s: s.tail(last).mean()) if at == "final" else measured.max()
    runs["value"] = value.reindex(runs.index).where(~runs["diverged"])
    return runs.reset_index()


def over_seeds(frame: pd.DataFrame, keys: Sequence[str], value: str) -> pd.DataFrame:
    """Per group of ``keys`` (sorted; no keys: one group of every row): ``mean``, ``std``
    (ddof = 1), ``min``, ``max`` and ``n_seeds`` (the count) of the non-NaN ``value``s."""
    column = frame[value]
    grouped = column.groupby([frame[k] for k in keys] or np.zeros(len(frame)), sort=True)
    stats = grouped.agg(mean="mean", std="std", min="min", max="max", n_seeds="count")
    return stats.reset_index(drop=not keys)


def seed_stats(df: pd.DataFrame, keys: Sequence[str], *, y: str = "test_accuracy",
               at: str = "final", last: int = 1, per: Sequence[str] = ("run_id",)
               ) -> pd.DataFrame:
    """Per group of ``keys`` (no keys: all of ``df``'s runs in one): :func:`over_seeds` of the
    runs' :func:`run_values` (``per``: see there) and ``n_diverged``, the diverged runs (left
    out of the statistics, never of the count)."""
    keys = list(keys)
    runs = run_values(df, keys, y=y, at=at, last=last, per=per)
    stats = over_seeds(runs, keys, "value")
    if not keys:
        return stats.assign(n_diverged=int(runs["diverged"].sum()))
    diverged = runs.groupby(keys)["diverged"].sum().rename("n_diverged").astype(int)
    return stats.merge(diverged.reset_index(), on=keys, how="left")


def final_points(summary: pd.DataFrame, *, at: str = "final", last: int = 1,
                 metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run: its config columns (:func:`run_table`), ``diverged``, and each of
    ``metrics`` (default: those of RUN_METRICS the summary has) as :func:`run_values` gives
    it."""
    if metrics is None:
        metrics = [m for m in RUN_METRICS if m in summary.columns]
    out = run_table(summary).set_index("run_id")
    out["diverged"] = out["status"].eq("diverged")
    for metric in metrics:
        out[metric] = run_values(summary, y=metric, at=at, last=last).set_index("run_id")["value"]
    return out.reset_index()


LAST_PART = 0.25  # the end of a budget that settling looks at: its last quarter
SETTLED_FLOOR = 0.01  # 1 point of accuracy (as the summary stores it: a fraction)


def settling(df: pd.DataFrame, keys: Sequence[str] = (), *, y: str = "test_accuracy",
             at: str = "final", floor: float = SETTLED_FLOOR, part: float = LAST_PART
             ) -> pd.DataFrame:
    """Per group of ``keys`` (no keys: one group of every run): has its seed mean settled?

    A run's *gain* is its value ``at`` the end (:func:`run_values`: the final point, or the
    best) less that value over its evaluation points up to (1 − ``part``) of its last
    evaluated step (the last quarter of its budget). A group's ``gain`` is the mean of its
    runs' gains (the gain of their seed mean), its ``spread`` the std (ddof 1) of their values
    (NaN with one seed), and it has ``settled`` when gain ≤ max(``floor``, spread). A
    diverged run is left out (it has no value); a group with no gain to measure (every run
    diverged, or evaluated only at its end) counts as settled: nothing shows it climbing.
    Returns ``keys``, ``gain``, ``spread``, ``n_seeds`` and ``settled``.
    """
    keys = list(keys)
    runs = run_values(df, keys, y=y, at=at)
    measured = df[df[y].notna()]
    end = measured.groupby("run_id")["step"].transform("max")
    early = run_values(measured[measured["step"] <= (1 - part) * end], y=y, at=at)
    before = early.set_index("run_id")["value"].reindex(runs["run_id"]).to_numpy()
    runs["gain"] = runs["value"] - before
    grouped = runs.groupby([runs[k] for k in keys] or np.zeros(len(runs)), sort=True)
    out = grouped.agg(gain=("gain", "mean"), spread=("value", "std"),
                      n_seeds=("value", "count")).reset_index(drop=not keys)
    out["settled"] = ~(out["gain"] > np.maximum(floor, out["spread"].fillna(0.0)))
    return out
