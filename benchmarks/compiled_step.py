"""The engine's gradient step under torch.compile (``make_trainer(..., compile={"mode": MODE})``,
fednorm.fl.trainer's ``gradient_step``), beside the same bundle run eagerly: images/s, the
seconds its first two rounds take (the compilation), and how far its parameters move from the
eager run's (float32: the same math in another order; ``--check`` runs a small bundle in
float64 after the timings, where the two must agree to 1e-9, and fails if they do not).

On a GPU the ``reduce-overhead`` mode replays the step as CUDA graphs: one launch where the
eager step launches thousands of kernels (docs/speed.md: a ResNet-20 bundle of one run keeps
its GPU busy 17 % of a local step).

    python benchmarks/compiled_step.py --device cuda --sizes 2,16 --modes reduce-overhead
    python benchmarks/compiled_step.py --device cpu --smoke --sizes 2 --modes default
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from fednorm.data.arrays import Arrays
from fednorm.gpucheck import throughput as tp


def compile_args(mode: str | None) -> dict[str, str] | None:
    """torch.compile's arguments for ``mode`` ("default": inductor's default; None: eager)."""
    return None if mode is None else {} if mode == "default" else {"mode": mode}


def compare(shape: tp.Shape, runs: int, data: Arrays, settings: tp.Settings, mode: str,
            rounds: int) -> dict[str, float]:
    """Eager and compiled bundles trained side by side for 2 + ``rounds`` rounds."""
    cfgs = tp.configs(shape, runs, settings)
    E, images = cfgs[0].local_steps, tp.round_images(cfgs[0], runs)
    out: dict[str, float] = {}
    trainers = {}
    for name, m in (("eager", None), (mode, mode)):
        t = trainers[name] = tp.bundle(cfgs, data, compile_args(m))
        out[f"{name}: first 2 rounds, s"] = tp.timed(lambda k, t=t: t.round(E * k),
                                                       data.device, 0, 2)
        seconds = tp.timed(lambda k, t=t: t.round(E * k), data.device, 2, rounds)
        out[f"{name}: images/s"] = images * rounds / seconds
    a, b = (trainers[k].state.params for k in ("eager", mode))
    out["max |param difference|"] = max((a[k] - b[k]).abs().max().item() for k in a)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="resnet20_E2")
    parser.add_argument("--sizes", default="2,16")
    parser.add_argument("--modes", default="reduce-overhead")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--check", action="store_true",
                        help="then: compiled equals eager in float64 (smoke shape, 2 runs)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"{device} (torch {torch.__version__})", flush=True)
    smoke_shapes = {s.name: s for s in tp.SMOKE_SHAPES}
    settings = tp.SMOKE if args.smoke else tp.Settings()
    shapes = smoke_shapes if args.smoke else {s.name: s for s in tp.SHAPES}
    for name in args.shapes.split(","):
        shape = shapes[name]
        data = tp.data_for(shape, settings, device)
        for runs in (int(r) for r in args.sizes.split(",")):
            for mode in args.modes.split(","):
                try:
                    row = compare(shape, runs, data, settings, mode, args.rounds)
                except Exception as err:  # a failure is a row: the next size still runs
                    print(f"| {name} | {runs} | {mode} | {type(err).__name__}: "
                          f"{str(err).splitlines()[0][:300]} |", flush=True)
                    continue
                print(f"| {name} | {runs} | {mode} | "
                      + " | ".join(f"{k}: {v:,.4g}" for k, v in row.items()) + " |", flush=True)
    if args.check:
        data = tp.data_for(smoke_shapes["resnet20_E2"], tp.SMOKE, device)
        data = dataclasses.replace(data, train_x=data.train_x.double(),
                                   test_x=data.test_x.double())
        for mode in args.modes.split(","):
            row = compare(smoke_shapes["resnet20_E2"], 2, data, tp.SMOKE, mode, 2)
            diff = row["max |param difference|"]
            print(f"float64 check, {mode}: max |param difference| {diff:.2e}", flush=True)
            if diff > 1e-9:
                raise SystemExit(f"{mode}: the compiled step differs from the eager one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
