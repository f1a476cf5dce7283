"""FedTAN (Wang, Shi, Chang 2023, "Why Batch Normalization Damage Federated Learning on Non-IID
Data?"): clients normalize, in every local step and every BN layer, with the statistics of the
union of all clients' current batches, each through its own weights; the gradients with
respect to those statistics are aggregated across clients in the backward pass (layer-wise
aggregation: 3L exchanges per local step for L BN layers, plus the round's model average).

Its layers take client-stacked weights (``clientwise``: fednorm.models.clientwise), so one
forward of a run carries all its clients, and the engine's clientwise rounds
(fednorm.fl.round.Clientwise) step them. ``fedtan_union: first_step`` is the authors' public
code (wangyanmeng/FedTAN, its ``first_local_updating``): the union statistics in the first
local step of a round only, the other E - 1 steps naive BN on each client's own batch, the
running statistics averaged at the round's end (3L + 1 exchanges per round, the count FixBN's
Table 5 quotes), and its SGD restarted after the union step (``FedTAN.py`` builds a fresh
optimizer for the E - 1 naive steps).
"""

from __future__ import annotations

from fednorm.config import RunConfig
from fednorm.norms.layer import FedBatchNorm2d
from fednorm.norms.rules import UnionStats


def layers(cfg: RunConfig) -> dict:
    rule = UnionStats()
    return dict(make_layer=lambda c: FedBatchNorm2d(c, eps=cfg.bn_eps),
                rule_at=lambda step: rule, union_every_step=cfg.fedtan_union == "every_step")
