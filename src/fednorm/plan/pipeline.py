"""The plan: the whole configuration validated and expanded into runs, figures, bundles and
jobs (:func:`load_plan`), and what the workflow asks of it (:class:`Plan`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fednorm.config import (
    ConfigError,
    Paths,
    RunConfig,
    ToyConfig,
    check,
    check_keys,
    checked_section,
    int_at_least,
)
from fednorm.inputs import read_yaml
from fednorm.plan.costs import StepCosts, load_step_costs, run_costs
from fednorm.plan.experiments import RUN_KEYS, expand
from fednorm.plan.figure_specs import (
    FIGURE_EXTENSIONS,
    Figure,
    extensions,
    figure_spec,
    matches_where,
)
from fednorm.plan.jobs import (
    Execution,
    bundles,
    gpu_hours,
    load_execution,
    training_images,
    training_jobs,
)
from fednorm.plan.stage2 import Stage2, load_stage2

TOP_KEYS = ("paths", "execution", "run", "experiments", "figures", "toy", "claims",
            "claims_prereg", "seed_offset", "stage2")
TOY_FIGURES = ("fig1a", "fig1b", "fig2a", "fig2b", "fig2c")
TOY_SCATTER_FIGURES = {  # stem -> (scheme, title): fednorm.toy draws them, the report names them
    "fig1a": ("central", "Centralized BN"),
    "fig1b": ("bn", "Naive BN, γ = 0"),
    "fig2a": ("fbn", "FBN, γ = 0"),
    "fig2b": ("fixbn", "FixBN, γ = 0"),
}
TOY_ERROR_SCHEMES = ("fbn", "fixbn", "bn")  # fig2c: the normalization error of each
# each written atomically; run.json last
RUN_FILES = ("metrics.csv", "norm_error.csv", "dynamics.csv", "run.json")


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
    # only is not checked and is judged 'not run' (fednorm.claims.words.check_plan)
    dropped: frozenset[str] = frozenset()
    # the claims' second stage (fednorm.plan.stage2; None: one stage)
    stage2: Stage2 | None = None
    # the cost table the jobs are balanced with (stage2.step_costs; None: the committed one)
    step_costs_table: str | None = None
    # the committed pre-registration the ledger is checked against (fednorm.claims.prereg);
    # None: not checked
    claims_prereg: str | None = None

    def step_costs(self) -> StepCosts:
        """The cost model's table that prices this plan's runs (fednorm.plan.costs)."""
        return load_step_costs(self.step_costs_table)

    def with_runs(self, extra: Mapping[str, tuple[RunConfig, tuple[str, ...]]]) -> Plan:
        """The plan with ``extra`` runs (run id -> (config, the experiments it joins): the
        claims' second stage, fednorm.plan.stage2.stage2_runs), each in its experiments (an
        experiment none of the plan's has is new); bundles, jobs and figures unchanged."""
        runs = {**self.runs, **{r: cfg for r, (cfg, _) in extra.items()}}
        experiments = {name: list(ids) for name, ids in self.experiments.items()}
        for run_id, (_, groups) in extra.items():
            for name in groups:
                members = experiments.setdefault(name, [])
                if run_id not in members:
                    members.append(run_id)
        return dataclasses.replace(self, runs=runs, experiments={
            name: tuple(ids) for name, ids in experiments.items()})

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
        return [self.runs[r] for r in ids if matches_where(self.runs[r], tuple(filters))]

    def toy_files(self) -> list[str]:
        stems = self.toy.stems(self.paths) if self.toy else []
        return [f"{stem}.{ext}" for stem in stems for ext in FIGURE_EXTENSIONS]

    def training_images(self, run_ids: Iterable[str]) -> int:
        return training_images(self.runs[r] for r in run_ids)

    def job_runtime(self, run_ids: Iterable[str]) -> int:
        """The minutes a training job of these runs asks a cluster for (`runtime`): each run
        timed at its bundle's size (:meth:`seconds_in_bundles`) when the config gives a rate."""
        seconds = None if self.execution.images_per_second is None \
            else self.seconds_in_bundles(run_ids, self.execution.rate)
        return self.execution.job_runtime(seconds)

    @cached_property
    def bundle_sizes(self) -> dict[str, int]:
        """Run id -> the number of runs of its bundle (the R it trains at)."""
        return {r: len(ids) for ids in self.bundles.values() for r in ids}

    def seconds_in_bundles(self, run_ids: Iterable[str],
                           rate: Callable[[tuple[str, str], int], float]) -> float:
        """Seconds that the distinct runs of ``run_ids`` train, each at ``rate((dataset,
        model), R)`` training images per second of its bundle of R runs."""
        size = self.bundle_sizes
        return sum(self.runs[r].training_images
                   / rate((self.runs[r].dataset, self.runs[r].model), size[r])
                   for r in dict.fromkeys(run_ids))

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

    def gpu_hours_in_bundles(self, rate: Callable[[tuple[str, str], int], float],
                             parts: Mapping[str, tuple[str, ...]] | None = None
                             ) -> dict[str, float]:
        """As :meth:`gpu_hours`, each run at the rate of its bundle: ``rate((dataset, model),
        R)`` training images per second of a bundle of R runs (the engine trains a bundle's
        runs together, and a small bundle trains far fewer images a second than a large one:
        docs/speed.md, GPU check)."""
        parts = {**(self.paper_parts() if parts is None else parts), "all": tuple(self.runs)}
        return {name: self.seconds_in_bundles(ids, rate) / 3600 for name, ids in parts.items()}

    def needs_cifar10(self) -> bool:
        return any(cfg.dataset == "cifar10" for cfg in self.runs.values())


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


def merged_config(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """The config files at ``paths`` merged in order (later files override earlier ones, as
    Snakemake merges ``--configfile``); InputError naming a file that cannot be read."""
    config: dict[str, Any] = {}
    for path in paths:
        config = merge(config, read_yaml(path, "config file") or {})
    return config


def _toy(spec: Any) -> ToyPlan | None:
    if spec is None:
        return None
    spec = checked_section(spec, "toy", ("settings", "gammas", "seeds", "figures"))
    try:
        settings = ToyConfig(**checked_section(spec.get("settings"), "toy.settings",
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


def _claims_path(value: Any, key: str = "claims",
                 example: str = "a claims file (e.g. config/claims.yaml)") -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise ConfigError(f"config: key '{key}' has value {value!r}; allowed: the path of "
                          f"{example} or null")
    return value


def _paths(spec: Any) -> Paths:
    """``paths``: each a folder, as a non-empty text."""
    spec = checked_section(spec, "paths", tuple(Paths.__dataclass_fields__))
    for key, value in spec.items():
        if not (isinstance(value, str) and value.strip()):
            raise ConfigError(f"paths: key '{key}' has value {value!r}; allowed: a folder "
                              f"(a non-empty text, e.g. '{getattr(Paths, key)}')")
    return Paths(**spec)


def load_plan(config: Mapping[str, Any]) -> Plan:
    """Validate the whole configuration and expand it into runs and figures."""
    config = checked_section(config, "config", TOP_KEYS)
    paths = _paths(config.get("paths"))
    execution = load_execution(config.get("execution"))
    defaults = dict(checked_section(config.get("run"), "run", RUN_KEYS))
    check_keys(defaults, "run")  # even a default that every experiment overrides
    # an override file drops an experiment or a figure by setting it to null (the quick profile
    # drops those whose data it cannot have offline)
    experiments = checked_section(config.get("experiments"), "experiments",
                                  tuple(config.get("experiments") or ()))
    experiments_spec = {k: v for k, v in experiments.items() if v is not None}
    if not experiments_spec:
        raise ConfigError("experiments: key 'experiments' is empty; allowed: at least one")
    expanded = {name: expand(name, spec, defaults) for name, spec in experiments_spec.items()}
    # seed_offset: added to every run's seed (0: the grids' seeds as written); an override with
    # seed_offset: 2 asks the same questions on seeds disjoint from a grid's 0 and 1
    # (docs/claims.md, Verdicts across seeds)
    offset = check("config", "seed_offset", config.get("seed_offset", 0), int_at_least(0))
    if offset:  # every grid's seeds moved by the offset: the same grid on disjoint seeds
        expanded = {name: [dataclasses.replace(c, seed=c.seed + offset) for c in cfgs]
                    for name, cfgs in expanded.items()}
    runs: dict[str, RunConfig] = {}
    for cfgs in expanded.values():
        runs.update((c.run_id, c) for c in cfgs)
    execution.check_parts({(c.dataset, c.model) for c in runs.values()})
    claims_path = _claims_path(config.get("claims"))
    stage2 = load_stage2(config.get("stage2"), offset)  # checked even where unused
    table = stage2.step_costs if stage2 else None
    figures_spec = config.get("figures") or {}
    figures = {name: figure_spec(name, spec, expanded) for name, spec in figures_spec.items()
               if spec is not None}
    return Plan(
        paths=paths,
        runs=runs,
        experiments={n: tuple(dict.fromkeys(c.run_id for c in cfgs)) for n, cfgs in
                     expanded.items()},
        figures=figures,
        execution=execution,
        bundles=(packed := bundles(runs, execution.planned_bundle_size)),
        jobs=training_jobs(packed, execution.bundles_per_job,
                           run_costs(runs, packed, load_step_costs(table))),
        toy=_toy(config.get("toy")),
        claims=claims_path,
        dropped=frozenset(k for k, v in (config.get("experiments") or {}).items() if v is None),
        stage2=stage2 if claims_path else None,  # it serves the claims: none without them
        step_costs_table=table,
        claims_prereg=_claims_path(config.get("claims_prereg"), "claims_prereg",
                                   "a committed pre-registration (config/claims_prereg.json)"),
    )
