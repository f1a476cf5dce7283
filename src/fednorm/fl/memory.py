"""How much memory a bundle takes, and how many of its runs fit the device
(``execution.bundle_size: auto``).

A bundle's peak memory is close to linear in its runs: ``fixed + R * per_run`` (the data on the
device and the code's buffers; each run's parameters, momenta, activations and gradients, all
stacked along the run dimension, fednorm.fl.round). :func:`measure` trains a bundle of two
runs and one of four for one short round each (one local step; two under FedAvg, so that its
per-client state is there) with an evaluation, reads their peaks and solves for both terms
(measured on the CPU, FBN's CNN at 10 clients x 50, 32 x 32, 2,000 test images: 2.3, 4.5, 6.5,
8.8 and 13.2 GB at 1, 2, 3, 4 and 6 runs; with 10,000 test images one run's peak is
evaluation's, 3.3 GB, hence no probe of one run). :meth:`Footprint.runs_that_fit` divides the
device's free memory by them.

Peaks are read where the device keeps them: on CUDA PyTorch's own allocator statistics
(``torch.cuda.max_memory_allocated``); on a CPU the process's high-water mark of resident memory
(Linux: ``VmHWM``, reset through ``/proc/self/clear_refs`` after glibc's ``malloc_trim``
returned the memory an earlier probe freed). Elsewhere :func:`measure` returns None
and a bundle trains whole (a CUDA out-of-memory error still splits it: fednorm.fl.train).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from fednorm.config import RunConfig
from fednorm.data import Arrays
from fednorm.fl import train as training

MARGIN = 0.85  # the share of the free memory a bundle may plan to take
# The probe bundles' runs. Not 1: a bundle's peak is the larger of training's (growing with the
# runs) and evaluation's (EVAL_IMAGES images however many runs share them), and one run's is
# often evaluation's, which would make the slope from 1 to 2 runs too small.
PROBE_RUNS = (2, 4)
_PROC = Path("/proc/self")


@dataclass(frozen=True)
class Footprint:
    """A bundle's peak memory in bytes: ``fixed + runs * per_run``."""

    fixed: int
    per_run: int

    def peak(self, runs: int) -> int:
        return self.fixed + runs * self.per_run

    def runs_that_fit(self, free: int, margin: float = MARGIN) -> int:
        """The most runs whose peak stays within ``margin`` of ``free`` bytes; at least 1 (a
        run that does not fit alone fails as it would have)."""
        return max(1, math.floor((margin * free - self.fixed) / max(self.per_run, 1)))


def probe_configs(cfgs: Sequence[RunConfig], runs: int = PROBE_RUNS[-1]) -> list[RunConfig]:
    """``runs`` runs like the bundle's first (with its seed and the next ones), each trained
    for one round of one local step (two under FedAvg: its per-client state) and evaluated."""
    first = cfgs[0]
    E = min(first.local_steps, 2)
    return [dataclasses.replace(first, seed=first.seed + k, local_steps=E, steps=E,
                                eval_every=E, lr_milestones=()) for k in range(runs)]


def measure(cfgs: Sequence[RunConfig], data: Arrays,
            device: torch.device) -> Footprint | None:
    """The footprint of a bundle of ``cfgs`` on ``device``, from two short probe bundles of
    PROBE_RUNS runs (:func:`probe_configs`); None where the device's peak cannot be read."""
    probes = probe_configs(cfgs)
    peaks = [peak_bytes(partial(training.train_bundle, probes[:r], data, device), device)
             for r in PROBE_RUNS]
    if None in peaks:
        return None
    (low, at_low), (high, at_high) = zip(PROBE_RUNS, peaks, strict=True)
    per_run = max(-(-(at_high - at_low) // (high - low)), 1)
    return Footprint(fixed=max(at_low - low * per_run, 0), per_run=per_run)


def peak_bytes(work: Callable[[], object], device: torch.device) -> int | None:
    """The memory ``work()`` took at its peak on ``device`` beyond what was in use before."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        work()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if device.type != "cpu" or not _reset_high_water_mark():
        return None
    before = _status_kb("VmRSS")
    work()
    return 1024 * (_status_kb("VmHWM") - before)


def free_bytes(device: torch.device) -> int | None:
    """The memory free on ``device``: CUDA's free memory (after handing PyTorch's cache back),
    a Linux host's MemAvailable; None where unknown."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(device)[0]
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    found = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.MULTILINE)
    return 1024 * int(found.group(1)) if found else None


def runs_together(cfgs: Sequence[RunConfig], data: Arrays, device: torch.device) -> int:
    """How many runs of the bundle ``cfgs`` to train together on ``device``: as many as its
    free memory holds (:func:`measure`); all of them where that cannot be measured."""
    free = free_bytes(device)
    footprint = measure(cfgs, data, device) if free is not None else None
    if footprint is None:
        return len(cfgs)
    return min(len(cfgs), footprint.runs_that_fit(free))


def _reset_high_water_mark() -> bool:
    """VmHWM := VmRSS, after handing the C allocator's free memory back to the system (glibc's
    malloc_trim): else a probe reuses what an earlier one freed, and its growth looks small."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the reading is on the low side after an earlier probe
    try:
        (_PROC / "clear_refs").write_text("5")  # Linux >= 4.0
        return _status_kb("VmHWM") > 0
    except (OSError, ValueError):
        return False


def _status_kb(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", (_PROC / "status").read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"/proc/self/status has no {field}")
    return int(found.group(1))
