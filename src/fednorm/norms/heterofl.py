"""HeteroFL's static BN (``heterofl_sbn``; Diao et al. 2021): no running statistics are tracked
while training; (1) a client normalizes with its own batch; (2) it reports nothing; (3) the
server averages the parameters only; (4) before the global model is tested, its statistics are
computed in one pass over the training data (the paper's step (4)): every BN layer's
statistics over the images in batches of ``batch_size``, each normalized with its own
statistics as in training, averaged over the batches (the cumulative average of
nn.BatchNorm2d with momentum None), written as every run's running statistics. A last
incomplete batch is left out; the batches go through in groups, one forward each.
"""

from __future__ import annotations

from typing import Any

import torch

from fednorm import rng
from fednorm.config import RunConfig
from fednorm.norms.hooks import Hooks, Tools
from fednorm.norms.layer import FedBatchNorm2d
from fednorm.norms.rules import BatchStats

IMAGES_A_FORWARD = 4096  # images of one forward of the statistics pass (per run)


def layers(cfg: RunConfig) -> dict:
    return dict(make_layer=lambda c: FedBatchNorm2d(c, eps=cfg.bn_eps),
                rule_at=lambda step: BatchStats(), hooks=StaticStatistics())


class StaticStatistics(Hooks):
    """The statistics pass before each test; none aggregated in training."""

    per_client = True
    tracks_statistics = False

    @torch.no_grad()
    def before_test(self, tools: Tools, data: Any) -> None:
        x = data.train_x  # the training images (fednorm.data.Arrays)
        b = tools.batch_size
        per_forward = max(1, IMAGES_A_FORWARD // b)
        total: dict[str, list] = {}
        count = 0
        usable = (len(x) // b) * b
        key = rng.fold(tools.keys, rng.STATISTICS)  # dropout masks, a stream of their own
        for start in range(0, usable, per_forward * b):
            chunk = x[start: min(usable, start + per_forward * b)]
            groups = len(chunk) // b
            reports = tools.forward(BatchStats(), groups, 1.0, chunk, key, shared_x=True)
            for name, (mean, var) in reports.items():  # (R, groups, C): each batch's own
                sums = total.setdefault(name, [0, 0])
                sums[0], sums[1] = sums[0] + mean.sum(1), sums[1] + var.sum(1)
            count += groups
        for name, (mean, var) in total.items():
            tools.state.stats[f"{name}.running_mean"].copy_(mean / count)
            tools.state.stats[f"{name}.running_var"].copy_(var / count)
