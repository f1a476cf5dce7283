"""``train_and_evaluate(config, out_dir)``: one run in, its files out.

Writes ``metrics.csv`` (one row per evaluation point, columns ``fednorm.fl.train.METRIC_COLUMNS``;
the ``norm_error_*`` columns average the layers of ``norm_error.csv``, one row per evaluation
point and BN layer, see :mod:`fednorm.fl.norm_error`)
and ``run.json`` (resolved config, run_id, seed, git commit, library versions, device, wall time,
status), each atomically. The Snakemake rule and ``fednorm run`` both call this function.
"""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fednorm import __version__
from fednorm.config import RunConfig
from fednorm.data import load_dataset
from fednorm.fl.train import LAYER_COLUMNS, METRIC_COLUMNS, train
from fednorm.io import write_csv, write_json


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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


def environment(device: torch.device) -> dict[str, Any]:
    import matplotlib
    import torchvision

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "device": str(device),
        "device_name": name or platform.machine(),
        "threads": torch.get_num_threads(),
        "versions": {
            "fednorm": __version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pandas": pd.__version__,
            "matplotlib": matplotlib.__version__,
        },
        "git_commit": git_commit(),
    }


def train_bundle(
    cfgs: list[RunConfig], out_dirs: list[str | Path], *, bundle_id: str = "",
    data_dir: str | Path = "data", device: str = "auto",
) -> list[str]:
    """Train the runs of one bundle together and write each run's files into its ``out_dir``
    the moment it finishes; ``run.json`` names the bundle. Returns the runs' statuses.

    PLACEHOLDER (interface only): trains the runs one after the other.
    """
    return [train_and_evaluate(c, d, data_dir, device, bundle_id=bundle_id)
            for c, d in zip(cfgs, out_dirs, strict=True)]


def train_and_evaluate(
    cfg: RunConfig, out_dir: str | Path, data_dir: str | Path = "data", device: str = "auto",
    bundle_id: str = "",
) -> str:
    """Train one run and write its files into ``out_dir``; returns the run's status."""
    out_dir = Path(out_dir)
    dev = resolve_device(device)
    start = time.perf_counter()
    data = load_dataset(cfg, data_dir)
    result = train(cfg, data, dev)
    wall = time.perf_counter() - start
    write_csv(out_dir / "metrics.csv", pd.DataFrame(result.rows, columns=list(METRIC_COLUMNS)))
    write_csv(out_dir / "norm_error.csv",
              pd.DataFrame(result.layer_rows, columns=list(LAYER_COLUMNS)))
    write_json(out_dir / "run.json", {
        "run_id": cfg.run_id,
        "seed": cfg.seed,
        "status": result.status,
        "bundle": {"id": bundle_id or cfg.run_id, "size": 1},
        "wall_time_s": round(wall, 3),
        "config": cfg.identity(),
        **environment(dev),
    })
    return result.status
