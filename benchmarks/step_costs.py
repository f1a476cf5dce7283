"""Time one local step of a bundle for every training shape of some profiles, and write the
cost table that prices the claims' second stage (fednorm.plan.costs; its docstring says the
shape and the formula).

    python benchmarks/step_costs.py --profile config/config.yaml,config/quick.yaml \\
        --profile config/config.yaml,.test/config.yaml --out src/fednorm/plan/step_costs.csv

Each shape of the profiles' runs is trained as the training loop builds a bundle
(fednorm.fl.train: held-out split, one model per run, partitions, the engine's trainer) at
each ``--sizes`` runs (the shape's first run by run id, on seeds 0 .. R - 1; E = 5 for the
shapes of E > 1), on the run's own dataset, 1 thread on the CPU as a quick job trains: one
round to warm up, then ``--repeats`` timings of at least ``--steps`` local steps, the median
kept. Timed by the process's CPU time (1 thread), not the wall clock: what a step costs, not
what other processes on the machine take from it (on 2 shared cores at a load of 6, the wall
clock gave a median 1.5 times the CPU time, up to 5 times for some shapes). The file's header names
the command, the machine and the date.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from fednorm.config import RunConfig
from fednorm.data import load_dataset
from fednorm.data.arrays import hold_out
from fednorm.data.partition import partition
from fednorm.fl.build import make_trainer, training_batches
from fednorm.models import build_model
from fednorm.norms import normalizer_for
from fednorm.plan import load_plan, merged_config
from fednorm.plan.costs import COLUMNS, FEDAVG_E, Shape, shape_of


def shapes(profiles: list[list[str]]) -> dict[Shape, RunConfig]:
    """Each shape of the profiles' runs -> its first run by run id (their plans without the
    second stage, which reads the table being made)."""
    out: dict[Shape, RunConfig] = {}
    for files in profiles:
        runs = load_plan({**merged_config(files), "stage2": None}).runs
        for run_id in sorted(runs):
            out.setdefault(shape_of(runs[run_id]), runs[run_id])
    return dict(sorted(out.items()))


def step_seconds(cfg: RunConfig, runs: int, data, steps: int, repeats: int) -> float:
    """Seconds of one local step of a bundle of ``runs`` runs of ``cfg``'s shape (seeds 0 ..
    runs - 1): the median of ``repeats`` timings of at least ``steps`` steps, after a round."""
    E = 1 if cfg.local_steps == 1 else FEDAVG_E
    cfgs = [dataclasses.replace(cfg, seed=s, local_steps=E) for s in range(runs)]
    data = hold_out(data, cfg.val_fraction)
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(build_model(c, data.n_classes).to(dtype=data.dtype))
    domains = getattr(data, "train_domain", None)
    parts = [partition(data.train_y, c.partition, c.n_clients, c.heterogeneity, c.seed, domains)
             for c in cfgs]
    trainer = make_trainer(cfgs, models, normalizer_for(cfg), training_batches(cfgs, data, parts))
    trainer.before_training()  # the method's hook (a calibration, for some)
    rounds = -(-steps // E)
    trainer.round(0)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for i in range(rounds):
            trainer.round((i + 1) * E)
        times.append((time.process_time() - start) / (rounds * E))
    return statistics.median(times)


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return f"{cpu}, {platform.system()}, torch {torch.__version__}, 1 thread, CPU time"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="append", required=True,
                        help="a profile's config files, comma-separated, merged in order")
    parser.add_argument("--sizes", default="1,4,16", help="the bundle sizes R timed")
    parser.add_argument("--steps", type=int, default=10, help="local steps a timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    found = shapes([p.split(",") for p in args.profile])
    rows, datasets = [], {}
    for shape, cfg in found.items():
        key = (cfg.dataset, cfg.n_train, cfg.n_test, cfg.image_size, cfg.domains)
        if key not in datasets:
            datasets[key] = load_dataset(cfg, args.data_dir)
        for runs in sizes:
            seconds = step_seconds(cfg, runs, datasets[key], args.steps, args.repeats)
            rows.append([*shape, runs, f"{seconds:.6g}"])
            print(*rows[-1], sep=",", flush=True)
    with open(args.out, "w", newline="") as out:
        out.write(f"# seconds of one local step of a bundle of `runs` runs (fednorm.plan.costs)\n"
                  f"# made by: python benchmarks/step_costs.py "
                  f"{shlex.join(sys.argv[1:])}\n# on: {machine()}, "
                  f"{datetime.date.today().isoformat()}\n")
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows)


if __name__ == "__main__":
    main()
