"""How much memory a bundle takes, and how many of its runs fit the device
(``execution.bundle_size: auto``).

A bundle's peak memory is close to linear in its runs: ``fixed + R * per_run`` (the data on the
device and the code's buffers; each run's parameters, momenta, activations and gradients, all
stacked along the run dimension, fednorm.fl.engine). :func:`measure` trains a bundle of one run
and one of two for one short round each (one local step; two under FedAvg, so that its
per-client state is there) with an evaluation, reads their peaks and solves for both terms;
:meth:`Footprint.runs_that_fit` divides the device's free memory by them.

Peaks are read where the device keeps them: on CUDA PyTorch's own allocator statistics
(``torch.cuda.max_memory_allocated``); on a CPU the process's high-water mark of resident memory
(Linux: ``VmHWM``, reset through ``/proc/self/clear_refs``), which also counts what the
allocator keeps cached, so an estimate on the safe side. Elsewhere :func:`measure` returns None
and a bundle trains whole (a CUDA out-of-memory error still splits it: fednorm.fl.train).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from fednorm.config import RunConfig
from fednorm.data import Arrays

MARGIN = 0.85  # the share of the free memory a bundle may plan to take
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


def probe_configs(cfgs: Sequence[RunConfig]) -> list[RunConfig]:
    """Two runs like the bundle's first (the second with the next seed when the bundle has one
    run), each trained for one round of one local step (two under FedAvg) and evaluated."""
    first = cfgs[0]
    second = cfgs[1] if len(cfgs) > 1 else dataclasses.replace(first, seed=first.seed + 1)
    E = min(first.local_steps, 2)
    return [dataclasses.replace(c, local_steps=E, steps=E, eval_every=E, lr_milestones=())
            for c in (first, second)]


def measure(cfgs: Sequence[RunConfig], data: Arrays,
            device: torch.device) -> Footprint | None:
    """The footprint of a bundle of ``cfgs`` on ``device``, from two short probe bundles of one
    and two runs (:func:`probe_configs`); None where the device's peak cannot be read."""
    from fednorm.fl.train import train_bundle  # fednorm.fl.train imports nothing from here

    probes = probe_configs(cfgs)
    peaks = [peak_bytes(lambda r=r: train_bundle(probes[:r], data, device), device)
             for r in (1, 2)]
    if None in peaks:
        return None
    one, two = peaks
    per_run = max(two - one, 1)
    return Footprint(fixed=max(one - per_run, 0), per_run=per_run)


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
    try:
        (_PROC / "clear_refs").write_text("5")  # Linux >= 4.0: VmHWM := VmRSS
        return _status_kb("VmHWM") > 0
    except (OSError, ValueError):
        return False


def _status_kb(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", (_PROC / "status").read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"/proc/self/status has no {field}")
    return int(found.group(1))
