"""Training jobs: how they run (:class:`Execution`), which runs train together (bundles) and
which bundles one job trains, from the config alone."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fednorm.config import (
    CHECKPOINT_MINUTES,
    CUDA_GRAPHS,
    DATA_WORKERS,
    PRECISIONS,
    ConfigError,
    Nullable,
    OneOf,
    RunConfig,
    bundle_key,
    checked_section,
    int_at_least,
    number_in,
)

# A job's runtime from its images (Execution.job_runtime): the rate measured on one bundle, times
# this margin (other jobs on the node, slower data), plus minutes for start-up and data loading.
RUNTIME_MARGIN = 1.25
RUNTIME_START_MINUTES = 5
AUTO_BUNDLE_RUNS = 64  # execution.bundle_size auto: the most runs of a bundle


@dataclass(frozen=True)
class Execution:
    """How training jobs run (the ``execution`` section); none of it changes a run's config or
    id, and only ``precision`` its numbers (by rounding: fednorm.fl.precision)."""

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
    # benchmarks/time_plan_bundle.py or make gpu-check: one number, or one a part of the plan,
    # {"cifar10/resnet20": 26670, ...} (dataset/model: every part's); null: every job asks for
    # `runtime`
    images_per_second: float | Mapping[str, float] | None = None
    max_runtime: int | None = None  # minutes, the partition's limit: no job asks for more
    # Training jobs that share one GPU (Snakemake's local executor): each job still asks for
    # `gpus_per_job` of the resource `gpu`, which counts slots, so run with
    # --resources gpu=<GPUs x jobs_per_gpu>; a job takes the first free slot of the GPUs
    # (fednorm.gpu_slots). Under SLURM each job has its own GPU and this is ignored.
    jobs_per_gpu: int = 1
    # float32 (IEEE), tf32 (CUDA's matmuls and convolutions in TF32) or bf16 (the gradient step
    # under bfloat16 autocast; statistics, aggregation and the optimizer in float32):
    # fednorm.fl.precision; recorded in each run.json
    precision: str = "float32"
    # auto: on CUDA the local step captured once per bundle shape and replayed (a CUDA graph);
    # off (the default until a GPU run shows the graphed step equal to the eager one bit for
    # bit: benchmarks/gpu/run.sh measures it): eager. The CPU always runs it eagerly. Recorded
    # in each run.json
    cuda_graph: str = "off"

    @property
    def job_keys(self) -> dict[str, Any]:
        """What a training job takes besides its bundles (fednorm.run.train_job): the
        arithmetic, the CUDA graph and the GPU's slots."""
        return {"precision": self.precision, "cuda_graph": self.cuda_graph,
                "jobs_per_gpu": self.jobs_per_gpu}

    @property
    def planned_bundle_size(self) -> int:
        """The most runs of one bundle (fednorm.plan.bundles)."""
        return AUTO_BUNDLE_RUNS if self.bundle_size == "auto" else int(self.bundle_size)

    @property
    def together(self) -> str | None:
        """How many runs of a bundle a job trains together: "auto" (as many as fit its
        device's memory), or None (all of them)."""
        return "auto" if self.bundle_size == "auto" else None

    def rate(self, part: tuple[str, str], runs: int | None = None) -> float | None:
        """The training images/s of a bundle of ``runs`` runs of ``part`` (dataset, model):
        ``images_per_second``'s (a curve's at ``runs``, :func:`rate_at`; its fastest where
        ``runs`` is None), or None without one. A part that a mapping does not name is a
        ConfigError (:meth:`check_parts` says so when the plan is built)."""
        rate = self.images_per_second
        if rate is None or not isinstance(rate, Mapping):
            return rate
        key = "/".join(part)
        if key not in rate:
            raise ConfigError(
                f"execution: key 'images_per_second' has no rate for {key!r}, a dataset/model "
                f"of this plan; given: {', '.join(rate) or 'none'}")
        if not isinstance(rate[key], Mapping):
            return float(rate[key])
        curve = {int(r): float(v) for r, v in rate[key].items()}
        return max(curve.values()) if runs is None else rate_at(curve, runs)

    @property
    def by_bundle_size(self) -> bool:
        """Whether some part's rate is a curve (bundle size -> images/s)."""
        rate = self.images_per_second
        return isinstance(rate, Mapping) and any(isinstance(v, Mapping) for v in rate.values())

    def check_parts(self, parts: Iterable[tuple[str, str]]) -> None:
        for part in parts:
            self.rate(part)

    def job_runtime(self, seconds: float | None) -> int:
        """The minutes a training job asks for whose training takes ``seconds`` at
        ``images_per_second`` (None: no rate given): ``runtime``, or RUNTIME_MARGIN times its
        training time plus RUNTIME_START_MINUTES; at most ``max_runtime``. A job cut short by
        its limit saves its state and continues in its next submission (docs/run.md)."""
        minutes = self.runtime if seconds is None \
            else RUNTIME_START_MINUTES + math.ceil(RUNTIME_MARGIN * seconds / 60)
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


def rate_at(curve: Mapping[int, float], runs: int) -> float:
    """Images/s of a bundle of ``runs`` from ``curve`` (bundle size -> images/s measured):
    log-log between two measured sizes; below the smallest, that size's rate a run (no run
    faster than there, a pessimistic guess); above the largest, the largest's rate."""
    sizes = sorted(curve)
    if runs <= sizes[0]:
        return curve[sizes[0]] * runs / sizes[0]
    if runs >= sizes[-1]:
        return curve[sizes[-1]]
    lo = max(r for r in sizes if r <= runs)
    hi = min(r for r in sizes if r >= runs)
    if lo == hi:
        return curve[lo]
    w = (math.log(runs) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp((1 - w) * math.log(curve[lo]) + w * math.log(curve[hi]))


@dataclass(frozen=True)
class Rates:
    """A number that ``number`` allows, or a mapping dataset/model -> such a number or a
    curve: bundle size (an integer >= 1) -> such a number (what make gpu-check measures)."""

    number: Callable[[Any], str | None]

    def __call__(self, value: Any) -> str | None:
        allowed = (f"{self.number(math.nan)}, or a mapping dataset/model -> such a number or "
                   "a mapping bundle size -> such a number, e.g. {cifar10/resnet20: 26670} "
                   "or {cifar10/resnet20: {1: 2399, 16: 16573}}")
        if isinstance(value, Mapping):
            ok = value and all(isinstance(k, str) and k.count("/") == 1 and self._rate(v)
                               for k, v in value.items())
            return None if ok else allowed
        return None if self.number(value) is None else allowed

    def _rate(self, value: Any) -> bool:
        if isinstance(value, Mapping):
            return bool(value) and all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 1
                and self.number(v) is None for r, v in value.items())
        return self.number(value) is None


EXECUTION_RULES: dict[str, Callable[[Any], str | None]] = {
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
    "images_per_second": Nullable(Rates(number_in(0, math.inf, low_open=True))),
    "max_runtime": Nullable(int_at_least(1)),
    "jobs_per_gpu": int_at_least(1),
    "precision": OneOf(PRECISIONS),
    "cuda_graph": OneOf(CUDA_GRAPHS),
}


def load_execution(spec: Any) -> Execution:
    """The ``execution`` section, each key checked by its rule (EXECUTION_RULES), then the
    keys together (:meth:`Execution.check`)."""
    spec = checked_section(spec, "execution", tuple(EXECUTION_RULES))
    for key, value in spec.items():
        problem = EXECUTION_RULES[key](value)
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


def training_jobs(packed: dict[str, tuple[str, ...]], per_job: int,
                  cost: Mapping[str, float]) -> dict[str, tuple[str, ...]]:
    """The bundles in ceil(B / ``per_job``) training jobs of about equal modelled time (each
    run's ``cost``, fednorm.plan.costs: :func:`balanced_jobs`), so that the jobs the cores run
    side by side end together (consecutive bundles left one core idle for the last job's
    length); one bundle a job at ``per_job`` 1. A job's id is its first bundle's, with '+k'
    when k more bundles are in it."""
    if per_job == 1:
        return {b: (b,) for b in packed}
    return balanced_jobs(packed, cost, math.ceil(len(packed) / per_job))


def balanced_jobs(packed: dict[str, tuple[str, ...]], cost: Mapping[str, float], jobs: int
                  ) -> dict[str, tuple[str, ...]]:
    """The bundles cut into at most ``jobs`` training jobs of about equal time (each run's
    ``cost``; longest processing time first: each bundle, the largest first and equal ones by
    id, to the lightest job), so that the jobs running side by side end together; a job's id is
    its first bundle's, with '+k' for k more. A function of ``packed``'s contents and ``cost``,
    not of their order."""
    def seconds(bundle_id: str) -> float:
        return math.fsum(cost.get(r, 0.0) for r in packed[bundle_id])

    load = [0.0] * min(jobs, len(packed))
    members: list[list[str]] = [[] for _ in load]
    for bundle_id in sorted(packed, key=lambda b: (-seconds(b), b)):
        lightest = load.index(min(load))
        members[lightest].append(bundle_id)
        load[lightest] += seconds(bundle_id)
    return {ids[0] + (f"+{len(ids) - 1}" if len(ids) > 1 else ""): tuple(ids)
            for ids in members if ids}
