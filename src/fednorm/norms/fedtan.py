"""FedTAN (Wang, Shi, Chang 2023, "Why Batch Normalization Damage Federated Learning on Non-IID
Data?"): clients normalize, in every local step and every BN layer, with the statistics of the
union of all clients' current batches, each through its own weights; the gradients with
respect to those statistics are aggregated across clients in the backward pass (layer-wise
aggregation: 3L exchanges per local step for L BN layers, plus the round's model average).

Its layers take client-stacked weights (``stacked_weights``: fednorm.models.clientwise), so
one forward of a run carries all its clients, and the engine's stacked-client rounds
(fednorm.fl.round.StackedClients) step them. ``fedtan_union: first_step`` is the authors' public
code (wangyanmeng/FedTAN, its ``first_local_updating``): the union statistics in the first
local step of a round only, the other E - 1 steps naive BN on each client's own batch, the
running statistics averaged at the round's end (3L + 1 exchanges per round, the count FixBN's
Table 5 quotes), and its SGD restarted after the union step (``FedTAN.py`` builds a fresh
optimizer for the E - 1 naive steps).
"""

from __future__ import annotations

from fednorm.config import RunConfig
from fednorm.norms.layer import FedBatchNorm2d
from fednorm.norms.rules import BatchStats, UnionStats


def layers(cfg: RunConfig) -> dict:
    """FedTAN's layers and rule: the union's statistics in every step, or (``fedtan_union:
    first_step``) in a round's first step and naive BN in the others (the engine fuses a
    round's leading steps under its first step's rule: fednorm.fl.round.StackedClients)."""
    union, own = UnionStats(), BatchStats()
    every, E = cfg.fedtan_union == "every_step", cfg.local_steps
    return dict(make_layer=lambda c: FedBatchNorm2d(c, eps=cfg.bn_eps),
                rule_at=lambda step: union if every or step % E == 0 else own)
