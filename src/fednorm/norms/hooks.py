"""What a method adds to the engine's schedule: a small set of hooks, each handed records and
functions (:class:`Tools`), never the trainer.

The engine (fednorm.fl) calls them at fixed points, and a method overrides the ones it needs in
its own module of fednorm.norms:

- :meth:`Hooks.bind`: once per trainer, with the template model and the training sampler
  (what the hooks precompute: the units that adaptive clipping takes, a sampler of its own);
- :meth:`Hooks.before_training`: once, before the first round of a run from step 0;
- :meth:`Hooks.round_start`: at a round's start, statistics the clients report apart from
  training (then the round's steps commit none; the server commits these at its end);
- :meth:`Hooks.aggregation_matrix`: at a round's end, after the server's average, the matrix
  (R, m, m), row-stochastic over the round's m computing clients (``who``; None: all n), with
  which the server serves each client its own mix of the clients' served parts
  (fednorm.fl.parts); None (every method's default): the global average alone, every row the
  same weights;
- :meth:`Hooks.grads`: inside the captured local step, the gradients before the optimizer
  (the only hook that runs there: no host synchronization, the same operators every step);
- :meth:`Hooks.before_test` and :meth:`Hooks.evaluation`: before, and around, each test;
- :meth:`Hooks.select`: the runs that go on (a bundle drops diverged runs).

Two facts about the method's training decide the engine's path: ``per_client`` (each client's
own gradient or state matters: FedAvg's per-client path also at E = 1) and
``tracks_statistics`` (the server aggregates running statistics in training).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from fednorm.norms.rules import StatRule

Reports = dict[str, tuple[Tensor, Tensor]]  # layer key -> (mean, var), (R, clients, C) each


class Pending(NamedTuple):
    """Statistics reported at a round's start, for the server to commit at its end."""

    reports: Reports
    K: dict[str, int]  # each layer's values per client and channel in that forward
    beta: float  # the server's smoothing


@dataclass(frozen=True)
class Tools:
    """What a hook may use: the bundle's state and constants, and the engine's functions."""

    state: Any  # fednorm.fl.state.BundleState
    n: int  # clients per run
    runs: int
    layers: list  # the model's federated BN layers (fednorm.norms.bn_layers)
    local_steps: int
    batch_size: int
    keys: Tensor  # (R,) the runs' dropout keys (fednorm.rng)
    lrs: Tensor  # (R, phases) the runs' learning rates (lr x lr_scale)
    batches: Any  # the training sampler (fednorm.fl.batches.ClientBatches)
    rule_at: Callable[[int], StatRule | None]
    # forward(rule, groups, beta, x, key, params=None, clients=None, shared_x=False) ->
    # reports, (R, groups, C) per layer: a training-mode forward of every run's global model
    # (``params`` replacing some of its parameters, ``clients`` the n of the rules'
    # Kn/(Kn-1); ``shared_x``: one x for all runs)
    forward: Callable[..., Reports]
    # commit(reports, rule, beta, n=None, K=None): the runs' servers aggregate ``reports``
    # (``n`` clients, ``K`` values per client and channel) into the statistics
    commit: Callable[..., None]
    own_parts: Callable[[Tensor | None, bool], dict[str, Tensor]]  # (participants, kept)
    participants: Callable[[int], Tensor | None]  # a round's (R, m) clients, or None: all


class Hooks:
    """No hook: every method's default (see the module)."""

    per_client = False
    tracks_statistics = True

    def bind(self, model: nn.Module, batches: Any) -> Hooks:
        return self

    def before_training(self, tools: Tools) -> None:
        return None

    def round_start(self, tools: Tools, rule: StatRule | None, step: int | Tensor,
                    own: dict[str, Tensor]) -> Pending | None:
        return None

    def aggregation_matrix(self, tools: Tools, who: Tensor | None) -> Tensor | None:
        return None

    def grads(self, grads: dict[str, Tensor], params: dict[str, Tensor], names: list[str]
              ) -> dict[str, Tensor]:
        return {k: grads[k] for k in names}

    def before_test(self, tools: Tools, data: Any) -> None:
        return None

    def evaluation(self, tools: Tools, step: int) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def select(self, runs: Tensor) -> None:
        return None


@contextlib.contextmanager
def restored(stats: dict[str, Tensor]) -> Iterator[None]:
    """The statistics ``stats`` as they were, after the block."""
    kept = {k: s.clone() for k, s in stats.items()}
    try:
        yield
    finally:
        with torch.no_grad():
            for k, s in stats.items():
                s.copy_(kept[k])
