"""Operators a local step dispatches, by region: the operators that reach a kernel (below
autograd and vmap, as fednorm.gpucheck.dispatched counts them; views included) of the engine's local
step split into the batch draw, the forward and backward, the optimizer, the server's round
(shared over its E steps) and the rest, beside the plain loop's whole step (docs/speed.md,
"Operators a local step (issue 51)").

    python benchmarks/step_regions.py                       # ResNet-20, FedAvg E = 2, 5 x 4
    python benchmarks/step_regions.py --shape fbn_cnn --runs 1,16

The shapes are make gpu-check's (fednorm.gpucheck.throughput) at small images, width and
batch: the counts of operators do not depend on them (the check's own sizes give the same
counts, in minutes rather than seconds on a CPU).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fednorm.gpucheck import throughput as tp


class Regions(TorchDispatchMode):
    """Counts each dispatched operator under the innermost region entered (:meth:`around`)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = ["rest"]
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[self.stack[-1]] += 1
        return func(*args, **(kwargs or {}))

    def around(self, region: str, fn: Callable) -> Callable:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(region)
            try:
                return fn(*args, **kwargs)
            finally:
                self.stack.pop()
        return wrapped


def shape_of(name: str) -> tp.Shape:
    shape = {s.name: s for s in tp.SHAPES}[name]
    keys = {**shape.keys, "image_size": 8, "width": 4, "batch_size": 4}
    if "hidden" in keys:
        keys["hidden"] = 8
    return tp.Shape(shape.name, shape.paper, keys, shape.part)


def engine_regions(shape: tp.Shape, runs: int, rounds: int = 2) -> dict[str, float]:
    """Per local step of a bundle of ``runs``: operators by region, after two rounds."""
    data = tp.data_for(shape, tp.SMOKE, torch.device("cpu"))
    cfgs = tp.configs(shape, runs, tp.SMOKE)
    trainer = tp.bundle(cfgs, data)
    E = cfgs[0].local_steps
    for k in range(2):
        trainer.round(E * (k + 1))
    mode = Regions()
    trainer.batches.sample = mode.around("draw", trainer.batches.sample)
    trainer._optimize = mode.around("optimizer", trainer._optimize)
    server = "_aggregate" if hasattr(trainer, "_aggregate") else "_commit"
    setattr(trainer, server, mode.around("server / E", getattr(trainer, server)))
    for key, step in list(trainer._steps.items()):
        trainer._steps[key] = mode.around("forward + backward", step)
    with mode:
        for k in range(rounds):
            trainer.round(E * (k + 3))
    out = {region: count / rounds / E for region, count in mode.counts.items()}
    out["total"] = sum(out.values())
    return out


def plain_total(shape: tp.Shape, steps: int = 4) -> float:
    data = tp.data_for(shape, tp.SMOKE, torch.device("cpu"))
    step, _, _ = tp.plain_step(shape, data, tp.SMOKE)
    for k in range(3):
        step(k)
    mode = Regions()
    with mode:
        for k in range(steps):
            step(k + 3)
    return sum(mode.counts.values()) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="resnet20_E2", choices=[s.name for s in tp.SHAPES])
    parser.add_argument("--runs", default="1,16", help="bundle sizes, comma-separated")
    args = parser.parse_args(argv)
    shape = shape_of(args.shape)
    plain = plain_total(shape)
    regions = ["draw", "forward + backward", "optimizer", "server / E", "rest", "total"]
    print(f"{shape.paper}: operators reaching a kernel a local step; plain loop {plain:,.0f}")
    print("| runs | " + " | ".join(regions) + " | x plain |")
    print("|---:|" + "---:|" * (len(regions) + 1))
    for runs in (int(r) for r in args.runs.split(",")):
        row = engine_regions(shape, runs)
        cells = " | ".join(f"{row.get(r, 0):,.0f}" for r in regions)
        print(f"| {runs} | {cells} | {row['total'] / plain:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
