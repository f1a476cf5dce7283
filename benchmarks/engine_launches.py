"""Where a small bundle's time goes: per local step of the engine (a bundle of R runs) beside the
centralized plain loop of make gpu-check (one model, nn.BatchNorm2d, the union batch), the
wall time, the PyTorch operators dispatched and, on CUDA, the kernels launched and the GPU's
busy time (the kernels' own time summed). A step whose GPU is busy a small share of its wall
time is bound by launches and Python, not by arithmetic (docs/speed.md, GPU check).

    python benchmarks/engine_launches.py --device cuda                 # ResNet-20, E = 2
    python benchmarks/engine_launches.py --device cpu --smoke          # tiny, on a CPU
    python benchmarks/engine_launches.py --shape fbn_cnn --runs 1,16

The shapes and the engine's bundles are make gpu-check's (fednorm.gpucheck.throughput).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from fednorm.gpucheck import throughput as tp


def profiled(call, steps: int, device: torch.device) -> dict[str, float]:
    """``call(k)`` for k < ``steps`` under the profiler: a step's wall ms, operators, kernels
    and GPU-busy ms (the CUDA kernels' own time)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    tp.sync(device)
    with profile(activities=activities) as prof:
        wall = tp.timed(call, device, 0, steps)
    events = prof.key_averages()
    ops = sum(e.count for e in events if e.key.startswith("aten::"))
    row: dict[str, Any] = {"wall_ms": 1e3 * wall / steps, "aten_ops": ops / steps}
    if device.type == "cuda":
        kernels = [e for e in events if e.device_type.name == "CUDA"]
        busy_us = sum(getattr(e, "self_device_time_total", 0) or
                      getattr(e, "self_cuda_time_total", 0) for e in kernels)
        row.update(kernels=sum(e.count for e in kernels) / steps,
                   gpu_busy_ms=busy_us / 1e3 / steps)
        row["busy_share"] = row["gpu_busy_ms"] / row["wall_ms"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="resnet20_E2")
    parser.add_argument("--runs", default="1,4,16", help="bundle sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="rounds profiled (after 2)")
    parser.add_argument("--smoke", action="store_true", help="the check's tiny shapes")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    settings = tp.SMOKE if args.smoke else tp.Settings()
    shapes = {s.name: s for s in (tp.SMOKE_SHAPES if args.smoke else tp.SHAPES)}
    if args.shape not in shapes:
        parser.error(f"--shape {args.shape!r}: one of {', '.join(shapes)}")
    shape = shapes[args.shape]
    data = tp.data_for(shape, settings, device)
    keys = ["what", "runs", "images", "wall_ms", "aten_ops"]
    if device.type == "cuda":
        keys += ["kernels", "gpu_busy_ms", "busy_share"]
    print(f"{shape.paper} on {device} (torch {torch.__version__})")
    print("| " + " | ".join(keys) + " |")
    print("|" + "|".join("---" if k == "what" else "---:" for k in keys) + "|")

    def show(row: dict[str, Any]) -> None:  # a row at a time: a killed run keeps its rows
        print("| " + " | ".join(f"{row[k]:.3g}" if isinstance(row.get(k), float)
                                else str(row.get(k, "")) for k in keys) + " |", flush=True)

    step, _, images = tp.plain_step(shape, data, settings)
    for k in range(3):
        step(k)
    show({"what": "plain loop, centralized", "runs": 1, "images": images,
          **profiled(step, 5 * args.rounds, device)})
    for runs in (int(r) for r in args.runs.split(",")):
        cfgs = tp.configs(shape, runs, settings)
        trainer = tp.bundle(cfgs, data)
        E = cfgs[0].local_steps
        for k in range(2):
            trainer.round(E * (k + 1))
        row = profiled(lambda k, t=trainer, E=E: t.round(E * (k + 3)), args.rounds, device)
        per_step = {k: v / E for k, v in row.items() if k != "busy_share"}
        show({"what": f"engine, E = {E} (a local step)", "runs": runs,
              "images": tp.round_images(cfgs[0], runs) // E, **per_step,
              **({"busy_share": row["busy_share"]} if "busy_share" in row else {})})
    return 0


if __name__ == "__main__":
    sys.exit(main())
