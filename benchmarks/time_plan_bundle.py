"""Train and time one bundle of a configured plan, as a Snakemake job would (1 thread): what
one more experiment costs, from one of its bundles, before adding it to a profile, and the
rate to set as execution.images_per_second (docs/run.md).

    python benchmarks/time_plan_bundle.py config/config.yaml config/quick.yaml \\
        --experiment tuning --normalizer hybridbn --data-dir data
    python benchmarks/time_plan_bundle.py config/config.yaml --experiment fbn_gamma \\
        --normalizer fbn --device cuda --threads 4 --steps 500   # a paper bundle, shortened

Picks the first bundle (fednorm.plan.bundles) whose runs all belong to ``--experiment`` and
have ``--normalizer``; trains it with ``fednorm.run.train_and_write`` into ``--out`` (a temporary
folder by default); prints the bundle, its wall time (data loading and training, not Python's
start-up), its training images per second (fednorm.plan.training_images over the wall
time: execution.images_per_second) and each run's lr_scale, split, E and final test and
validation accuracy. ``--steps N`` trains each run N steps instead of its own (its learning-rate
milestones beyond N dropped): the rate of a long bundle from a short part of it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from fednorm.config import RunConfig, with_values
from fednorm.plan import load_plan, merged_config, training_images
from fednorm.run import train_and_write


def shortened(cfg: RunConfig, steps: int) -> RunConfig:
    """``cfg`` trained ``steps`` steps: its milestones (and their step sizes) beyond dropped."""
    kept = [m for m in cfg.lr_milestones if m < steps]
    return with_values(cfg, steps=steps, eval_every=min(cfg.eval_every, steps),
                       lr_milestones=kept, lr=list(cfg.lr[:len(kept) + 1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", help="config/config.yaml [overrides.yaml ...]")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--normalizer", required=True)
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--out", default=None, help="default: a temporary folder")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto, ...")
    parser.add_argument("--steps", type=int, default=None,
                        help="train each run this many steps (default: its own)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    plan = load_plan(merged_config(args.configs))
    if args.experiment not in plan.experiments:
        parser.error(f"--experiment {args.experiment!r}; allowed: one of {list(plan.experiments)}")
    ids = set(plan.experiments[args.experiment])
    found = [(b, m) for b, m in plan.bundles.items()
             if set(m) <= ids and plan.runs[m[0]].normalizer == args.normalizer]
    if not found:
        parser.error(f"no bundle of {args.experiment!r} with normalizer {args.normalizer!r}")
    bundle_id, members = found[0]
    cfgs = [plan.runs[r] for r in members]
    if args.steps is not None:
        cfgs = [shortened(c, args.steps) for c in cfgs]
    images = training_images(cfgs)
    out = Path(args.out or tempfile.mkdtemp(prefix="time_plan_bundle-"))
    start = time.perf_counter()
    statuses = train_and_write(cfgs, [out / c.run_id for c in cfgs], bundle_id=bundle_id,
                            data_dir=args.data_dir, device=args.device)
    wall = time.perf_counter() - start
    print(f"bundle {bundle_id}: {len(cfgs)} runs, {wall:.1f} s wall "
          f"({args.threads} thread{'s' if args.threads > 1 else ''}, {args.device}), files in "
          f"{out}")
    print(f"  {images} training images: {images / wall:.0f} images per second "
          "(execution.images_per_second)")
    for cfg, status in zip(cfgs, statuses, strict=True):
        last = pd.read_csv(out / cfg.run_id / "metrics.csv").iloc[-1]
        print(f"  {cfg.run_id}: lr_scale {cfg.lr_scale:g}, {cfg.regime}, {status}, test "
              f"{last['test_accuracy']:.4f}, val {last['val_accuracy']:.4f}")


if __name__ == "__main__":
    main()
