"""``train_and_evaluate(config, out_dir)``: one run in, its files out; ``train_and_write``: the
runs of a bundle in, each run's files out the moment it finishes.

Writes ``metrics.csv`` (one row per evaluation point, columns ``fednorm.metrics.METRIC_COLUMNS``;
the ``norm_error_*`` columns average the layers of ``norm_error.csv``, one row per evaluation
point and BN layer, see :mod:`fednorm.fl.norm_error`; the ``stat_*`` columns sum the layers of
``dynamics.csv``, the FixBN paper's training dynamics, recorded when the run asks for them: see
:mod:`fednorm.fl.dynamics`, NaN and no rows otherwise)
and ``run.json`` (resolved config, run_id, seed, git commit, library versions, device, wall time,
status, the bundle it trained in, ``rows``: each CSV's number of rows, so that a copy cut short
is found, :mod:`fednorm.integrity`; ``math``: execution.precision and cuda_graph, the TF32
flags and autocast dtype they set, fednorm.fl.precision), each atomically, run.json last. The
Snakemake rule calls ``train_job`` (each of a job's bundles with ``train_and_write``); ``fednorm
run`` calls ``train_and_evaluate``.

Resume points (fednorm.fl.resume): a bundle's state is saved every ``checkpoint_minutes`` and
when SIGTERM or SIGUSR1 arrives; the workflow keeps it at ``<results>/resume/<bundle id>.pt``
(fednorm.config.Paths.resume_point), ``fednorm run`` at ``DIR/resume.pt``. A job or command
started again continues from it and its log says "resumed at step N of M"; the bundle's end
deletes it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fednorm import ENGINE_REVISION, __version__
from fednorm.config import CHECKPOINT_MINUTES, DATA_WORKERS, RunConfig, run_config
from fednorm.data import load_dataset
from fednorm.fl import memory
from fednorm.fl import train as training
from fednorm.fl.precision import job_math
from fednorm.fl.resume import Interrupted, ResumeStore
from fednorm.fl.train import DYNAMICS_COLUMNS, LAYER_COLUMNS, TrainResult
from fednorm.gpu_slots import claimed_gpu
from fednorm.io import write_csv, write_json
from fednorm.metrics import METRIC_COLUMNS

RESUME_FILE = "resume.pt"  # fednorm run: the resume point inside the run's directory
log = logging.getLogger("fednorm.run")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@contextmanager
def job_device(device: str, jobs_per_gpu: int = 1) -> Iterator[torch.device]:
    """The device a job trains on, within the block: :func:`resolve_device`, except that
    ``auto`` or ``cuda`` with several GPUs visible is the GPU of the first slot no other job
    holds, ``jobs_per_gpu`` slots a GPU (:func:`fednorm.gpu_slots.claimed_gpu`; when all are
    held, one chosen by process id)."""
    dev = resolve_device(device)
    count = torch.cuda.device_count() if dev.type == "cuda" and dev.index is None else 0
    if count < 2:
        yield dev
        return
    with claimed_gpu(count, per_gpu=jobs_per_gpu) as index:
        yield torch.device("cuda", os.getpid() % count if index is None else index)


def git_commit() -> str:
    """The source tree's commit (with '-dirty' if it has uncommitted changes), or 'unknown'."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _installed(package: str) -> str:
    """A package's installed version, read from its metadata: importing torchvision only for
    its version would cost every training job about two seconds."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(device: torch.device) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "device": str(device),
        "device_name": name or platform.machine(),
        "threads": torch.get_num_threads(),
        "versions": {
            "fednorm": __version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchvision": _installed("torchvision"),
            "pandas": pd.__version__,
            "matplotlib": _installed("matplotlib"),
        },
        "git_commit": git_commit(),
        "engine_revision": ENGINE_REVISION,
    }


def train_and_write(
    cfgs: list[RunConfig], out_dirs: list[str | Path], *, bundle_id: str = "",
    data_dir: str | Path = "data", device: str = "auto", resume_file: str | Path | None = None,
    checkpoint_minutes: float = CHECKPOINT_MINUTES, together: str | None = None,
    data_workers: int = DATA_WORKERS, precision: str = "float32", cuda_graph: str = "off",
    jobs_per_gpu: int = 1,
) -> list[str]:
    """Train the runs of one bundle together (:func:`fednorm.fl.train.train_bundle`) and write
    each run's files into its ``out_dir`` the moment it finishes (a diverged run at its last
    evaluation point, the others at the end), so a job killed mid-way loses no finished run.
    ``run.json`` names the bundle (``bundle_id``, default: the first run's id) and its size;
    ``wall_time_s`` is the time from the bundle's start (in this process) to that run's end.
    Returns the statuses.

    ``resume_file``: the bundle's resume point (fednorm.fl.resume), saved every
    ``checkpoint_minutes`` and when SIGTERM or SIGUSR1 arrives (then
    :class:`fednorm.fl.resume.Interrupted` is raised), continued from at start when it was
    saved for these runs by this code, deleted when the bundle is done.

    ``together``: "auto": as many runs train together as the device's free memory holds
    (measured: fednorm.fl.memory), the others after them; None: all of them. Either way a
    bundle that runs out of memory is split in halves (fednorm.fl.train.train_bundle).

    ``data_workers``: the processes decoding ImageNet-1K's images (fednorm.data.load_dataset;
    the other datasets are in memory); they change nothing in the results.

    ``precision``, ``cuda_graph``, ``jobs_per_gpu``: the execution keys (fednorm.plan.jobs;
    fednorm.fl.precision); run.json's ``math`` records the first two and the flags they set.
    """
    if len(cfgs) != len(out_dirs):
        raise ValueError(f"one output directory per run: {len(cfgs)} runs, {len(out_dirs)} dirs")
    with job_device(device, jobs_per_gpu) as dev, job_math(precision) as math:
        start = time.perf_counter()
        env = {**environment(dev), "math": {**math, "cuda_graph": cuda_graph}}
        bundle = {"id": bundle_id or cfgs[0].run_id, "size": len(cfgs)}
        store = None if resume_file is None else ResumeStore(
            Path(resume_file), every_s=60.0 * checkpoint_minutes,
            code=f"fednorm {__version__}, commit {env['git_commit']}")

        def write(i: int, result: TrainResult) -> None:
            _write_run(cfgs[i], Path(out_dirs[i]), result, time.perf_counter() - start,
                       {**env, "bundle": bundle})

        data = load_dataset(cfgs[0], data_dir, workers=data_workers)
        size = None
        if together == "auto" and len(cfgs) > 1:
            size = memory.runs_together(cfgs, data, dev)
            log.info("bundle %s: %d of its %d runs fit the memory of %s together",
                     bundle["id"], size, len(cfgs), dev)
        with store.signals() if store is not None else nullcontext():
            results = training.train_bundle(cfgs, data, dev, on_finish=write, resume=store,
                                            size=size, precision=precision,
                                            cuda_graph=cuda_graph)
    return [r.status for r in results]


def _write_run(cfg: RunConfig, out_dir: Path, result: TrainResult, wall: float,
               meta: dict[str, Any]) -> None:
    frames = {"metrics.csv": pd.DataFrame(result.rows, columns=list(METRIC_COLUMNS)),
              "norm_error.csv": pd.DataFrame(result.layer_rows, columns=list(LAYER_COLUMNS)),
              "dynamics.csv": pd.DataFrame(result.dynamics_rows, columns=list(DYNAMICS_COLUMNS))}
    for name, frame in frames.items():
        write_csv(out_dir / name, frame)
    write_json(out_dir / "run.json", {  # last: its presence marks the run complete
        "run_id": cfg.run_id,
        "seed": cfg.seed,
        "status": result.status,
        "wall_time_s": round(wall, 3),
        "rows": {name: len(frame) for name, frame in frames.items()},  # fednorm.integrity
        "config": cfg.identity(),
        **meta,
    })


def train_and_evaluate(
    cfg: RunConfig, out_dir: str | Path, data_dir: str | Path = "data", device: str = "auto",
    checkpoint_minutes: float = CHECKPOINT_MINUTES, data_workers: int = DATA_WORKERS,
) -> str:
    """Train one run (a bundle of one) and write its files into ``out_dir``; returns its
    status. Its resume point is ``out_dir/resume.pt`` (:data:`RESUME_FILE`): run again after a
    kill, it continues from there."""
    return train_and_write([cfg], [out_dir], data_dir=data_dir, device=device,
                        resume_file=Path(out_dir) / RESUME_FILE,
                        checkpoint_minutes=checkpoint_minutes, data_workers=data_workers)[0]


def train_job(bundles: Sequence[Mapping[str, Any]], data_dir: str | Path = "data",
              device: str = "auto", checkpoint_minutes: float = CHECKPOINT_MINUTES,
              together: str | None = None, data_workers: int = DATA_WORKERS,
              **execution: Any) -> int:
    """A workflow training job: its bundles one after the other, each a mapping of
    ``bundle_id``, ``runs`` (run configs' identities), ``out_dirs`` and ``resume`` (its resume
    point). Returns the job's exit status: 0, or 128 + the signal's number when SIGTERM or
    SIGUSR1 stopped it (the bundle's state saved, the bundles after it not started).
    ``together``, ``data_workers`` and ``execution`` (precision, cuda_graph, jobs_per_gpu):
    as in :func:`train_and_write`."""
    for bundle in bundles:
        bundle_id = bundle["bundle_id"]
        cfgs = [run_config(values) for values in bundle["runs"]]
        log.info("bundle %s: training %d runs: %s", bundle_id, len(cfgs),
                 [c.run_id for c in cfgs])
        try:
            statuses = train_and_write(cfgs, bundle["out_dirs"], bundle_id=bundle_id,
                                    data_dir=data_dir, device=device,
                                    resume_file=bundle["resume"],
                                    checkpoint_minutes=checkpoint_minutes,
                                    together=together, data_workers=data_workers,
                                    **execution)
        except Interrupted as stop:
            log.warning("bundle %s: %s", bundle_id, stop)
            return stop.exit_code
        for cfg, status in zip(cfgs, statuses, strict=True):
            log.info("bundle %s: %s finished with status %s", bundle_id, cfg.run_id, status)
    return 0
