"""bf16's effect on accuracy at the quick scale (execution.precision; fednorm.fl.precision): the
same runs of config/quick.yaml trained twice on the CPU, float32 and bf16 (the gradient step
under bfloat16 autocast), and their final test accuracy side by side.

    PYTHONPATH=src python benchmarks/precision_digits.py                  # fbn_gamma, gamma 1
    PYTHONPATH=src python benchmarks/precision_digits.py --experiment fixbn_e1 --seeds 0

Runs: the experiment's runs at the given heterogeneity (if it has that axis) and seeds, each
set of runs sharing a bundle key trained as one bundle, one thread. Prints one row per run
(normalizer, E, seed, float32 and bf16 accuracy in %, their difference) and the mean
difference.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
import yaml

from fednorm.config import bundle_key
from fednorm.data import load_dataset
from fednorm.fl.train import train_bundle
from fednorm.plan import load_plan, merge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="fbn_gamma")
    parser.add_argument("--heterogeneity", type=float, default=1.0)
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = merge(yaml.safe_load(open("config/config.yaml")),
                   yaml.safe_load(open("config/quick.yaml")))
    plan = load_plan(config)
    seeds = {int(s) for s in args.seeds.split(",")}
    cfgs = [plan.runs[r] for r in plan.experiments[args.experiment]
            if plan.runs[r].seed in seeds
            and plan.runs[r].heterogeneity in (args.heterogeneity, None)]
    bundles = defaultdict(list)
    for cfg in cfgs:
        bundles[bundle_key(cfg)].append(cfg)
    data = load_dataset(cfgs[0], config["paths"].get("data", "data"))
    diffs = []
    print("normalizer  E  seed  float32 %  bf16 %  bf16 - float32")
    for members in bundles.values():
        final = {}
        for precision in ("float32", "bf16"):
            began = time.perf_counter()
            results = train_bundle(members, data, "cpu", precision=precision)
            final[precision] = [100 * r.rows[-1]["test_accuracy"] for r in results]
            print(f"  ({len(members)} runs in {time.perf_counter() - began:.1f} s, {precision})")
        for cfg, a, b in zip(members, final["float32"], final["bf16"], strict=True):
            diffs.append(b - a)
            print(f"{cfg.normalizer:<10} {cfg.local_steps:>2} {cfg.seed:>5} {a:>10.1f} "
                  f"{b:>7.1f} {b - a:>+15.1f}")
    print(f"mean bf16 - float32 over {len(diffs)} runs: {sum(diffs) / len(diffs):+.2f} points")


if __name__ == "__main__":
    main()
