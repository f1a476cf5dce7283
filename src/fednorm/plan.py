"""From the YAML configuration to the plan: the runs to train and the figures to draw.

The configuration has four top-level sections (see ``config/config.yaml``):

``paths``        where results, figures and downloaded data go;
``execution``    how jobs run (:class:`Execution`): ``device``, ``threads`` and ``gpus_per_job``
                 of a training job, ``bundle_size``: at most that many runs train together
                 in one job (see :func:`bundles`), and what a training job asks a cluster for:
                 ``cpus_per_gpu``, ``mem_mb`` (MB), ``runtime`` (minutes);
                 ``checkpoint_minutes``: between two saves of a bundle's resume point;
                 ``data_workers``: processes decoding ImageNet-1K's JPEGs in a training job;
                 ``images_per_second`` and ``max_runtime``: each training job's ``runtime``
                 from its training images instead (:meth:`Execution.job_runtime`,
                 docs/resume.md);
``run``          defaults for every run (any :class:`~fednorm.config.RunConfig` key);
``experiments``  name -> ``{set: {key: value}, grid: {key: [values]}}``: the product of the grid
                 axes over the defaults updated by ``set``; a budget (``epochs`` or ``rounds``,
                 ``lr_decay_at``: fednorm.config.resolve_budget) set in a layer replaces the
                 ``steps`` (``lr_milestones``) of the layers below; the grid axis ``settings``
                 takes mappings that set several keys together, e.g. ``[{partition: iid},
                 {partition: dirichlet, heterogeneity: 0.1}]`` (the product runs over them);
``figures``      name -> ``{experiment, kind, where, y, title, paper, ...}``: ``experiment`` one
                 name or a list (the union of their runs); ``where`` ``{key: value or
                 [values]}``; ``y`` a metric; ``paper`` the paper's figure or table it
                 reproduces, e.g. 'FBN Fig 3a' (the report's caption; none: not in the papers);
                 then the keys of the ``kind`` (see FIGURE_KEYS):
                 ``curves``    y over training: ``x`` step (default), round (step / E),
                               progress (step / steps) or a run key; ``hue`` the column, or two
                               (colour, then dash), that tells lines apart (default normalizer;
                               ``scenario``, e.g. 'SF, median + NNM', is derived from attack, f,
                               aggregator and nnm); ``panels: {key: [values]}`` one axes per
                               value; ``logy``; ``y`` may list several metrics: one line each
                               (colour), the hue (one column) as dash;
                 ``final_vs``  final y against a run key ``x``: as curves, plus ``logx`` (true:
                               log axis, false: linear; default: chosen from the values);
                 ``bars``      final y, grouped by ``x`` (any column, e.g. split), one bar per
                               ``hue`` (one column), ``x_order``, ``panels``;
                 ``heatmap``   final y over ``rows`` x ``cols`` (columns) for the two values of
                               ``compare: {key: [A, B]}``: panels A, B and B - A; ``row_order``,
                               ``col_order``;
                 ``table``     final y as "mean ± std" over ``rows`` x ``cols``, written as .csv
                               and .md; ``row_order``, ``col_order``; ``extra``: metrics shown
                               as one more column each (e.g. comm_rounds); ``select:
                               val_accuracy``: per cell, only the runs of the ``lr_scale``
                               with the best validation accuracy (fednorm.tuning);
                 ``tuning``    per ``rows`` x ``cols`` cell, the ``lr_scale`` chosen on the
                               validation accuracy (``select``, the only choice), its test
                               accuracy, and the test accuracy at lr_scale 1 (the common
                               recipe), as .csv and .md (fednorm.tuning.tuning_table);
                 ``parts``     ``parts: [figure, ...]``: figures of kinds curves, final_vs or
                               bars side by side in one file, one axes each (no panels), each
                               with its own experiment (default the parent's), where, y, title.
                 An order key lists every value the figure's runs have for that axis, in the
                 order to draw; without it, numbers ascend and anything else keeps the order of
                 first appearance in the runs;
``toy``          the FBN paper's 2-D normalization toy (Figs 1, 2): ``settings`` (ToyConfig keys),
                 ``gammas``, ``seeds``, ``figures`` (the folder under ``paths.figures``);
``claims``       the path of the claims ledger's file (each paper number beside ours), or null
                 for none; the file itself is read and checked by ``fednorm.claims``.

A run that two experiments need is planned (and trained) once: runs are keyed by their run_id,
which derives from the run's config alone. Runs train in bundles, which derive from the config
alone too. Every error is raised here, before any job starts.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fednorm.config import (
    BUDGET_KEYS,
    CHECKPOINT_MINUTES,
    DATA_WORKERS,
    DERIVED,
    FIELDS,
    ConfigError,
    Figure,
    Nullable,
    Paths,
    RunConfig,
    ToyConfig,
    bundle_key,
    check_keys,
    int_at_least,
    number_in,
    run_config,
)
from fednorm.metrics import FIGURE_METRICS

FIGURE_EXTENSIONS = ("pdf", "png", "csv")
TABLE_EXTENSIONS = ("csv", "md")  # a table is data and text, no picture
_TOP = ("paths", "execution", "run", "experiments", "figures", "toy", "claims")
RUN_KEYS = FIELDS + BUDGET_KEYS  # what `run`, `set` and `grid` may set
SETTINGS = "settings"  # a grid axis whose values set several keys together
COLUMNS = FIELDS + DERIVED  # what a figure may filter on or tell its lines apart by
TOY_FIGURES = ("fig1a", "fig1b", "fig2a", "fig2b", "fig2c")
# A job's runtime from its images (Execution.job_runtime): the rate measured on one bundle, times
# this margin (other jobs on the node, slower data), plus minutes for start-up and data loading.
RUNTIME_MARGIN = 1.25
RUNTIME_START_MINUTES = 5
AUTO_BUNDLE_RUNS = 64  # execution.bundle_size auto: the most runs of a bundle
# each written atomically; run.json last
RUN_FILES = ("metrics.csv", "norm_error.csv", "dynamics.csv", "run.json")


def extensions(kind: str) -> tuple[str, ...]:
    """The files a figure of ``kind`` is written as: <name>.<ext> for each ext."""
    return TABLE_EXTENSIONS if kind in TABLE_KINDS else FIGURE_EXTENSIONS


@dataclass(frozen=True)
class Execution:
    """How training jobs run (the ``execution`` section); none of it changes a run's result."""

    device: str = "auto"  # auto (cuda when available), cpu, cuda, cuda:1, ...
    threads: int = 1  # CPU threads per training job
    gpus_per_job: int = 0  # the job's Snakemake resource `gpu` (limit with --resources gpu=N)
    # at most this many runs train together in one job; 1: one run a job; auto: bundles of up
    # to AUTO_BUNDLE_RUNS, of which each job trains together as many as its device's free
    # memory holds (fednorm.fl.memory), the rest after them
    bundle_size: int | str = 1
    # bundles trained one after the other by one job (one process): on a CPU, where a job's
    # start (Python, PyTorch) is a large part of a small bundle's time, several; 1: one a job
    bundles_per_job: int = 1
    # What a training job asks a cluster for (Snakemake resources; the SLURM executor plugin
    # passes them as --cpus-per-gpu, --mem and --time). Sized for a bundle of 16 ResNet-20 runs
    # on CIFAR-10: `threads` CPUs per GPU, host memory for Python, CUDA and the dataset (the
    # data itself lives on the GPU), a day of wall time.
    cpus_per_gpu: int = 4
    mem_mb: int = 16000  # megabytes of host memory
    runtime: int = 1440  # minutes
    # minutes between two saves of a bundle's resume point (also saved on SIGTERM / SIGUSR1)
    checkpoint_minutes: float = CHECKPOINT_MINUTES
    # processes decoding ImageNet-1K's JPEGs for a training job (fednorm.data.imagenet; 0: in
    # the job's own process); the other datasets are in memory and ignore it
    data_workers: int = DATA_WORKERS
    # A job's runtime from its training images (training_images) at this rate, measured with
    # benchmarks/time_plan_bundle.py; null: every job asks for `runtime`
    images_per_second: float | None = None
    max_runtime: int | None = None  # minutes, the partition's limit: no job asks for more

    @property
    def planned_bundle_size(self) -> int:
        """The most runs of one bundle (fednorm.plan.bundles)."""
        return AUTO_BUNDLE_RUNS if self.bundle_size == "auto" else int(self.bundle_size)

    @property
    def together(self) -> str | None:
        """How many runs of a bundle a job trains together: "auto" (as many as fit its
        device's memory), or None (all of them)."""
        return "auto" if self.bundle_size == "auto" else None

    def job_runtime(self, images: int) -> int:
        """The minutes a training job of ``images`` training images asks for: ``runtime``, or
        with ``images_per_second`` RUNTIME_MARGIN times the images' time plus
        RUNTIME_START_MINUTES; at most ``max_runtime``. A job cut short by its limit saves
        its state and continues in its next submission (docs/resume.md)."""
        minutes = self.runtime
        if self.images_per_second is not None:
            minutes = RUNTIME_START_MINUTES + math.ceil(
                RUNTIME_MARGIN * images / self.images_per_second / 60)
        return minutes if self.max_runtime is None else min(minutes, self.max_runtime)

    def check(self) -> None:
        """The keys together: a GPU job gets cpus_per_gpu x gpus_per_job CPUs and trains on
        `threads` of them, so they must not be fewer (SLURM would let the threads share)."""
        if self.gpus_per_job and self.cpus_per_gpu * self.gpus_per_job < self.threads:
            raise ConfigError(
                f"execution: key 'cpus_per_gpu' has value {self.cpus_per_gpu}; allowed: an "
                f"integer >= threads / gpus_per_job ({self.threads} / {self.gpus_per_job})")


def _bundle_size(value: Any) -> str | None:
    if value == "auto" or int_at_least(1)(value) is None:
        return None
    return "an integer >= 1, or auto (as many runs as the device's memory holds)"


def _device(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "a device name: auto, cpu, cuda, cuda:1"


_EXECUTION_RULES: dict[str, Callable[[Any], str | None]] = {
    "device": _device,
    "threads": int_at_least(1),
    "gpus_per_job": int_at_least(0),
    "bundle_size": _bundle_size,
    "bundles_per_job": int_at_least(1),
    "cpus_per_gpu": int_at_least(1),
    "mem_mb": int_at_least(1),
    "runtime": int_at_least(1),
    "checkpoint_minutes": number_in(0, math.inf, low_open=True),
    "data_workers": int_at_least(0),
    "images_per_second": Nullable(number_in(0, math.inf, low_open=True)),
    "max_runtime": Nullable(int_at_least(1)),
}


@dataclass(frozen=True)
class ToyPlan:
    settings: ToyConfig
    gammas: tuple[float, ...]
    seeds: tuple[int, ...]
    folder: str  # under paths.figures

    def stems(self, paths: Paths) -> list[str]:
        return [f"{paths.figures}/{self.folder}/{name}" for name in TOY_FIGURES]


@dataclass(frozen=True)
class Plan:
    paths: Paths
    runs: dict[str, RunConfig]  # run_id -> config, each run once
    experiments: dict[str, tuple[str, ...]]  # experiment -> its run_ids, in grid order
    figures: dict[str, Figure]
    execution: Execution
    bundles: dict[str, tuple[str, ...]]  # bundle id -> its member run_ids (see `bundles`)
    jobs: dict[str, tuple[str, ...]]  # training job id -> its bundle ids (see `training_jobs`)
    toy: ToyPlan | None = None
    claims: str | None = None  # the claims file (fednorm.claims reads it); None: no ledger
    # experiments an override set to null (the quick profile's Tiny-ImageNet): a claim on them
    # only is not checked and is judged 'not run' (fednorm.claims_words.check_plan)
    dropped: frozenset[str] = frozenset()

    def groups(self, run_id: str) -> str:
        """The experiments a run belongs to, joined by '|' (the summary's figure_group)."""
        return "|".join(name for name, ids in self.experiments.items() if run_id in ids)

    def figure_files(self) -> list[str]:
        return self.figure_files_of(list(self.figures))

    def figure_files_of(self, names: list[str]) -> list[str]:
        return [self.paths.figure(n, e) for n in names for e in extensions(self.figures[n].kind)]

    def figure_folders(self) -> dict[str, list[str]]:
        """Figure names by folder (the name up to its last '/', '' for none): one job draws a
        folder's figures (a paper's), in one process."""
        folders: dict[str, list[str]] = {}
        for name in self.figures:
            folders.setdefault(name.rpartition("/")[0], []).append(name)
        return folders

    def figure_runs(self, fig: Figure) -> list[RunConfig]:
        """The runs a figure draws: its experiments' runs that pass its ``where`` filters,
        with one of its compared values (heatmap) and panel values; a parts figure's are its
        parts' runs."""
        if fig.parts:
            runs = {c.run_id: c for part in fig.parts for c in self.figure_runs(part)}
            return list(runs.values())
        filters = [*fig.where, *((k, v) for k, v in ((fig.compare, fig.compare_values),
                                                      (fig.panel, fig.panel_values)) if k)]
        ids = dict.fromkeys(r for name in fig.experiments for r in self.experiments[name])
        return [self.runs[r] for r in ids if _matches(self.runs[r], tuple(filters))]

    def toy_files(self) -> list[str]:
        stems = self.toy.stems(self.paths) if self.toy else []
        return [f"{stem}.{ext}" for stem in stems for ext in FIGURE_EXTENSIONS]

    def training_images(self, run_ids: Iterable[str]) -> int:
        return training_images(self.runs[r] for r in run_ids)

    def job_runtime(self, run_ids: Iterable[str]) -> int:
        """The minutes a training job of these runs asks a cluster for (`runtime`)."""
        return self.execution.job_runtime(self.training_images(run_ids))

    def run_files(self, run_ids: tuple[str, ...]) -> list[str]:
        """The files the runs write, run by run in ``RUN_FILES`` order."""
        return [f"{self.paths.run_dir(r)}/{name}" for r in run_ids for name in RUN_FILES]

    def is_complete(self, run_id: str) -> bool:
        """A run is complete when all its files exist: each is written atomically, run.json last,
        so a run killed mid-way never looks complete (and a file deleted by hand retrains it)."""
        return all(os.path.exists(f) for f in self.run_files((run_id,)))

    def pending_bundles(self) -> dict[str, tuple[str, ...]]:
        """Bundle id -> its members that are not complete; bundles with none are left out.

        What the workflow trains, read at parse time: a bundle job declares only these runs'
        files as its outputs. Snakemake deletes a job's outputs before it runs, and a killed
        job's outputs count as incomplete on a restart; a finished run is never among them, so
        it is never deleted nor trained again, not even when a new run joins its bundle. The
        membership comes from the config alone, so a cluster job that parses the workflow again
        finds the same bundle.
        """
        pending = {bid: tuple(r for r in members if not self.is_complete(r))
                   for bid, members in self.bundles.items()}
        return {bid: members for bid, members in pending.items() if members}

    def pending_jobs(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """Training job id -> {bundle id: its members not complete} (:meth:`pending_bundles`),
        the bundles with none left out, and the jobs with none. A job's bundles come from the
        config alone, like the bundles' members."""
        pending = self.pending_bundles()
        jobs = {job: {b: pending[b] for b in members if b in pending}
                for job, members in self.jobs.items()}
        return {job: members for job, members in jobs.items() if members}

    def images_by_part(self, run_ids: Iterable[str] | None = None
                       ) -> dict[tuple[str, str], int]:
        """Training images (RunConfig.training_images) summed over the distinct runs (of
        ``run_ids``; None: all) of each (dataset, model): what a GPU-hours estimate divides by
        that part's images/s (:func:`gpu_hours`)."""
        out: dict[tuple[str, str], int] = {}
        ids = self.runs if run_ids is None else dict.fromkeys(run_ids)
        for cfg in (self.runs[r] for r in ids):
            key = (cfg.dataset, cfg.model)
            out[key] = out.get(key, 0) + cfg.training_images
        return dict(sorted(out.items()))

    def paper_parts(self) -> dict[str, tuple[str, ...]]:
        """Each paper's part of the plan, a figure folder (fbn, fixbn, fedtan, compare) -> the
        distinct runs its figures draw (a run two parts draw is in both)."""
        return {folder: tuple(dict.fromkeys(
                    c.run_id for n in names for c in self.figure_runs(self.figures[n])))
                for folder, names in self.figure_folders().items()}

    def gpu_hours(self, rate: Callable[[tuple[str, str]], float],
                  parts: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, float]:
        """GPU-hours of each paper part (``parts``, default :meth:`paper_parts`) and of the
        whole plan ('all', each run once) at ``rate((dataset, model))`` training images per
        second."""
        parts = {**(self.paper_parts() if parts is None else parts), "all": tuple(self.runs)}
        return {name: gpu_hours(self.images_by_part(ids), rate) for name, ids in parts.items()}

    def needs_cifar10(self) -> bool:
        return any(cfg.dataset == "cifar10" for cfg in self.runs.values())


def _keys(section: Any, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {section!r}")
    for key in section:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key '{key}'; allowed keys: {list(allowed)}")
    return section


def _expand(name: str, spec: Any, defaults: Mapping[str, Any]) -> list[RunConfig]:
    where = f"experiments.{name}"
    spec = _keys(spec, where, ("set", "grid"))
    fixed = dict(_keys(spec.get("set"), f"{where}.set", RUN_KEYS))
    grid = _keys(spec.get("grid"), f"{where}.grid", (*RUN_KEYS, SETTINGS))
    for axis, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(
                f"{where}.grid: key '{axis}' has value {values!r}; allowed: a non-empty list"
            )
    for i, case in enumerate(grid.get(SETTINGS, ())):
        _keys(case, f"{where}.grid.{SETTINGS}[{i}]", RUN_KEYS)
        if not case:
            raise ConfigError(f"{where}.grid: key '{SETTINGS}' has an empty entry {i}; allowed:"
                              " mappings of run keys to values")
    runs = []
    for combo in itertools.product(*grid.values()):
        axes = [(k, v) for k, v in zip(grid, combo, strict=True) if k != SETTINGS]
        together = dict(combo[list(grid).index(SETTINGS)]) if SETTINGS in grid else {}
        values = _layered(defaults, fixed, {**together, **dict(axes)})
        label = ", ".join(f"{k}={v!r}" for k, v in [*together.items(), *axes])
        runs.append(run_config(values, where=f"{where} ({label})" if label else where))
    return runs


# Keys that say the same thing in different words: a layer (run defaults, an experiment's
# `set`, its grid) that sets one of a family replaces what a lower layer set of that family.
_FAMILIES = (("steps", "epochs", "rounds"), ("lr_milestones", "lr_decay_at"))


def _layered(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The layers merged, later ones winning; an experiment's ``rounds`` replaces the defaults'
    ``steps`` (and ``lr_decay_at`` their ``lr_milestones``) instead of clashing with them."""
    out: dict[str, Any] = {}
    for layer in layers:
        for family in _FAMILIES:
            if any(k in layer for k in family):
                for k in family:
                    out.pop(k, None)
        out.update(layer)
    return out


def _resolve_value(fig: str, key: str, value: Any, present: list[Any],
                   section: str = "where") -> Any:
    """One ``where`` value checked against the values the runs have; 'min'/'max' pick."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
    if value in ("min", "max") and numeric:
        value = present[0] if value == "min" else present[-1]
    if value not in present:
        raise ConfigError(
            f"figures.{fig}.{section}: key '{key}' has value {value!r}; allowed: a value the "
            f"experiment has ({present}), or 'min'/'max'"
        )
    return value


def _present(runs: list[RunConfig], key: str) -> list[Any]:
    """The values the runs have for a column, sorted (None last)."""
    return sorted({getattr(r, key) for r in runs}, key=lambda v: (v is None, v))


def _resolve_where(fig: str, spec: Mapping[str, Any], runs: list[RunConfig]) -> tuple:
    """Check each filter against the experiments' values; 'min'/'max' pick from them, and a
    list keeps the rows whose key is any of its values."""
    where = []
    for key, value in _keys(spec, f"figures.{fig}.where", COLUMNS).items():
        present = _present(runs, key)
        if isinstance(value, list):
            if not value:
                raise ConfigError(f"figures.{fig}.where: key '{key}' has value []; allowed: "
                                  "a value or a non-empty list of values")
            resolved = tuple(_resolve_value(fig, key, v, present) for v in value)
        else:
            resolved = _resolve_value(fig, key, value, present)
        where.append((key, resolved))
    return tuple(where)


def _matches(cfg: RunConfig, where: tuple) -> bool:
    return all(getattr(cfg, key) in value if isinstance(value, tuple) else
               getattr(cfg, key) == value for key, value in where)


def _experiments(fig: str, spec: Any, experiments: dict[str, list[RunConfig]]) -> tuple:
    """``experiment``: one experiment's name or a list of them (their runs' union)."""
    names = spec if isinstance(spec, list) and spec else [spec]
    for name in names:
        if not isinstance(name, str) or name not in experiments:
            raise ConfigError(f"figures.{fig}: key 'experiment' has value {spec!r}; allowed: "
                              f"one of {list(experiments)} or a list of them")
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# Figure keys. Every figure has the COMMON keys; each kind has its own (FIGURE_KEYS: key ->
# default, REQUIRED when it has none), each checked by one rule (_KEY_RULES) that returns the
# Figure fields it sets. A kind's keys are checked in their order here, so an order key comes
# after the key whose column it orders.

REQUIRED = "<required>"
COMMON_KEYS = ("experiment", "kind", "where", "y", "title", "paper", "note")
FIGURE_KEYS: dict[str, dict[str, Any]] = {
    "curves": {"x": None, "hue": "normalizer", "panels": None, "logy": False},
    "final_vs": {"x": None, "hue": "normalizer", "panels": None, "logy": False, "logx": None},
    "bars": {"x": REQUIRED, "hue": "normalizer", "panels": None, "x_order": None},
    "heatmap": {"rows": REQUIRED, "cols": REQUIRED, "compare": REQUIRED, "row_order": None,
                "col_order": None, "select": None},
    "table": {"rows": REQUIRED, "cols": REQUIRED, "row_order": None, "col_order": None,
              "extra": None, "select": None},
    "tuning": {"rows": REQUIRED, "cols": REQUIRED, "row_order": None, "col_order": None,
               "select": "val_accuracy"},
    "parts": {"parts": REQUIRED},
}
FIGURE_KINDS = tuple(FIGURE_KEYS)
TABLE_KINDS = ("table", "tuning")  # written as data and text (TABLE_EXTENSIONS), no picture
# What a part of a ``parts`` figure may be: a kind drawn on one axes (no panels of its own).
PART_KINDS = ("curves", "final_vs", "bars")
# The x a kind's axis may show: curves also the steps and the x computed from them
# (fednorm.plots.curves.COMPUTED_X: round = step / local_steps, progress = step / steps).
CURVE_X = ("step", "round", "progress")
X_CHOICES = {"curves": (*CURVE_X, *FIELDS), "final_vs": FIELDS, "bars": COLUMNS}
MAX_HUES = {"curves": 2, "final_vs": 2, "bars": 1}
ORDER_OF = {"row_order": "rows", "col_order": "cols", "x_order": "x"}  # order key -> its axis


@dataclass
class _FigureSpec:
    """What a key's rule needs: the figure, its runs, and the fields checked so far."""

    name: str
    kind: str
    runs: list[RunConfig]  # the runs that pass the figure's filters
    fields: dict[str, Any]
    raw: Mapping[str, Any] = field(default_factory=dict)  # the figure's keys as configured
    experiments: dict[str, list[RunConfig]] = field(default_factory=dict)  # all of them

    def error(self, key: str, value: Any, allowed: str) -> ConfigError:
        return ConfigError(f"figures.{self.name}: key '{key}' has value {value!r}; allowed: "
                           f"{allowed}")


def _x(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    allowed = X_CHOICES[spec.kind]
    if value is not None and value not in allowed:
        raise spec.error("x", value, f"one of {list(allowed)}")
    return {"x": value}


def _hue(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``hue``: a column or two (colour, then dash) that tell a figure's lines apart."""
    most = MAX_HUES[spec.kind]
    hue = [value] if isinstance(value, str) else value
    if not (isinstance(hue, list) and 1 <= len(hue) <= most and all(h in COLUMNS for h in hue)):
        count = "one" if most == 1 else "one or two"
        raise spec.error("hue", value, f"{count} of {list(COLUMNS)}")
    return {"hue": tuple(hue)}


def _panels(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``{key: [values]}`` -> (key, values), each value checked like a ``where`` filter."""
    if value is None:
        return {}
    value = _keys(value, f"figures.{spec.name}.panels", COLUMNS)
    if len(value) != 1 or not isinstance(next(iter(value.values())), list):
        raise spec.error("panels", dict(value), "one key with a list of values")
    key, values = next(iter(value.items()))
    resolved = tuple(_resolve_where(spec.name, {key: v}, spec.runs)[0][1] for v in values)
    return {"panel": key, "panel_values": resolved}


def _flag(key: str, optional: bool = False) -> Callable[[_FigureSpec, Any], dict[str, Any]]:
    def rule(spec: _FigureSpec, value: Any) -> dict[str, Any]:
        if not (isinstance(value, bool) or (optional and value is None)):
            raise spec.error(key, value, "true or false")
        return {key: value}

    return rule


def _column(key: str) -> Callable[[_FigureSpec, Any], dict[str, Any]]:
    """``rows`` / ``cols``: a column (run key or derived), not the one another axis uses."""
    def rule(spec: _FigureSpec, value: Any) -> dict[str, Any]:
        taken = [spec.fields[k] for k in ("rows", "cols") if k in spec.fields]
        if value not in COLUMNS or value in taken:
            raise spec.error(key, value, f"one of {list(COLUMNS)}, other than {taken}"
                             if taken else f"one of {list(COLUMNS)}")
        return {key: value}

    return rule


def _compare(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``{key: [A, B]}``: two values of one column; the figure keeps the runs with either."""
    where = f"figures.{spec.name}.compare"
    value = _keys(value, where, COLUMNS)
    if len(value) != 1:
        raise spec.error("compare", dict(value), "one column with a list of two values, "
                         "e.g. {normalizer: [bn, gn]}")
    key, values = next(iter(value.items()))
    if key in (spec.fields["rows"], spec.fields["cols"]):
        raise ConfigError(f"{where}: key '{key}' is the figure's rows or cols; allowed: "
                          "another column")
    if not (isinstance(values, list) and len(values) == 2 and values[0] != values[1]):
        raise ConfigError(f"{where}: key '{key}' has value {values!r}; allowed: a list of two "
                          "different values")
    present = _present(spec.runs, key)
    pair = tuple(_resolve_value(spec.name, key, v, present, "compare") for v in values)
    spec.runs = [r for r in spec.runs if getattr(r, key) in pair]
    return {"compare": key, "compare_values": pair}


def _parts(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``parts``: figures drawn side by side in one file, each a mapping of a figure's keys of
    one of PART_KINDS (its own ``experiment``, default the parent's; ``where``, ``y``,
    ``title`` and its kind's keys but ``panels``)."""
    if not (isinstance(value, list) and value and all(isinstance(p, Mapping) for p in value)):
        raise spec.error("parts", value, f"a non-empty list of figures (mappings of figure "
                         f"keys), each of kind {list(PART_KINDS)}")
    parts = []
    for i, part in enumerate(value):
        where = f"{spec.name}.parts[{i}]"
        if part.get("kind") not in PART_KINDS:
            raise ConfigError(f"figures.{where}: key 'kind' has value {part.get('kind')!r}; "
                              f"allowed: {list(PART_KINDS)}")
        if "panels" in part:
            raise ConfigError(f"figures.{where}: key 'panels' is not allowed in a part (one "
                              f"axes each); allowed keys: those of kind '{part['kind']}'")
        if "paper" in part:
            raise ConfigError(f"figures.{where}: key 'paper' is not allowed in a part; allowed: "
                              f"'paper' of the figure '{spec.name}' (one caption per file)")
        inherited = {k: spec.raw[k] for k in ("experiment", "where") if k in spec.raw}
        parts.append(_figure(where, {**inherited, **part}, spec.experiments))
    return {"parts": tuple(parts)}


def _extra(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``extra``: metrics shown as one more column each (per row, its runs' final mean)."""
    if value is None:
        return {}
    if not (isinstance(value, list) and all(v in FIGURE_METRICS for v in value)):
        raise spec.error("extra", value, f"a list of metrics from {list(FIGURE_METRICS)}")
    return {"extra": tuple(value)}


def _select(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``select``: a validation metric; per cell, the runs of the best ``lr_scale`` by it
    (fednorm.tuning). Every run of the figure must hold out a validation set."""
    if value is None and spec.kind != "tuning":
        return {}
    if value != "val_accuracy":
        raise spec.error("select", value, "'val_accuracy' (a learning rate is chosen on the "
                         "validation split, never on the test set), or null")
    without = sorted({r.run_id for r in spec.runs if r.val_fraction == 0})
    if without:
        raise spec.error("select", value, f"only with runs that hold out a validation set "
                         f"(val_fraction > 0); {len(without)} do not, e.g. {without[0]}")
    return {"select": value}


def _order(key: str) -> Callable[[_FigureSpec, Any], dict[str, Any]]:
    """``row_order`` / ``col_order`` / ``x_order``: every value of the axis's column that the
    figure's runs have, once each, in the order to draw them."""
    def rule(spec: _FigureSpec, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        column = spec.fields[ORDER_OF[key]]
        present = list(dict.fromkeys(getattr(r, column) for r in spec.runs))
        same = isinstance(value, list) and len(value) == len(present)
        if not (same and all(v in value for v in present)):
            raise spec.error(key, value, f"each value of '{column}' that the runs have, once, "
                             f"in any order: {present}")
        orders = spec.fields.get("orders", ())
        return {"orders": (*orders, (column, tuple(value)))}

    return rule


_KEY_RULES: dict[str, Callable[[_FigureSpec, Any], dict[str, Any]]] = {
    "x": _x,
    "hue": _hue,
    "panels": _panels,
    "logy": _flag("logy"),
    "logx": _flag("logx", optional=True),
    "rows": _column("rows"),
    "cols": _column("cols"),
    "compare": _compare,
    "parts": _parts,
    "extra": _extra,
    "select": _select,
    **{key: _order(key) for key in ORDER_OF},
}
assert {k for keys in FIGURE_KEYS.values() for k in keys} == set(_KEY_RULES)


def _figure(name: str, spec: Any, experiments: dict[str, list[RunConfig]]) -> Figure:
    where = f"figures.{name}"
    spec = _keys(spec, where, (*COMMON_KEYS, *dict.fromkeys(
        k for keys in FIGURE_KEYS.values() for k in keys)))
    kind = spec.get("kind")
    if kind not in FIGURE_KINDS:
        raise ConfigError(f"{where}: key 'kind' has value {kind!r}; allowed: {FIGURE_KINDS}")
    own = FIGURE_KEYS[kind]
    for key in spec:
        if key not in COMMON_KEYS and key not in own:
            raise ConfigError(f"{where}: key '{key}' is not one of kind '{kind}'; allowed keys: "
                              f"{[*COMMON_KEYS, *own]}")
    if kind == "parts":  # the parts have the experiments, filters and metrics
        if "y" in spec:
            raise ConfigError(f"{where}: key 'y' is not one of kind 'parts' (each part has "
                              f"its own); allowed keys: {['experiment', 'where', 'title', *own]}")
        checked = _FigureSpec(name, kind, [], {}, spec, experiments)
        checked.fields.update(_parts(checked, spec.get("parts")))
        names = tuple(dict.fromkeys(e for part in checked.fields["parts"]
                                    for e in part.experiments))
        return Figure(name=name, experiments=names, kind=kind, **_caption_keys(where, spec),
                      **checked.fields)
    names = _experiments(name, spec.get("experiment"), experiments)
    runs = [cfg for n in names for cfg in experiments[n]]
    y = _y(where, kind, spec.get("y", "test_accuracy"))
    filters = _resolve_where(name, spec.get("where"), runs)
    checked = _FigureSpec(name, kind, [r for r in runs if _matches(r, filters)], {})
    for key, default in own.items():
        if key not in spec and default == REQUIRED:
            raise ConfigError(f"{where}: key '{key}' is missing; kind '{kind}' needs "
                              f"{[k for k, d in own.items() if d == REQUIRED]}")
        checked.fields.update(_KEY_RULES[key](checked, spec.get(key, default)))
    if isinstance(y, tuple) and len(checked.fields["hue"]) > 1:
        raise ConfigError(f"{where}: key 'hue' has value {list(checked.fields['hue'])}; "
                          f"allowed: one column with a list of metrics as y (the metric is "
                          f"the lines' colour, the hue their dash)")
    return Figure(name=name, experiments=names, kind=kind, where=filters, y=y,
                  **_caption_keys(where, spec), **checked.fields)


def _caption_keys(where: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The keys that only label a figure: ``title`` (drawn on it), ``paper`` and ``note`` (the
    report's caption)."""
    note = spec.get("note", "")
    if not isinstance(note, str):
        raise ConfigError(f"{where}: key 'note' has value {note!r}; allowed: a text that the "
                          f"report's caption adds (what a reader must know to read the figure)")
    return {"title": str(spec.get("title", "")), "paper": _paper(where, spec.get("paper")),
            "note": " ".join(note.split())}


def _paper(where: str, value: Any) -> str | None:
    """``paper``: the figure or table of a paper that the figure reproduces, as the report's
    caption names it (e.g. 'FixBN Table 5'); left out (or null) for one not in the papers."""
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    raise ConfigError(f"{where}: key 'paper' has value {value!r}; allowed: a paper's figure or "
                      "table, e.g. 'FBN Fig 3a', or null for a figure not in the papers")


def _y(where: str, kind: str, value: Any) -> str | tuple[str, ...]:
    """``y``: a metric; curves also take a list of different metrics, one line each."""
    if isinstance(value, list) and kind == "curves":
        if value and len(set(value)) == len(value) and all(v in FIGURE_METRICS for v in value):
            return tuple(value)
    elif value in FIGURE_METRICS:
        return value
    lists = " (curves: or a list of different ones)"
    raise ConfigError(f"{where}: key 'y' has value {value!r}; allowed: one of "
                      f"{list(FIGURE_METRICS)}{lists}")


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive update, as Snakemake applies ``--configfile`` over the Snakefile's config:
    mappings merge key by key, anything else (lists included) is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _toy(spec: Any) -> ToyPlan | None:
    if spec is None:
        return None
    spec = _keys(spec, "toy", ("settings", "gammas", "seeds", "figures"))
    try:
        settings = ToyConfig(**_keys(spec.get("settings"), "toy.settings",
                                     tuple(ToyConfig.__dataclass_fields__)))
    except ValueError as err:
        raise ConfigError(f"toy.settings: {err}") from err
    gammas, seeds = spec.get("gammas", [0, 0.1, 0.5, 1]), spec.get("seeds", [0, 1, 2])
    if not (isinstance(gammas, list) and gammas and all(
            isinstance(g, int | float) and 0 <= g <= 1 for g in gammas)):
        raise ConfigError(f"toy: key 'gammas' has value {gammas!r}; allowed: a non-empty list "
                          "of numbers in [0, 1]")
    if not (isinstance(seeds, list) and seeds and all(
            isinstance(x, int) and x >= 0 for x in seeds)):
        raise ConfigError(f"toy: key 'seeds' has value {seeds!r}; allowed: a non-empty list "
                          "of integers >= 0")
    return ToyPlan(settings, tuple(float(g) for g in gammas), tuple(seeds),
                   str(spec.get("figures", "fbn")))


def _claims_path(value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise ConfigError(f"config: key 'claims' has value {value!r}; allowed: the path of a "
                          "claims file (e.g. config/claims.yaml) or null")
    return value


def _paths(spec: Any) -> Paths:
    """``paths``: each a folder, as a non-empty text."""
    spec = _keys(spec, "paths", tuple(Paths.__dataclass_fields__))
    for key, value in spec.items():
        if not (isinstance(value, str) and value.strip()):
            raise ConfigError(f"paths: key '{key}' has value {value!r}; allowed: a folder "
                              f"(a non-empty text, e.g. '{getattr(Paths, key)}')")
    return Paths(**spec)


def _execution(spec: Any) -> Execution:
    spec = _keys(spec, "execution", tuple(_EXECUTION_RULES))
    for key, value in spec.items():
        problem = _EXECUTION_RULES[key](value)
        if problem is not None:
            raise ConfigError(f"execution: key '{key}' has value {value!r}; allowed: {problem}")
    execution = Execution(**spec)
    execution.check()
    return execution


def training_images(cfgs: Iterable[RunConfig]) -> int:
    """The images the runs train on (RunConfig.training_images), summed: what a training
    job's time scales with."""
    return sum(c.training_images for c in cfgs)


def gpu_hours(images: Mapping[tuple[str, str], int],
              rate: Callable[[tuple[str, str]], float]) -> float:
    """Hours of one GPU that trains ``images`` ((dataset, model) -> training images) at
    ``rate(key)`` images per second, one part after the other."""
    return sum(n / rate(key) for key, n in images.items()) / 3600


def bundle_label(cfg: RunConfig) -> str:
    """The readable part of a bundle id: what its runs share, e.g. 'fbn-E1', 'bn-E1-byz3'
    (f = 3 Byzantine clients; the attacks and server rules of its runs may differ) or
    'gn-E1-sf3+upd-median+nnm' (attacked updates: one server per bundle)."""
    if cfg.attack_updates:
        return f"{cfg.normalizer}-E{cfg.local_steps}{cfg.byzantine_tag}"
    byzantine = f"-byz{cfg.f}" if cfg.attack != "none" else ""
    return f"{cfg.normalizer}-E{cfg.local_steps}{byzantine}"


def bundles(runs: Mapping[str, RunConfig], size: int) -> dict[str, tuple[str, ...]]:
    """Runs that may train together, from their configs alone: bundle id -> member run_ids.

    Runs are grouped by :func:`~fednorm.config.bundle_key`; within a group they are ordered by
    ``(seed, run_id)`` and cut into consecutive chunks of at most ``size``. Adding a higher seed
    therefore appends runs at the end of each group and leaves the earlier full chunks (their
    members and ids) as they were. A bundle's id is ``{label}-x{members}-{hash}``, the hash
    (10 hex digits of SHA-1) of its member run_ids.
    """
    groups: dict[tuple, list[RunConfig]] = {}
    for cfg in runs.values():
        groups.setdefault(bundle_key(cfg), []).append(cfg)
    out: dict[str, tuple[str, ...]] = {}
    for group in groups.values():
        group.sort(key=lambda c: (c.seed, c.run_id))
        for start in range(0, len(group), size):
            members = tuple(c.run_id for c in group[start:start + size])
            digest = hashlib.sha1(",".join(members).encode()).hexdigest()[:10]
            out[f"{bundle_label(group[start])}-x{len(members)}-{digest}"] = members
    return out


def training_jobs(bundle_ids: list[str], per_job: int) -> dict[str, tuple[str, ...]]:
    """Consecutive bundles (in :func:`bundles`' order: bundles of one key are neighbours) cut
    into jobs of at most ``per_job``; a job's id is its first bundle's id, with '+k' when k
    more bundles follow it in the job."""
    jobs = {}
    for start in range(0, len(bundle_ids), per_job):
        members = tuple(bundle_ids[start:start + per_job])
        more = f"+{len(members) - 1}" if len(members) > 1 else ""
        jobs[members[0] + more] = members
    return jobs


def load_plan(config: Mapping[str, Any]) -> Plan:
    """Validate the whole configuration and expand it into runs and figures."""
    config = _keys(config, "config", _TOP)
    paths = _paths(config.get("paths"))
    execution = _execution(config.get("execution"))
    defaults = dict(_keys(config.get("run"), "run", RUN_KEYS))
    check_keys(defaults, "run")  # even a default that every experiment overrides
    # an override file drops an experiment or a figure by setting it to null (the quick profile
    # drops those whose data it cannot have offline)
    experiments_spec = {k: v for k, v in _keys(config.get("experiments"), "experiments", tuple(
        config.get("experiments") or ())).items() if v is not None}
    if not experiments_spec:
        raise ConfigError("experiments: key 'experiments' is empty; allowed: at least one")
    expanded = {name: _expand(name, spec, defaults) for name, spec in experiments_spec.items()}
    runs: dict[str, RunConfig] = {}
    for cfgs in expanded.values():
        runs.update((c.run_id, c) for c in cfgs)
    figures_spec = config.get("figures") or {}
    figures = {name: _figure(name, spec, expanded) for name, spec in figures_spec.items()
               if spec is not None}
    return Plan(
        paths=paths,
        runs=runs,
        experiments={n: tuple(dict.fromkeys(c.run_id for c in cfgs)) for n, cfgs in
                     expanded.items()},
        figures=figures,
        execution=execution,
        bundles=(packed := bundles(runs, execution.planned_bundle_size)),
        jobs=training_jobs(list(packed), execution.bundles_per_job),
        toy=_toy(config.get("toy")),
        claims=_claims_path(config.get("claims")),
        dropped=frozenset(k for k, v in (config.get("experiments") or {}).items() if v is None),
    )
