"""The normalizer family: each one is a layer factory plus the rule active at each step.

| name      | layer (convolution)             | rule while training                      |
|-----------|---------------------------------|------------------------------------------|
| `central` | FedBatchNorm2d                  | UnionStats (BN on the union batch)       |
| `bn`      | FedBatchNorm2d                  | BatchStats (naive BN)                    |
| `fbn`     | FedBatchNorm2d                  | FederatedStats (FBN, Algorithm 2)        |
| `fixbn`   | FedBatchNorm2d                  | BatchStats, then FrozenStats from T*     |
|           |                                 | (on a round boundary: fixbn_freeze_step) |
|           |                                 | fixbn_fix: affine -> BatchStats always,  |
|           |                                 | and gamma, beta frozen from T*           |
| `gn`      | nn.GroupNorm                    | none (per-sample, nothing to aggregate)  |
| `gn_ws`   | nn.GroupNorm (WSConv2d convs)   | none (per-sample; WS acts on weights)    |
| `ln`      | LayerNorm2d                     | none (per-sample, nothing to aggregate)  |
| `in`      | InstanceNorm2d                  | none (per-sample, nothing to aggregate)  |
| `fixup`   | none: FixupResNet20             | none (no normalization at all)           |
| `fedtan`  | FedBatchNorm2d, clientwise model| UnionStats through each client's weights |
| `fedbn`   | FedBatchNorm2d                  | BatchStats; statistics, gamma, beta local|
| `silobn`  | FedBatchNorm2d                  | BatchStats; statistics local             |
| `heterofl_sbn` | FedBatchNorm2d             | BatchStats; no running statistics: one   |
|           |                                 | pass over the training data before tests |
| `hybridbn`| HybridBatchNorm2d               | HybridStats: (1-a) global + a batch; the |
|           |                                 | server pools the statistics of the       |
|           |                                 | global model at the round's start        |
| `fedwon`  | none (ScaledWSConv2d convs)     | none; adaptive gradient clipping (agc)   |
| `none`    | none                            | none (no normalization at all)           |

Any normalizer may add FedFN's feature normalization (``feature_norm``: the penultimate feature
at unit norm, fednorm.norms.per_sample.FeatureNorm; the models place it before the classifier);
FedFN itself is ``none`` with it.

The four questions (fednorm.norms.rules) for the BN family are answered by its rule. The
others (rule None) answer them alike: (1) a client normalizes each sample with that sample's
own statistics (GN, LN, IN; GN+WS also standardizes each conv weight per output channel) or not
at all (Fixup, FedWon, none); (2) it reports nothing; (3) the server aggregates nothing beyond
the parameters, which it averages like any weight; (4) the global model normalizes a test image
exactly as training did, with that image's own statistics (no train/test mismatch to fix).

FixBN's variants (``fixbn_fix``; the FixBN paper's Table H) answer one more question, which
parameters stop training from T*: :meth:`Normalizer.frozen_params_at` names the affine weight
and bias of every FedBatchNorm2d (selected by type) from ``freeze_affine_at`` on (``affine``,
``both``), nothing otherwise. The engine leaves those parameters out of the optimizer step
(no gradient, momentum or weight-decay update) and out of the server's average, so they keep
their value at the freeze step exactly, on every client and in the global model.

FedTAN (``fedtan``; Wang et al. 2023) answers them as centralized BN does, with the clients
keeping their own weights between aggregations: (1) each client normalizes its batch with the
statistics of the union of all clients' current batches, computed layer by layer through each
client's own weights (the clients send their batch means and variances, the server returns the
union's), and in the backward pass the gradients with respect to those statistics are
aggregated across clients too; (2) every client reports the same union statistics; (3) the
server's running statistics are their moving average, as nn.BatchNorm2d's on the union batch;
(4) the global model normalizes with them. ``stacked_weights`` (True for FedTAN only) asks
fednorm.models.build_model for layers that take client-stacked weights
(fednorm.models.clientwise); the engine's stacked-client rounds run one forward over all clients
(fednorm.norms.fedtan).

FedBN (``fedbn``; Li et al. 2021) and SiloBN (``silobn``; Andreux et al. 2020) keep part of BN
with each client (``local``): (1) a client normalizes with its own batch; (2) it reports nothing
of what it keeps; (3) the server averages every other parameter and never touches the local
parts: FedBN keeps the statistics and gamma, beta; SiloBN the statistics alone (its gamma, beta
are averaged); (4) there is no global BN: client i's model is the averaged weights with its own
BN parts, tested on the global test set and on its own label distribution (fednorm.fl.train).

HeteroFL's static BN (``heterofl_sbn``; Diao et al. 2021) tracks no running statistics while
training (``static``): (1) a client normalizes with its own batch; (2) it reports nothing; (3)
the server averages the parameters only; (4) before the global model is tested, its statistics
are computed in one pass over the training data, the average of the batches' statistics
(fednorm.norms.heterofl).

``conv`` is the convolution the models build (fednorm.models take it as ``conv=``): a normalizer
that changes the weights rather than the activations (GN+WS) needs it, since the norm factory
alone cannot reach the convolutions. WS applies to every convolution of FBNCNN and ResNet20:
each of them feeds a normalization layer. ``make_layer`` None means a normalization-free
network: fednorm.models.build_model builds FixupResNet20 (the config allows it with
``model: resnet20`` only).

``conv_bias`` (the record's ``offset``, fednorm.methods, negated) asks the models for a bias
in each convolution that no normalization layer with a learnable offset beta follows (``none``
and ``fedwon``: identities there), so that those networks keep a per-channel offset after each
convolution as a network without normalization ordinarily has (nn.Conv2d's default;
nfnets-pytorch's WSConv2d defaults to ``bias=True`` too, though its NF-ResNets pass False).
With a beta after it a conv bias would be redundant (BN removes it; GN, LN, IN have beta), so
the other methods' LeNet and ResNet-20 keep none: their networks, and their runs' ids, are
unchanged. FBNCNN and DigitsCNN have conv biases with every method, as their papers' networks
do; torchvision's ResNet-18 has none with any (it builds its own convolutions).
WS and AGC take the bias as they take the gain: WS standardizes the weight only (the bias is
added after the convolution, as in nfnets-pytorch), AGC clips the bias vector as one unit.

FedWon (``fedwon``; Zhuang & Lyu, ICLR 2024, "FedWon: Triumphing Multi-domain Federated Learning
Without Normalization") answers them as a network without normalization: no layer normalizes
(``make_layer`` gives identities), every convolution is a ScaledWSConv2d, and one more answer,
to how a client steps: ``agc`` is the lambda of adaptive gradient clipping (Brock et al. 2021,
fednorm.norms.fedwon: the method's gradient hook), applied to every parameter but the classifier's
(the model's last nn.Linear, selected by type), before the momentum step. Hybrid BN
(``hybridbn``): fednorm.norms.rules.HybridStats.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from torch import nn

from fednorm import methods
from fednorm.config import RunConfig
from fednorm.norms.fbn import FirstBatch
from fednorm.norms.fedwon import NF_ALPHA
from fednorm.norms.hooks import Hooks, Pending, Tools
from fednorm.norms.hybridbn import HybridBatchNorm2d, HybridStats, RoundStart
from fednorm.norms.layer import FedBatchNorm2d, NormContext, norm_context
from fednorm.norms.parts import PartNames, PartSpec, client_parts
from fednorm.norms.per_sample import (
    FeatureNorm,
    InstanceNorm2d,
    LayerNorm2d,
    ScaledWSConv2d,
    WSConv2d,
    scaled_standardize_weight,
    standardize_weight,
)
from fednorm.norms.rules import (
    BatchStats,
    FederatedStats,
    FrozenStats,
    StatRule,
    Stats,
    UnionStats,
)

__all__ = [
    "NF_ALPHA",
    "BatchStats",
    "FeatureNorm",
    "FedBatchNorm2d",
    "FederatedStats",
    "FrozenStats",
    "Hooks",
    "HybridBatchNorm2d",
    "HybridStats",
    "InstanceNorm2d",
    "LayerNorm2d",
    "NormContext",
    "Normalizer",
    "PartNames",
    "Pending",
    "RoundStart",
    "ScaledWSConv2d",
    "StatRule",
    "Stats",
    "Tools",
    "UnionStats",
    "WSConv2d",
    "bn_layers",
    "feature_normalization",
    "fixbn_freeze_step",
    "norm_context",
    "normalizer_for",
    "scaled_standardize_weight",
    "standardize_weight",
]


NO_HOOKS = Hooks()


@dataclass(frozen=True)
class Normalizer:
    """The engine's view of one run's method: its layer, its rule at each step, and the flags
    the engine reads (from the method's record, fednorm.methods, and the run's keys)."""

    name: str
    make_layer: Callable[[int], nn.Module] | None  # channels -> layer; None: no normalization
    rule_at: Callable[[int], StatRule | None]  # 0-based step -> rule active during that step
    conv: Callable[..., nn.Conv2d] = nn.Conv2d  # the models' convolution (nn.Conv2d signature)
    freeze_affine_at: int | None = None  # first step with BN's gamma, beta frozen; None: never
    stacked_weights: bool = False  # layers take client-stacked weights (one forward of all
    # clients)
    # the tensors each client keeps across rounds (fednorm.norms.parts, fednorm.fl.parts);
    # None: none
    parts: PartSpec | None = None
    # what the method adds to the engine's schedule (fednorm.norms.hooks); none by default
    hooks: Hooks = NO_HOOKS
    conv_bias: bool = False  # convolutions carry a bias: no layer after them has an offset
    # NF-ResNet residual scaling alpha of the ResNets (FedWon; fednorm.models.resnet); None:
    # plain residual sums
    residual_alpha: float | None = None

    @property
    def per_client(self) -> bool:
        """Whether each client's own state or gradient matters (parts it keeps, or hooks that
        need each client's gradient): FedAvg's per-client path also at E = 1."""
        return self.parts is not None or self.hooks.per_client

    def frozen_params_at(self, step: int, model: nn.Module) -> frozenset[str]:
        """Names (as in ``model.named_parameters()``) of the parameters that do not train
        during ``step``: the FedBatchNorm2d layers' weight and bias from ``freeze_affine_at``
        on, selected by module type."""
        if self.freeze_affine_at is None or step < self.freeze_affine_at:
            return frozenset()
        return frozenset(f"{name}.{p}" if name else p
                         for name, module in model.named_modules()
                         if isinstance(module, FedBatchNorm2d)
                         for p, _ in module.named_parameters(recurse=False))


def _no_rule(step: int) -> None:
    return None


def _identity(channels: int) -> nn.Module:
    """No normalization layer (FedWon, none): the models' norm slots stay empty."""
    return nn.Identity()


def _always(rule: StatRule) -> Callable[[int], StatRule]:
    return lambda step: rule


def _bn(cfg: RunConfig, rule: StatRule, **flags) -> dict:
    return dict(make_layer=lambda c: FedBatchNorm2d(c, eps=cfg.bn_eps), rule_at=_always(rule),
                **flags)


def _groups(cfg: RunConfig) -> Callable[[int], nn.Module]:
    return lambda c: nn.GroupNorm(cfg.gn_groups, c, eps=cfg.bn_eps)


def _fixbn(cfg: RunConfig) -> dict:
    """Exploration with naive BN, then calibration with frozen statistics from T*."""
    freeze_at = fixbn_freeze_step(cfg)
    batch, frozen = BatchStats(), FrozenStats()
    if cfg.fixbn_fix == "affine":  # the statistics go on as naive BN
        rule_at = _always(batch)
    else:
        rule_at = lambda step: batch if step < freeze_at else frozen  # noqa: E731
    affine_at = freeze_at if cfg.fixbn_fix in ("affine", "both") else None
    return {**_bn(cfg, batch), "rule_at": rule_at, "freeze_affine_at": affine_at}


# The layer and rule of each method of one line (its flags come from its record,
# fednorm.methods; a method with a module of its own is found through its record's ``module``)
LAYERS: dict[str, Callable[[RunConfig], dict]] = {
    "central": lambda cfg: _bn(cfg, UnionStats()),
    "bn": lambda cfg: _bn(cfg, BatchStats()),
    "fbn": lambda cfg: _bn(cfg, FederatedStats(),
                           hooks=FirstBatch() if cfg.fbn_init == "first_batch" else Hooks()),
    "fixbn": _fixbn,
    "gn": lambda cfg: dict(make_layer=_groups(cfg)),
    "gn_ws": lambda cfg: dict(make_layer=_groups(cfg), conv=WSConv2d),
    "ln": lambda cfg: dict(make_layer=lambda c: LayerNorm2d(c, eps=cfg.bn_eps)),
    "in": lambda cfg: dict(make_layer=lambda c: InstanceNorm2d(c, eps=cfg.bn_eps)),
    "fixup": lambda cfg: dict(make_layer=None),
    "fedbn": lambda cfg: _bn(cfg, BatchStats()),
    "silobn": lambda cfg: _bn(cfg, BatchStats()),
    "none": lambda cfg: dict(make_layer=_identity),
}


def normalizer_for(cfg: RunConfig) -> Normalizer:
    """The normalizer a run config names: its record's flags, then its layer and rule."""
    record = methods.method(cfg.normalizer)
    flags = dict(rule_at=_no_rule, stacked_weights=record.clientwise,
                 parts=client_parts(own=record.personal), conv_bias=not record.offset)
    if record.module is None:
        return Normalizer(cfg.normalizer, **{**flags, **LAYERS[cfg.normalizer](cfg)})
    own = importlib.import_module(record.module).layers(cfg)
    if record.personal and "parts" in own:
        raise ValueError(f"{record.module}: its parts are its record's ``personal`` or its "
                         f"module's, not both")
    return Normalizer(cfg.normalizer, **{**flags, **own})


def fixbn_freeze_step(cfg: RunConfig) -> int:
    """The first step of FixBN's frozen stage: the first round boundary (a multiple of E =
    ``local_steps``) at or after T* = ``fixbn_freeze`` x ``steps``.

    The engine asks for one rule per round (at its first step), so the freeze can only begin
    on a round boundary; computing it here makes ``rule_at`` agree with the engine at every
    step, mid-round ones included. T* is taken exactly as the decimal the config wrote
    (0.1 x 10 is 1, not 1.0000000000000000555), then rounded *up*: steps 100, E 7, freeze 0.5
    -> T* = 50 -> step 56; E 1 -> step 50; steps 105, E 1 -> T* = 52.5 -> step 53.
    """
    t_star = Fraction(repr(float(cfg.fixbn_freeze))) * cfg.steps
    return cfg.local_steps * math.ceil(t_star / cfg.local_steps)


def feature_normalization(on: bool | str) -> list[nn.Module]:
    """The modules a model puts between its penultimate feature and its classifier: FedFN's
    unit-norm scaling (``feature_norm``; "sqrt_dim": times sqrt(D), ``feature_norm_scale``),
    or nothing."""
    return [FeatureNorm(sqrt_dim=on == "sqrt_dim")] if on else []


def bn_layers(model: nn.Module) -> list[FedBatchNorm2d]:
    """The model's federated BN layers, selected by type; each gets its name as its key."""
    layers = []
    for name, module in model.named_modules():
        if isinstance(module, FedBatchNorm2d):
            module.key = name
            layers.append(module)
    return layers
