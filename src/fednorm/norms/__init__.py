"""The normalizer family: each one is a layer factory plus the rule active at each step.

| name      | layer            | rule while training                      |
|-----------|------------------|------------------------------------------|
| `central` | FedBatchNorm2d   | UnionStats (BN on the union batch)       |
| `bn`      | FedBatchNorm2d   | BatchStats (naive BN)                    |
| `fbn`     | FedBatchNorm2d   | FederatedStats (FBN, Algorithm 2)        |
| `fixbn`   | FedBatchNorm2d   | BatchStats, then FrozenStats from T*     |
| `gn`      | nn.GroupNorm     | none (per-sample, nothing to aggregate)  |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from fednorm.config import RunConfig
from fednorm.norms.layer import FedBatchNorm2d, NormContext, norm_context
from fednorm.norms.rules import (
    BatchStats,
    FederatedStats,
    FrozenStats,
    StatRule,
    Stats,
    UnionStats,
)

__all__ = [
    "BatchStats",
    "FedBatchNorm2d",
    "FederatedStats",
    "FrozenStats",
    "NormContext",
    "Normalizer",
    "StatRule",
    "Stats",
    "UnionStats",
    "bn_layers",
    "norm_context",
    "normalizer_for",
]


@dataclass(frozen=True)
class Normalizer:
    name: str
    make_layer: Callable[[int], nn.Module]
    rule_at: Callable[[int], StatRule | None]  # 0-based step -> rule active during that step


def normalizer_for(cfg: RunConfig) -> Normalizer:
    """The normalizer a run config names."""
    if cfg.normalizer == "gn":
        return Normalizer(
            "gn", lambda c: nn.GroupNorm(cfg.gn_groups, c, eps=cfg.bn_eps), lambda step: None
        )
    fixed = {"central": UnionStats(), "bn": BatchStats(), "fbn": FederatedStats()}
    if cfg.normalizer in fixed:
        rule = fixed[cfg.normalizer]
        rule_at = lambda step: rule  # noqa: E731
    else:  # fixbn: exploration with naive BN, then calibration with frozen statistics
        freeze_at = round(cfg.fixbn_freeze * cfg.steps)
        batch, frozen = BatchStats(), FrozenStats()
        rule_at = lambda step: batch if step < freeze_at else frozen  # noqa: E731
    return Normalizer(cfg.normalizer, lambda c: FedBatchNorm2d(c, eps=cfg.bn_eps), rule_at)


def bn_layers(model: nn.Module) -> list[FedBatchNorm2d]:
    """The model's federated BN layers, selected by type; each gets its name as its key."""
    layers = []
    for name, module in model.named_modules():
        if isinstance(module, FedBatchNorm2d):
            module.key = name
            layers.append(module)
    return layers
