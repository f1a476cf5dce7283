"""Runs per second of run bundles (R runs trained together in one process, vectorized over
runs) against the same R runs each in its own process, start-up included.

    python benchmarks/bench_bundles.py --device cpu                 # 2-core CPU: small sizes
    python benchmarks/bench_bundles.py --models quick,fbn_cnn,resnet20 --sizes 1,4,16,64

For each model and each R: (a) one process that imports fednorm, loads the data and trains R
runs with ``fednorm.run.train_and_write`` (different seeds, one bundle), writing their files;
(b) R processes one after the other, each ``fednorm run`` of one of those runs (what
``execution.bundle_size: 1`` does per Snakemake job). Both are timed from the process start, so
(b) pays R start-ups (import torch, CUDA init, data) and (a) pays one. The runs are short
(``--steps``), as the quick profile's are; the ratio column is (b) / (a) time.
Models: ``quick`` (the quick profile: width-8 CNN on 8x8 synthetic images, 10 clients x 16),
``fbn_cnn`` (the FBN paper's CNN, 10 clients x 50, 32x32), ``resnet20`` (FixBN's setting:
ResNet-20, 5 clients x 20, FedAvg with E = ``--local-steps``), ``resnet18`` (FixBN's
Tiny-ImageNet setting: ResNet-18 at 64x64, 10 clients x 20, 5 a round, E = ``--local-steps``);
synthetic data of those shapes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

MODELS = {
    "quick": dict(image_size=8, width=8, hidden=32, n_clients=10, batch_size=16,
                  n_train=2000, n_test=1000),
    "fbn_cnn": dict(image_size=32, width=64, hidden=128, n_clients=10, batch_size=50,
                    n_train=10000, n_test=1000),
    "resnet20": dict(model="resnet20", image_size=32, width=16, n_clients=5, batch_size=20,
                     n_train=10000, n_test=1000, lr=[0.02], lr_milestones=[], momentum=0.9,
                     momentum_convention="pytorch", weight_decay=1e-4, partition="iid",
                     heterogeneity=None),
    # FixBN on Tiny-ImageNet: ResNet-18 (ImageNet stem) at 64x64, 10 clients x 20, 5 a round,
    # ImageNet's crop and flip (the rate r of docs/history.md's GPU-hours)
    "resnet18": dict(model="resnet18", image_size=64, width=64, n_clients=10, participation=0.5,
                     batch_size=20, n_train=2000, n_test=200, lr=[0.02], lr_milestones=[],
                     momentum=0.9, momentum_convention="pytorch", weight_decay=1e-4,
                     augment="resized_crop_flip", partition="iid", heterogeneity=None),
}

BUNDLE = """
import sys, torch, yaml
from fednorm.config import run_config
from fednorm.run import train_and_write
spec = yaml.safe_load(open(sys.argv[1]))
torch.set_num_threads(spec["threads"])
cfgs = [run_config(v) for v in spec["runs"]]
train_and_write(cfgs, [f"{spec['out']}/{c.run_id}" for c in cfgs], data_dir="data",
             device=spec["device"], bundle_id="bench")
"""


def runs(model: str, size: int, steps: int, local_steps: int) -> list[dict]:
    base = {"dataset": "synthetic", "normalizer": "bn", "steps": steps, "eval_every": steps,
            "partition": "gamma", "heterogeneity": 0.5, **MODELS[model]}
    if model in ("resnet20", "resnet18"):
        base["local_steps"] = local_steps
    return [{**base, "seed": seed} for seed in range(size)]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="quick,fbn_cnn,resnet20")
    parser.add_argument("--sizes", default="1,4,16")
    parser.add_argument("--steps", type=int, default=20, help="training steps of each run")
    parser.add_argument("--local-steps", type=int, default=10, help="E for resnet20, resnet18")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-processes", type=int, default=16,
                        help="largest R timed as R processes (larger: bundles only)")
    args = parser.parse_args()
    print(f"device {args.device}, threads {args.threads}, {args.steps} steps per run")
    print("| model | R | bundle: s | runs/s | R processes: s | runs/s | bundle speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    # untimed: the first process after a while pays a cold file cache (torch's libraries)
    subprocess.run([sys.executable, "-c", "import torch, fednorm.run"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                specs = runs(model, size, args.steps, args.local_steps)
                spec = Path(tmp, "bundle.yaml")
                spec.write_text(yaml.safe_dump({"runs": specs, "out": f"{tmp}/b",
                                                "threads": args.threads,
                                                "device": args.device}))
                t_bundle = timed([sys.executable, "-c", BUNDLE, str(spec)])
                t_procs = float("nan")
                if size <= args.max_processes:
                    t_procs = 0.0
                    for i, values in enumerate(specs):
                        one = Path(tmp, f"run{i}.yaml")
                        one.write_text(yaml.safe_dump(values))
                        t_procs += timed([sys.executable, "-m", "fednorm.cli", "run", str(one),
                                          "--out", f"{tmp}/p{i}", "--device", args.device,
                                          "--threads", str(args.threads)])
                print(f"| {model} | {size} | {t_bundle:.1f} | {size / t_bundle:.3f} | "
                      f"{t_procs:.1f} | {size / t_procs:.3f} | {t_procs / t_bundle:.2f}x |",
                      flush=True)


if __name__ == "__main__":
    main()
