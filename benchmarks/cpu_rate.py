"""Images per second on one CPU thread at the quick profile's shapes (config/quick.yaml): the
engine at 1 and 16 runs against a plain loop of one run (an ``nn.Module`` with
``nn.BatchNorm2d``, ``torch.optim.SGD``, one step on the union of the clients' batches: the
same images a local step of the engine's run trains on), in one process, the best of
``--repeats`` interleaved timings each, so that the ratios are measured together
(docs/speed.md, "The CPU's rate").

    PYTHONPATH=src python benchmarks/cpu_rate.py
    PYTHONPATH=src python benchmarks/cpu_rate.py --shapes resnet20,lenet8 --runs 1,16
    PYTHONPATH=src python benchmarks/cpu_rate.py --gpu-path   # also the GPU's path, on the CPU

The builders and the plain loop are the GPU check's (fednorm.gpucheck.throughput); the data
are synthetic images of the shape's size. images/s: the engine's R x clients x batch x E a
round over the round's time; the plain loop's clients x batch a step over the step's time.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fednorm.gpucheck import throughput as tp
from fednorm.norms import folded

# FixBN's quick recipe (config/quick.yaml, &fixbn_quick over config.yaml's &fixbn): the keys
# that shape the computation
_FIXBN = dict(n_clients=5, batch_size=20, momentum=0.9, momentum_convention="pytorch",
              weight_decay=1e-4, augment="none", partition="iid", heterogeneity=None,
              normalizer="bn", width=8)
_PART = ("mnist5k", "quick")
SHAPES = {
    "fbn_cnn": tp.Shape("fbn_cnn", "FBN's CNN w8, 8x8, 10 x 16, DSGD (fbn)",
                        dict(model="fbn_cnn", width=8, hidden=32, image_size=8, n_clients=10,
                             batch_size=16, normalizer="fbn", partition="gamma",
                             heterogeneity=0.5), _PART),
    "lenet8": tp.Shape("lenet8", "LeNet w8, 8x8, 5 x 20, FedAvg E = 5 (FixBN's)",
                       dict(_FIXBN, model="lenet", image_size=8, local_steps=5), _PART),
    "lenet16_E1": tp.Shape("lenet16_E1", "LeNet w8, 16x16, 5 x 20, E = 1 (DSGD; the comparison)",
                           dict(_FIXBN, model="lenet", image_size=16, local_steps=1), _PART),
    "lenet16_E5": tp.Shape("lenet16_E5", "LeNet w8, 16x16, 5 x 20, FedAvg E = 5 (the comparison)",
                           dict(_FIXBN, model="lenet", image_size=16, local_steps=5), _PART),
    "digits": tp.Shape("digits", "FedBN's digits network w8, 16x16, 5 x 20, FedAvg E = 5",
                       dict(_FIXBN, model="digits_cnn", image_size=16, local_steps=5), _PART),
    "resnet20": tp.Shape("resnet20", "ResNet-20 w4, 8x8, 5 x 20, FedAvg E = 5 (FixBN's Table 4)",
                         dict(_FIXBN, model="resnet20", width=4, image_size=8, local_steps=5),
                         _PART),
}
SETTINGS = tp.Settings(n_train=2000, n_test=100)


def timed_best(calls: dict[str, tuple[callable, int]], repeats: int, target_s: float
               ) -> dict[str, float]:
    """Images/s of each (call(k), images a call), the best of ``repeats`` timings of as many
    calls as fill about ``target_s``, the variants interleaved within each repeat."""
    counts, first = {}, {}
    for name, (call, _) in calls.items():  # warm-up, then one call to size the timings
        call(0)
        start = time.perf_counter()
        call(1)
        counts[name] = max(1, round(target_s / (time.perf_counter() - start)))
        first[name] = 2
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, (call, _) in calls.items():
            start = time.perf_counter()
            for k in range(counts[name]):
                call(first[name] + k)
            best[name] = min(best[name], (time.perf_counter() - start) / counts[name])
            first[name] += counts[name]
    return {name: images / best[name] for name, (_, images) in calls.items()}


def rates(shape: tp.Shape, runs: list[int], repeats: int, target_s: float,
          gpu_path: bool = False) -> dict[str, float]:
    """{"plain": images/s, "R": images/s of the engine at R runs, ...}, measured together;
    ``gpu_path``: also "R gpu", the engine with the GPU's per-client BatchNorm
    (fednorm.norms.folded.gpu_path) on the CPU."""
    data = tp.data_for(shape, SETTINGS, torch.device("cpu"))
    step, _, images = tp.plain_step(shape, data, SETTINGS)
    calls = {"plain": (step, images)}
    for R in runs:
        cfgs = tp.configs(shape, R, SETTINGS)
        trainer = tp.bundle(cfgs, data)
        E = cfgs[0].local_steps
        calls[str(R)] = (lambda k, t=trainer, E=E: t.round(E * k), tp.round_images(cfgs[0], R))
        if gpu_path:
            def on_gpu_path(k, t=trainer, E=E):
                with folded.gpu_path():
                    t.round(E * k)
            calls[f"{R} gpu"] = (on_gpu_path, tp.round_images(cfgs[0], R))
    return timed_best(calls, repeats, target_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of "
                        + ", ".join(SHAPES))
    parser.add_argument("--runs", default="1,16", help="bundle sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-s", type=float, default=1.0, help="seconds a timing")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gpu-path", action="store_true",
                        help="also the engine with the GPU's per-client BatchNorm, on the CPU")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = [int(r) for r in args.runs.split(",")]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); images/s, best of "
          f"{args.repeats}; engine / plain in brackets")
    cols = [str(R) for R in runs] + ([f"{R} gpu" for R in runs] if args.gpu_path else [])
    print("| shape | plain loop | " + " | ".join(
        f"engine, {c.split()[0]} run{'s' * (c.split()[0] != '1')}"
        + (", GPU's path" if c.endswith("gpu") else "") for c in cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        got = rates(shape, runs, args.repeats, args.target_s, args.gpu_path)
        cells = " | ".join(f"{got[c]:,.0f} ({got[c] / got['plain']:.2f}x)" for c in cols)
        print(f"| {shape.paper} | {got['plain']:,.0f} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
