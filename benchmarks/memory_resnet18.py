"""Peak host memory of one training step of ResNet-18 runs through the engine, on the CPU: what
one run adds to a bundle (fednorm.fl.train.train_bundle) at the FixBN paper's shapes.

    python benchmarks/memory_resnet18.py --image-size 64 --clients 10 --runs 1
    python benchmarks/memory_resnet18.py --image-size 64 --clients 10 --runs 2
    python benchmarks/memory_resnet18.py --image-size 224 --clients 1 --runs 1 --classes 1000
    python benchmarks/memory_resnet18.py --image-size 224 --clients 2 --runs 1 --classes 1000
    python benchmarks/memory_resnet18.py --image-size 224 --clients 100 --participation 0.1 \
        --classes 1000        # ImageNet-1K's Table 2: 10 of 100 clients a round

One process per measurement (peak resident memory only grows): it builds R runs of ResNet-18
(width 64, 200 or 1,000 classes, FixBN's normalizer, FedAvg with partial participation: the
per-client path every Tiny-ImageNet run takes; ``--participation``, 0.5 by default, of the
``--clients`` train each round, and only they compute), random images of the clients'
batches, and takes one step (one forward and backward). Printed: the resident memory after
setting up and the peak during the step (MB, ``resource.getrusage``: Linux reports
kilobytes), their difference, and that difference per image of the step (participants x batch
x runs). The step's
memory holds each participant's copy of the parameters, its gradients and momentum (linear in
the participants) and the activations (linear in the images); the set-up holds every client's
momentum buffer (n x the parameters: 4.7 GB for ResNet-18's 11.7 M parameters x 100 clients)
and the random images of all clients. docs/history.md has the numbers.
"""

from __future__ import annotations

import argparse
import resource

import torch

from fednorm.config import run_config
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.models import build_model
from fednorm.norms import normalizer_for


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--normalizer", default="fixbn")
    parser.add_argument("--participation", type=float, default=0.5,
                        help="the fraction of --clients that train each round (< 1)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    n, b, s = args.clients, args.batch, args.image_size
    cfgs = [run_config({
        "dataset": "synthetic", "n_train": n * b, "n_test": 1, "image_size": s,
        "model": "resnet18", "width": 64, "normalizer": args.normalizer, "gn_groups": 2,
        "n_clients": n, "participation": args.participation, "local_steps": 1, "batch_size": b,
        "partition": "iid", "heterogeneity": None, "steps": 2, "lr": [0.02],
        "lr_milestones": [], "momentum": 0.9, "momentum_convention": "pytorch",
        "seed": seed}) for seed in range(args.runs)]
    x = torch.randn(n * b, 3, s, s)
    y = torch.randint(0, args.classes, (n * b,))
    parts = list(torch.arange(n * b).chunk(n))
    models = [build_model(c, args.classes) for c in cfgs]
    trainer = make_trainer(cfgs, models, normalizer_for(cfgs[0]),
                           ClientBatches(x, y, [parts] * args.runs, b, [c.seed for c in cfgs]))
    before = peak_mb()
    trainer.round(0)
    after = peak_mb()
    m = cfgs[0].participants
    images = m * b * args.runs
    print(f"ResNet-18 {s}x{s}, {args.runs} run(s) x {m} of {n} clients x {b} images = {images}: "
          f"set up {before:.0f} MB, peak in the step {after:.0f} MB, step +{after - before:.0f} "
          f"MB = {(after - before) / images:.2f} MB per image")


if __name__ == "__main__":
    main()
