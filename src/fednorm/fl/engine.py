"""The federated engine: clients are a tensor dimension, never a Python loop.

Two trainers share one interface, ``round(first_step) -> summed training loss``:

- :class:`DSGD` (E = 1, the FBN paper's Algorithm 3): all clients hold the same weights, so one
  forward/backward over the n*b stacked batch gives the mean of the clients' gradients; the
  normalization layers see the client dimension and compute per-client statistics. Each client
  keeps a momentum; with mean aggregation only their mean matters (the update is linear), so one
  buffer holds exactly that mean.
- :class:`FedAvg` (E >= 1 local steps): clients hold different weights between aggregations.
  Parameters, BN statistics and momenta are stacked with a leading client dimension and one local
  step of all clients is a single ``vmap(grad(...))`` call over ``functional_call``. At the end of
  a round the server averages parameters (or, with ``attack_updates``, combines the clients'
  updates with its robust rule) and aggregates BN statistics with the normalizer's rule.
  Client momenta persist across rounds, so with E = 1 it computes exactly what DSGD does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from fednorm.config import RunConfig
from fednorm.fl.batches import ClientBatches
from fednorm.fl.optim import momentum_step
from fednorm.norms import (
    FedBatchNorm2d,
    Normalizer,
    NormContext,
    StatRule,
    Stats,
    UnionStats,
    bn_layers,
    norm_context,
)
from fednorm.robust import Server

HONEST = Server()  # no attack, plain mean


@torch.no_grad()
def commit_stats(
    layers: list[FedBatchNorm2d], reports: dict[str, Stats], rule: StatRule, n: int, beta: float,
    server: Server = HONEST,
) -> None:
    """Server side: aggregate each layer's (n, C) client reports into its running statistics.

    What the server receives is ``server.receive(reports)`` (the Byzantine rows replaced by the
    attack) when the rule has clients send statistics; it combines them with ``server.combine``.
    """
    for layer in layers:
        received = server.receive(reports[layer.key]) if rule.sends else reports[layer.key]
        agg = rule.aggregate(received, layer.elements_per_client, n, beta, server.combine)
        layer.running_mean.copy_(agg.mean)
        layer.running_var.copy_(agg.var)


class _Trainer:
    def __init__(
        self, cfg: RunConfig, model: nn.Module, normalizer: Normalizer, batches: ClientBatches
    ) -> None:
        self.cfg, self.model, self.normalizer, self.batches = cfg, model, normalizer, batches
        self.n = cfg.n_clients
        self.layers = bn_layers(model)
        self.names = [name for name, _ in model.named_parameters()]
        self.params = [p for _, p in model.named_parameters()]
        self.server = Server.from_config(cfg)

    def _optimize(self, params: list[Tensor], grads: list[Tensor], momenta: list[Tensor],
                  step: int) -> None:
        momentum_step(
            params, grads, momenta, lr=self.cfg.lr_at(step), beta=self.cfg.momentum,
            convention=self.cfg.momentum_convention, weight_decay=self.cfg.weight_decay,
        )

    @torch.no_grad()
    def calibrate(self) -> None:
        """Set every BN layer's shared statistics to those of one union batch of all clients
        (the ``fbn_init: first_batch`` option: beta = 1, no parameter update)."""
        x, _ = self.batches.sample()
        ctx = NormContext(UnionStats(), self.n, self.n, beta=1.0)
        with norm_context(ctx):
            self.model(x)
        commit_stats(self.layers, ctx.reports, UnionStats(), self.n, 1.0)

    def round(self, first_step: int) -> Tensor:
        raise NotImplementedError


class DSGD(_Trainer):
    """One communication per step; gradients (momenta) averaged by the server."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.momenta = [torch.zeros_like(p) for p in self.params]

    def round(self, first_step: int) -> Tensor:
        rule = self.normalizer.rule_at(first_step)
        x, y = self.batches.sample()
        ctx = NormContext(rule, self.n, self.n, self.cfg.bn_momentum)
        with norm_context(ctx):
            loss = F.nll_loss(self.model(x), y)  # mean over n*b = mean of the clients' losses
        grads = torch.autograd.grad(loss, self.params)
        self._optimize(self.params, list(grads), self.momenta, first_step)
        if self.layers:
            commit_stats(self.layers, ctx.reports, rule, self.n, self.cfg.bn_momentum,
                         self.server)
        return loss.detach()


class FedAvg(_Trainer):
    """E local steps per round on stacked per-client state, then server averaging."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.momenta = [p.new_zeros((self.n, *p.shape)) for p in self.params]
        self.stat_names = [f"{layer.key}.{s}" for layer in self.layers
                           for s in ("running_mean", "running_var")]

    def _client_loss(self, rule: StatRule | None):
        model, beta, n = self.model, self.cfg.bn_momentum, self.n

        def loss_fn(params: dict[str, Tensor], stats: dict[str, Tensor], x: Tensor, y: Tensor):
            ctx = NormContext(rule, 1, n, beta)
            with norm_context(ctx):
                loss = F.nll_loss(functional_call(model, {**params, **stats}, (x,)), y)
            reports = {k: (s.mean, s.var) for k, s in ctx.reports.items()}  # a pytree for vmap
            return loss, (loss.detach(), reports)

        return vmap(grad(loss_fn, has_aux=True), randomness="different")

    def round(self, first_step: int) -> Tensor:
        E, n, b = self.cfg.local_steps, self.n, self.cfg.batch_size
        rule = self.normalizer.rule_at(first_step)  # one rule for the whole round
        params = {k: p.detach().expand(n, *p.shape).clone()
                  for k, p in zip(self.names, self.params, strict=True)}
        buffers = dict(self.model.named_buffers())
        stats = {k: buffers[k].expand(n, *buffers[k].shape).clone() for k in self.stat_names}
        step_fn = self._client_loss(rule)
        total = torch.zeros((), device=self.params[0].device)
        for e in range(E):
            x, y = self.batches.sample()
            grads, (losses, reports) = step_fn(
                params, stats, x.reshape(n, b, *x.shape[1:]), y.reshape(n, b)
            )
            self._optimize(list(params.values()), [grads[k] for k in params], self.momenta,
                           first_step + e)
            for layer in self.layers:  # each client's running statistics, now (n, C)
                mean, var = reports[layer.key]
                stats[f"{layer.key}.running_mean"] = mean.squeeze(1)
                stats[f"{layer.key}.running_var"] = var.squeeze(1)
            total = total + losses.mean()
        self._aggregate(params, stats, rule)
        return total

    @torch.no_grad()
    def _aggregate(self, params: dict[str, Tensor], stats: dict[str, Tensor],
                   rule: StatRule | None) -> None:
        if self.cfg.attack_updates:
            self._combine_updates(params)
        else:
            for p, k in zip(self.params, self.names, strict=True):
                p.copy_(params[k].mean(0))
        if not self.layers:
            return
        reports = {layer.key: Stats(stats[f"{layer.key}.running_mean"],
                                    stats[f"{layer.key}.running_var"]) for layer in self.layers}
        # After E local updates a client's running mean has moved by 1 - (1 - beta)^E towards
        # its batches; FBN's correction divides by that effective momentum (= beta when E = 1).
        beta_eff = 1.0 - (1.0 - self.cfg.bn_momentum) ** self.cfg.local_steps
        commit_stats(self.layers, reports, rule, self.n, beta_eff, self.server)

    def _combine_updates(self, params: dict[str, Tensor]) -> None:
        """theta <- theta + A(Delta): the clients' updates Delta_i = theta_i - theta as one
        (n, d) matrix, the last f rows replaced by the attack, combined by the server's rule A
        (the mean of Delta_i is exactly the plain average of the theta_i)."""
        deltas = torch.cat([(params[k] - p).reshape(self.n, -1)
                            for p, k in zip(self.params, self.names, strict=True)], dim=1)
        delta = self.server.combine(self.server.receive_rows(deltas))
        for p, part in zip(self.params, delta.split([p.numel() for p in self.params]),
                           strict=True):
            p.add_(part.view_as(p))


def make_trainer(
    cfg: RunConfig, model: nn.Module, normalizer: Normalizer, batches: ClientBatches,
    force_fedavg: bool = False,
) -> _Trainer:
    """DSGD's single fused pass when E = 1, FedAvg's stacked clients otherwise (and whenever
    the server needs each client's update: ``attack_updates``)."""
    cls = FedAvg if force_fedavg or cfg.local_steps > 1 or cfg.attack_updates else DSGD
    return cls(cfg, model, normalizer, batches)
