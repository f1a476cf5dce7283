"""Milliseconds a local step of the engine on the CPU (one thread, one run, the best of three
timings of four rounds), at the GPU check's ResNet-20 (FedAvg, E = 2, 5 clients x 20) and FBN
CNN (DSGD, 10 clients x 16) shapes made small: 16x16 images, widths 8 and 16 (docs/speed.md,
"Operators a local step (issue 51)").

    PYTHONPATH=src python benchmarks/step_time.py
"""

from __future__ import annotations

import time

import torch

from fednorm.gpucheck import throughput as tp

SIZES = {"resnet20_E2": dict(image_size=16, width=8, batch_size=20),
         "fbn_cnn": dict(image_size=16, width=16, hidden=32, batch_size=16)}


def step_ms(name: str) -> float:
    shape = {s.name: s for s in tp.SHAPES}[name]
    small = tp.Shape(shape.name, shape.paper, {**shape.keys, **SIZES[name]}, shape.part)
    data = tp.data_for(small, tp.SMOKE, torch.device("cpu"))
    cfgs = tp.configs(small, 1, tp.SMOKE)
    trainer = tp.bundle(cfgs, data)
    E = cfgs[0].local_steps
    trainer.round(0)
    trainer.round(E)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for k in range(4):
            trainer.round(E * (k + 2))
        best = min(best, (time.perf_counter() - start) / 4 / E)
    return 1e3 * best


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in SIZES:
        print(f"{name}: {step_ms(name):.1f} ms a local step")
