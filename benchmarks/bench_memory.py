"""Peak memory of a bundle at the papers' shapes: what one run adds, and how many runs a device
holds (execution.bundle_size; ``auto`` does this measurement in each job, fednorm.fl.memory).

    python benchmarks/bench_memory.py                       # every shape, on the CPU
    python benchmarks/bench_memory.py --shape resnet20-5x20 --check 4
    python benchmarks/bench_memory.py --device cuda --free-gib 80

For each shape it builds runs as the paper grid does (the dataset replaced by random images of
the same size and count: memory depends on shapes, not pixels; EVAL_IMAGES test images, as many
as one evaluation forward takes, so its peak is the full test set's) and calls
:func:`fednorm.fl.memory.measure`: a bundle of one run and one of two, each one short round
(two local steps under FedAvg) and an evaluation of the test set, read at their peak (CUDA's
allocator on a GPU; the process's resident high-water mark on a CPU). Printed per shape: the
fixed and per-run megabytes, and the runs that fit ``--free-gib`` (default: an 80 GB H100's).
``--n-test 512``: a faster run on a CPU (the evaluation's peak may then be missed, not the
per-run part). ``--check R`` also measures a bundle of R runs and prints it beside fixed +
R x per-run, the estimate ``auto`` trusts; ``--runs R`` measures only a bundle of R runs (a
shape whose 4-run probe does not fit the machine).
"""

from __future__ import annotations

import argparse
import dataclasses
from functools import partial

import torch

from fednorm.config import run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl import memory
from fednorm.fl.evaluate import EVAL_IMAGES
from fednorm.fl.train import train_bundle

MB = 2**20
# name -> the run's keys (the paper grid's shapes: fednorm.config defaults otherwise)
SHAPES = {
    # FBN: its CNN, CIFAR-10, 10 clients x batch 50, DSGD (E = 1)
    "fbn_cnn-10x50": dict(model="fbn_cnn", normalizer="fbn", n_clients=10, batch_size=50,
                          local_steps=1, image_size=32, n_train=50000),
    # FixBN: ResNet-20, CIFAR-10, 5 clients x batch 20, FedAvg
    "resnet20-5x20": dict(model="resnet20", normalizer="fixbn", n_clients=5, batch_size=20,
                          local_steps=100, image_size=32, n_train=50000),
    # FedTAN's setting: ResNet-20, 5 clients x batch 128, naive BN and FedTAN
    "resnet20-5x128": dict(model="resnet20", normalizer="bn", n_clients=5, batch_size=128,
                           local_steps=10, image_size=32, n_train=50000),
    "resnet20-5x128-fedtan": dict(model="resnet20", normalizer="fedtan", n_clients=5,
                                  batch_size=128, local_steps=10, image_size=32, n_train=50000),
    # FixBN on Tiny-ImageNet: ResNet-18, 64 x 64, 10 clients x batch 20, half of them a round
    # (20,000 of its 100,000 training images: the other 80,000 add 3.7 GiB to the fixed part
    # in float32)
    "resnet18-10x20-64px": dict(model="resnet18", width=64, normalizer="fixbn", n_clients=10,
                                batch_size=20, local_steps=100, participation=0.5,
                                image_size=64, n_train=20000),
}
BASE = dict(dataset="synthetic", n_test=EVAL_IMAGES, partition="iid", heterogeneity=None,
            steps=200, lr=[0.05], lr_milestones=[], momentum=0.9, gn_groups=2, seed=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(SHAPES), action="append")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--free-gib", type=float, default=80.0)
    parser.add_argument("--check", type=int, default=0, metavar="R")
    parser.add_argument("--runs", type=int, default=0, metavar="R",
                        help="only the peak of one probe bundle of R runs (where 4 do not fit)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-test", type=int, default=EVAL_IMAGES,
                        help="test images (fewer: a faster evaluation, and its peak left out "
                             "when it is below training's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    for name in args.shape or list(SHAPES):
        cfg = run_config({**BASE, **SHAPES[name], "n_test": args.n_test})
        data = colour_classes(n_train=cfg.n_train, n_test=cfg.n_test,
                              image_size=cfg.image_size, seed=0)
        if args.runs:
            probes = memory.probe_configs([cfg], args.runs)
            peak = memory.peak_bytes(partial(train_bundle, probes, data, device), device)
            print(f"{name}: {args.runs} run(s): peak {peak / MB:,.0f} MB", flush=True)
            continue
        footprint = memory.measure([cfg], data, device)
        if footprint is None:
            raise SystemExit(f"the peak memory of {device} cannot be read here")
        fits = footprint.runs_that_fit(int(args.free_gib * 2**30))
        line = (f"{name}: fixed {footprint.fixed / MB:,.0f} MB, per run "
                f"{footprint.per_run / MB:,.0f} MB; {fits} runs fit {args.free_gib:g} GiB")
        if args.check > 2:
            probes = [dataclasses.replace(memory.probe_configs([cfg])[0], seed=s)
                      for s in range(args.check)]
            peak = memory.peak_bytes(partial(train_bundle, probes, data, device), device)
            line += (f"; {args.check} runs: measured {peak / MB:,.0f} MB, estimated "
                     f"{footprint.peak(args.check) / MB:,.0f} MB")
        print(line, flush=True)


if __name__ == "__main__":
    main()
