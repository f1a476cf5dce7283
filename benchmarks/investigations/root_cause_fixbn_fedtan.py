"""Why FixBN falls far below HeteroFL's static BN on Shards, and diverges on IID, in FedTAN's
recipe on the quick digits (experiment ``fedtan_methods``; docs/history.md, "Root causes of the
large contradictions"). A diagnosis, not a speed benchmark.

FixBN (the FixBN paper, §5): naive BN up to the freeze step T*, then every BN layer normalizes,
in training and at test, with the server's aggregated running statistics, which stay fixed.
The quick ``fedtan_methods`` recipe: LeNet width 8, 8x8 digits, 5 clients x 16, E = 5, 40
rounds (200 steps), SGD momentum 0.9 reset every round, weight decay 1e-4, lr 0.1 -> 0.01 at
60 % -> 0.001 at 80 %, T* at 50 % (step 100, lr still 0.1).

This script trains, seed 0 (and 1 with ``--seeds 0 1``):

- the engine's runs of the experiment (fednorm.run.train_and_evaluate), one factor changed at
  a time: the learning rate, the momentum, the weight decay, the freeze step;
- an independent reference in plain PyTorch (benchmarks/plain_fedavg.py): five
  nn.BatchNorm2d LeNets in a Python loop, a
  fresh torch.optim.SGD per client and round, the server averaging every parameter and BN
  buffer after E steps; from T* on its BN layers are put in eval mode while training (they
  normalize with the averaged running statistics and update nothing). It draws the engine's
  batches (fednorm.fl.batches.ClientBatches, same seed) from the engine's split and starts
  from the same initial weights (torch.manual_seed(seed) before building the model), so up to
  float32 rounding it follows the engine's trajectory; it reports the training loss of the
  steps around T* and the first non-finite step.

Run: ``python benchmarks/investigations/root_cause_fixbn_fedtan.py`` (one thread; the runtime
is printed).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import time

import pandas as pd
import torch
import torch.nn.functional as F
from plain_fedavg import DATA, as_dtype, cell, engine, plain_fedavg, quick_run
from torch import nn

from fednorm.data import load_dataset
from fednorm.fl.train import train
from fednorm.models.lenet import LeNet
from fednorm.norms import FedBatchNorm2d, fixbn_freeze_step


def _lenet(cfg):
    return lambda: LeNet(lambda c: nn.BatchNorm2d(c, eps=cfg.bn_eps, momentum=cfg.bn_momentum),
                         cfg.width, cfg.image_size)


def _statistics(model: nn.Module, kind: type[nn.Module]) -> list[torch.Tensor]:
    return [t.detach().clone() for m in model.modules() if isinstance(m, kind)
            for t in (m.running_mean, m.running_var)]


def engine_statistics(cfg, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """The BN running means and variances of the engine's final global model."""
    return _statistics(train(cfg, as_dtype(load_dataset(cfg, DATA), dtype), "cpu").model,
                       FedBatchNorm2d)


def frozen_statistics_check(cfg) -> tuple[float, float]:
    """Which statistics FixBN freezes. (max |difference| between the engine's FixBN statistics
    at the end of training and the engine's naive BN at T* (FixBN is naive BN before T*),
    max relative difference between the engine's naive BN statistics at T* and the reference's
    averaged buffers, both in float64 so that rounding cannot grow into a difference)."""
    at_freeze = dataclasses.replace(cfg, normalizer="bn", steps=fixbn_freeze_step(cfg))
    fixbn, bn = engine_statistics(cfg), engine_statistics(at_freeze)
    bn64 = engine_statistics(at_freeze, torch.float64)
    ref = _statistics(plain_fedavg(at_freeze, _lenet(cfg), torch.float64).model, nn.BatchNorm2d)
    return (max((a - b).abs().max().item() for a, b in zip(fixbn, bn, strict=True)),
            max(((a - b).abs() / b.abs().clamp_min(1e-3)).max().item()
                for a, b in zip(ref, bn64, strict=True)))


def grad_ratio(glob: nn.Module, sample, cfg) -> float:
    """At the weights of T*, the norm of the convolutions' gradient on the clients' batches
    when BN normalizes with the frozen running statistics, over the same with batch
    statistics (naive BN): how much larger FixBN's first frozen steps are."""
    x, y = sample
    b, norms = cfg.batch_size, {}
    for frozen in (False, True):
        net = copy.deepcopy(glob).train()
        for m in net.modules():
            if frozen and isinstance(m, nn.BatchNorm2d):
                m.eval()
        total = 0.0
        for i in range(cfg.n_clients):
            net.zero_grad()
            F.nll_loss(net(x[0, i * b:(i + 1) * b]), y[0, i * b:(i + 1) * b]).backward()
            total += sum(m.weight.grad.norm() ** 2 for m in net.modules()
                         if isinstance(m, nn.Conv2d)).sqrt().item() / cfg.n_clients
        norms[frozen] = total
    return norms[True] / norms[False]


def reference_fixbn(cfg) -> tuple:
    """The plain loop's FixBN: (Reference, training loss around T*, gradient ratio at T*)."""
    freeze, ratio = fixbn_freeze_step(cfg), {}

    def at_freeze(start, glob, sample):
        if start == freeze:
            ratio["value"] = grad_ratio(glob, sample, cfg)

    ref = plain_fedavg(cfg, _lenet(cfg), frozen_bn_from=freeze, on_round=at_freeze)
    window = {s: round(ref.losses[s], 3) for s in range(freeze - 3, freeze + 5)}
    return ref, window, ratio["value"]


PROBES = [  # (label, overrides of the quick run): one factor at a time
    ("recipe (lr 0.1, momentum 0.9, wd 1e-4, T* 50 %)", {}),
    ("lr x 0.5", {"lr": (0.05, 0.005, 0.0005)}),
    ("lr x 0.2", {"lr": (0.02, 0.002, 0.0002)}),
    ("lr x 0.1", {"lr": (0.01, 0.001, 0.0001)}),
    ("momentum 0", {"momentum": 0.0}),
    ("weight decay 0", {"weight_decay": 0.0}),
    ("lr decay at 50 % (T*), 80 %", {"lr_milestones": (100, 160)}),
    ("T* at 60 % (the lr decay)", {"fixbn_freeze": 0.6}),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    began, rows = time.perf_counter(), []
    for split in ("iid", "shards"):
        for seed in args.seeds:
            base = quick_run("fedtan_methods", normalizer="fixbn", partition=split, seed=seed)
            same, ref_gap = frozen_statistics_check(dataclasses.replace(base, fixbn_freeze=0.6))
            print(f"{split} seed {seed}: FixBN's statistics after T* minus naive BN's at T*: "
                  f"max |difference| {same:.1e}; the reference's averaged BN buffers at T* "
                  f"against the engine's, float64: max relative difference {ref_gap:.1e}")
            ref, window, ratio = reference_fixbn(base)
            print(f"{split} seed {seed}: reference FixBN, recipe: test accuracy "
                  f"{100 * ref.accuracy:.1f} %, first non-finite training loss at step "
                  f"{ref.first_nonfinite_step}; training loss around T* = "
                  f"{fixbn_freeze_step(base)}: {window}; conv gradient norm, frozen over "
                  f"batch statistics, at T*: {ratio:.2f}")
            heterofl = engine(quick_run("fedtan_methods", normalizer="heterofl_sbn",
                                        partition=split, seed=seed))
            for label, over in PROBES:
                fix = engine(dataclasses.replace(base, **over))
                bn = engine(dataclasses.replace(base, normalizer="bn", **over))
                rows.append((split, seed, label, cell(fix), cell(bn),
                             cell(heterofl) if not over else ""))
    table = pd.DataFrame(rows, columns=["split", "seed", "probe (engine)", "FixBN", "naive BN",
                                        "HeteroFL"])
    print(table.to_string(index=False))
    print(f"runtime {time.perf_counter() - began:.0f} s (one thread)")


if __name__ == "__main__":
    main()
