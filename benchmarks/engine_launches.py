"""Where a small bundle's time goes: per local step of the engine (a bundle of R runs) beside the
centralized plain loop of make gpu-check (one model, nn.BatchNorm2d, the union batch), the
wall time, the PyTorch operators called (``aten_ops``) and those reaching a kernel
(``dispatched``: below autograd and vmap) and, on CUDA, the kernels launched and the GPU's
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

from fednorm.gpucheck import throughput as tp


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
    keys = ["what", "runs", "images", "wall_ms", "aten_ops", "dispatched"]
    if device.type == "cuda":
        keys += ["kernels", "gpu_busy_ms", "busy_share"]
    print(f"{shape.paper} on {device} (torch {torch.__version__})")
    print("| " + " | ".join(keys) + " |")
    print("|" + "|".join("---" if k == "what" else "---:" for k in keys) + "|")

    def show(row: dict[str, Any]) -> None:  # a row at a time: a killed run keeps its rows
        print("| " + " | ".join(_cell(row.get(k, "")) for k in keys) + " |", flush=True)

    for row in tp.launch_rows(shape, [int(r) for r in args.runs.split(",")], data, settings,
                              args.rounds):
        show(row)
    return 0


def _cell(value: Any) -> str:
    """Counts in full (1,748, not 1.75e+03), times to three digits."""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
