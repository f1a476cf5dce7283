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
  last ``last`` non-NaN values, by step), its best (``at="max"``), or the mean of its
  evaluations over the last quarter of its budget after its last lr drop (``at="window"``:
  the points :func:`settling` tests, so the value and the settling look at one window);
  :func:`final_points`: that, for every metric, one row per run with its config columns;
- :func:`seed_stats`: mean, std (ddof = 1), min and max over seeds of the runs' values, per
  group of keys. **A diverged run** (status ``diverged``) has no value: it is left out of the
  statistics and counted in ``n_diverged``, so a seed that diverged is never averaged in and
  never silently dropped. ``n_seeds`` counts the runs that contribute a number;
- :func:`settling`: whether a group of runs is still climbing at the end of its budget: a
  one-sided t test (α = 0.05) that the slope of its runs over the last quarter of the budget
  (after the last lr drop; one intercept per run) gains more than 1 point there; a group that
  the test does not show climbing has settled, and ``reach``, the upper bound of what it could
  still gain over one more window. The rule the claims ledgers judge accuracies by.

Values are as the summary stores them (an accuracy is a fraction); the figures show % where
they say so.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.config import FIELDS, Paths
from fednorm.metrics import RUN_METRICS, RUN_STATUS, SUMMARY_METRICS, TEXT_COLUMNS

# A run's value (:func:`run_values`), as a ledger names it: its last evaluation point(s), its best,
# or the mean of its evaluations in its settling window (the last quarter of its budget)
AT = {"final": "final", "max": "best", "window": "last-quarter mean"}
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
    return pd.read_csv(path, dtype=TEXT_COLUMNS)


def run_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run: ``run_id`` and every column of the summary that is not a metric of an
    evaluation point (the config keys, ``figure_group``, ``scenario``, ``split``, ``regime``,
    ``status``, ``wall_time_s``, ``engine_revision``)."""
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
    the series' non-NaN ``y`` ordered by step, the mean of the last ``last`` (``at="final"``),
    the largest (``at="max"``), or the mean over its settling window (``at="window"``: the
    points :func:`window_points` picks, each run's last quarter of its budget after its last
    lr drop, at least its last 2 points after the drop; a series with a single point after
    the drop: that point; ``last`` is not used); NaN for a diverged run (its status is
    ``diverged``) and for a series without any ``y``. Raises ValueError for an unknown
    ``at``, ``last`` < 1, a missing column, or a key that varies within a series.
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
    if at == "window":
        points = window_points(df, y, per=per)
        value = points.groupby(per, dropna=False)[y].mean().combine_first(measured.last())
    else:
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
ALPHA = 0.05  # the level of settling's one-sided t test


def lr_milestones(value: Any) -> tuple[int, ...]:
    """A run's ``lr_milestones`` as steps, from any way a frame holds them: the summary's
    text (:func:`fednorm.summarize.config_columns` writes a list as ``'[100, 200]'``, ``'[]'``
    for none), a list or tuple (a frame built from a RunConfig), one number, or empty (None,
    NaN: a frame without the key). Raises ValueError naming a value that is not steps."""
    if isinstance(value, str):
        parts = re.split(r"[\s,]+", value.strip().strip("[]()"))
        items: list[Any] = [p for p in parts if p]
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        items = [] if pd.isna(value) else [value]
    try:
        steps = [float(v) for v in items]
    except (TypeError, ValueError):
        steps = [math.nan]
    if not all(math.isfinite(v) and v == int(v) and v >= 0 for v in steps):
        raise ValueError(f"lr_milestones has value {value!r}; allowed: a list of steps such as "
                         "'[100, 200]'")
    return tuple(int(v) for v in steps)


def last_drop(rows: pd.DataFrame) -> pd.Series:
    """Per run of ``rows`` (by ``run_id``): its last lr milestone before its last step in
    ``rows``; -inf for a run without one, or for a frame without ``lr_milestones``."""
    run = rows.groupby("run_id")
    ends = run["step"].max()
    if "lr_milestones" not in rows.columns:
        return pd.Series(-math.inf, index=ends.index)
    marks = run["lr_milestones"].first().reindex(ends.index)
    return pd.Series([max((m for m in lr_milestones(v) if m < e), default=-math.inf)
                      for v, e in zip(marks, ends, strict=True)], index=ends.index)


def window_points(df: pd.DataFrame, y: str, part: float = LAST_PART,
                  per: Sequence[str] = ("run_id",)) -> pd.DataFrame:
    """The rows of ``df``'s non-diverged runs, with a ``y``, in each run's settling window.

    A run's window ends at its last evaluated step (``end``) and starts at (1 − ``part``) x end
    and after its last lr milestone m < end: the evaluation at step m follows steps 0 ... m − 1,
    all at the old rate (RunConfig.lr_at: step ≥ m takes the new one), so the window takes
    only points after m, and the jump a drop makes is never inside it. A run with fewer than
    2 points there keeps its last 2 after m; one with fewer, none. ``per``: the columns of one
    series of points (a run; a run and a layer: see :func:`run_values`), each windowed alone.
    """
    per = list(per)
    dead = df["run_id"].isin(df.loc[df["status"].eq("diverged"), "run_id"])
    rows = df[df[y].notna() & ~dead]
    series = [rows[c] for c in per]
    end = rows.groupby(series, dropna=False)["step"].transform("max")
    drop = last_drop(rows).reindex(rows["run_id"]).to_numpy()
    after = rows["step"] > drop
    inside = after & (rows["step"] >= (1 - part) * end)
    from_end = rows["step"].where(after).groupby(series, dropna=False).rank(ascending=False)
    enough = inside.groupby(series, dropna=False).transform("sum") >= 2
    kept = rows[inside.where(enough, from_end <= 2)]
    return kept[kept.groupby(per, dropna=False)["step"].transform("count") >= 2]


def trend(points: pd.DataFrame, group: pd.Series, y: str) -> pd.DataFrame:
    """Per ``group`` (a label per row) of window points (:func:`window_points`): the
    least-squares slope of ``y`` on ``step`` with one intercept per run, and its standard
    error, by within-run centring: slope = Σ(x − x̄_r)(y − ȳ_r) / Σ(x − x̄_r)², s² = Σe² / df
    with df = N − R − 1 (N points, R runs), SE = s / √Σ(x − x̄_r)² (NaN where df < 1).
    Returns, indexed by group, ``slope``, ``se``, ``df`` and ``window``: the mean over the runs
    of the length of their window in steps (its last point's step less its first's)."""
    run = points.groupby("run_id")
    x = points["step"] - run["step"].transform("mean")
    z = points[y] - run[y].transform("mean")
    sums = pd.DataFrame({"xx": x * x, "xz": x * z}).groupby(group).sum()
    slope = sums["xz"] / sums["xx"]
    residual = z - x * group.map(slope)
    runs = group.groupby(points["run_id"]).first()
    df = group.value_counts() - runs.value_counts() - 1
    se = np.sqrt((residual**2).groupby(group).sum() / df.where(df >= 1) / sums["xx"])
    span = run["step"].max() - run["step"].min()
    return pd.DataFrame({"slope": slope, "se": se, "df": df, "window": span.groupby(runs).mean()})


def climbing(gain: pd.Series, se: pd.Series, df: pd.Series, floor: float, alpha: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The one-sided t test of H0: gain ≤ ``floor`` against gain > floor, at level ``alpha``:
    its p and whether it rejects, (gain − floor) / se > t_{1−α, df}. A zero ``se`` (the points
    on a line) makes t ±∞ by the sign of gain − floor; where df < 1 (no SE) the gain alone
    decides (it climbs when gain > floor); a NaN gain (no slope) never climbs."""
    excess = (gain - floor).to_numpy(dtype=float)
    se, df = se.to_numpy(dtype=float), df.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se == 0, np.sign(excess) * np.inf, excess / se)
    tested = df >= 1
    p = np.where(tested, stats.t.sf(t, np.where(tested, df, 1)), np.nan)
    rejects = t > stats.t.ppf(1 - alpha, np.where(tested, df, 1))
    return p, np.where(tested, rejects, excess > 0)


def reach(gain: pd.Series, se: pd.Series, df: pd.Series, alpha: float) -> np.ndarray:
    """The upper (1 − ``alpha``) bound of a group's gain over one more window of its budget, had
    it gone on as it went in its last one: gain + t_{1−α, df} x se; where df < 1 or the SE is
    not finite (no test), the gain itself (as :func:`climbing` decides on it); NaN where the
    gain is (no slope)."""
    gain = gain.to_numpy(dtype=float)
    se, df = se.to_numpy(dtype=float), df.to_numpy(dtype=float)
    tested = (df >= 1) & np.isfinite(se)
    margin = stats.t.ppf(1 - alpha, np.where(tested, df, 1)) * np.where(tested, se, 0.0)
    return gain + margin


def settling(df: pd.DataFrame, keys: Sequence[str] = (), *, y: str = "test_accuracy",
             at: str = "final", floor: float = SETTLED_FLOOR, part: float = LAST_PART,
             alpha: float = ALPHA) -> pd.DataFrame:
    """Per group of ``keys`` (no keys: one group of every run): is it still climbing at the
    end of its budget, or has it settled?

    The group's window points (:func:`window_points`: each run's last ``part`` of its budget,
    after its last lr drop) give the least-squares slope of ``y`` on step, one intercept per
    run (:func:`trend`); ``gain`` = slope x ``window`` (the runs' mean window length, in steps)
    is what it gains over the window, ``gain_se`` its standard error. It is *climbing* when
    the one-sided t test of that slope (:func:`climbing`; ``p``, ``df`` = N − R − 1) rejects
    H0: gain ≤ ``floor`` (1 point) at α = ``alpha``; ``settled`` = not climbing, i.e. not
    shown to gain more than the floor (not a proof of a plateau: no equivalence test);
    ``reach`` (:func:`reach`) bounds what it could gain over one more window. The
    test assumes the residuals around a linear trend within the window independent and
    Gaussian, with one variance across the group's runs. Without a test: df < 1 (one run,
    two points) climbs when gain > floor, as a zero SE does; a group without window points
    (every run diverged, evaluated only at its end, or without two points after its last
    drop) has gain NaN and settles: nothing shows it climbing.

    The trend is of ``y`` itself whatever ``at`` is (a running best has no independent
    residuals); ``at`` picks the runs' values (:func:`run_values`) behind ``spread`` (their
    std, ddof 1; NaN with one seed) and ``n_seeds`` (their count). A diverged run is left out
    of all of them. Returns ``keys``, ``gain``, ``gain_se``, ``df``, ``p``, ``window``,
    ``spread``, ``n_seeds``, ``settled`` and ``reach``.
    """
    keys = list(keys)
    runs = run_values(df, keys, y=y, at=at)
    label = runs.groupby(keys, dropna=False).ngroup() if keys else pd.Series(0, runs.index)
    points = window_points(df, y, part)
    group = points["run_id"].map(pd.Series(label.to_numpy(), index=runs["run_id"]))
    grouped = runs.groupby(label)
    out = grouped[keys].first()
    fit = trend(points, group, y).reindex(out.index)
    out["gain"], out["gain_se"] = fit["slope"] * fit["window"], fit["se"] * fit["window"]
    out["p"], rising = climbing(out["gain"], out["gain_se"], fit["df"], floor, alpha)
    out = out.assign(df=fit["df"], window=fit["window"], spread=grouped["value"].std(),
                     n_seeds=grouped["value"].count(), settled=~rising,
                     reach=reach(out["gain"], out["gain_se"], fit["df"], alpha))
    return out[[*keys, "gain", "gain_se", "df", "p", "window", "spread", "n_seeds",
                "settled", "reach"]].reset_index(drop=True)
