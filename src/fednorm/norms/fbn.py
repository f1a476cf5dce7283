"""FBN's first-batch calibration (``fbn_init: first_batch``): before training, every BN
layer's shared statistics are set to those of one union batch of all clients (beta = 1, no
parameter update); the batch is the sampler's draw of step -1, before any training step."""

from __future__ import annotations

from fednorm import rng
from fednorm.norms.hooks import Hooks, Tools
from fednorm.norms.rules import UnionStats


class FirstBatch(Hooks):
    def before_training(self, tools: Tools) -> None:
        x, _ = tools.batches.sample(-1)
        reports = tools.forward(UnionStats(), tools.n, 1.0, x, rng.fold(tools.keys, -1))
        tools.commit(reports, UnionStats(), 1.0)
