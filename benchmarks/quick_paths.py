"""CPU milliseconds a local step, the CPU's per-client BatchNorm against the GPU's path run on
the CPU, at the quick profile's own bundles: the first bundle of each (normalizer, model,
local steps, image size) of the BN family, one thread, timed by the process's CPU time (what a
step costs, not what other processes take), the best of 3 timings of 3 rounds after one.

    PYTHONPATH=src python benchmarks/quick_paths.py
"""

from __future__ import annotations

import time

import torch

from fednorm.data import load_dataset
from fednorm.data.arrays import hold_out
from fednorm.fl.build import build
from fednorm.norms import folded
from fednorm.plan.pipeline import load_plan, merged_config

BN_FAMILY = ("bn", "fbn", "central", "fixbn", "gn", "hybridbn", "fedbn")


def step_ms(cfgs, data, cpu_path: bool) -> float:
    E = cfgs[0].local_steps
    with folded._FOLDED.bound(cpu_path):
        trainer = build(cfgs, data)
        trainer.round(0)
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            for k in range(3):
                trainer.round(E * (k + 1))
            best = min(best, (time.process_time() - start) / 3 / E)
    return 1e3 * best


def main() -> None:
    torch.set_num_threads(1)
    plan = load_plan(merged_config(["config/config.yaml", "config/quick.yaml"]))
    shapes: dict[tuple, list] = {}
    for members in plan.bundles.values():
        c = plan.runs[members[0]]
        key = (c.normalizer, c.model, c.local_steps, c.image_size)
        if c.normalizer in BN_FAMILY and key not in shapes:
            shapes[key] = [plan.runs[m] for m in members]
    loaded = {}
    for key, cfgs in shapes.items():
        c = cfgs[0]
        name = (c.dataset, c.n_train, c.n_test, c.image_size)
        if name not in loaded:
            loaded[name] = load_dataset(c, "data")
        data = hold_out(loaded[name], c.val_fraction)
        gpu, cpu = step_ms(cfgs, data, False), step_ms(cfgs, data, True)
        print(f"{key} {len(cfgs)} runs: GPU's path {gpu:.1f} ms, CPU's path {cpu:.1f} ms, "
              f"gain {gpu / cpu:.2f}x", flush=True)


if __name__ == "__main__":
    main()
