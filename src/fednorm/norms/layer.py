"""The client-vectorized BatchNorm layer and the context that tells it about the current step.

In training, a forward pass carries the batches of g clients stacked along the batch dimension
(g = n for a DSGD step over all clients at once; g = 1 inside ``torch.func.vmap`` over clients).
The layer splits that dimension into (g, b), computes each client's statistics, normalizes as
the active :class:`~fednorm.norms.rules.StatRule` says, and records what each client reports in
the context. It never mutates its buffers: the engine aggregates the reports and writes the
running statistics, so the same layer is a pure function under vmap.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fednorm.norms.folded import cpu_batch_norm, folded_on
from fednorm.norms.rules import StatRule, Stats
from fednorm.scoped import Scoped


@dataclass
class NormContext:
    """What normalization layers need to know about one training forward pass."""

    rule: StatRule | None
    n_groups: int  # clients stacked in this forward pass
    n_clients: int  # clients in the federation (the n of Kn/(Kn-1))
    beta: float  # running-statistics momentum: weight of the new batch
    reports: dict[str, Stats] = field(default_factory=dict)  # layer key -> (g, C) statistics
    # when not None, each layer also records its clients' raw mini-batch statistics (mean,
    # biased variance), (g, C): what the FixBN paper's training dynamics measure (Fig. 3)
    batches: dict[str, Stats] | None = None


_CONTEXT: Scoped[NormContext | None] = Scoped(None)


def norm_context(ctx: NormContext) -> AbstractContextManager[NormContext]:
    """``with norm_context(ctx):`` the layers of the forward pass inside read ``ctx``."""
    return _CONTEXT.bound(ctx)


def _per_channel(stat: Tensor, ndim: int) -> Tensor:
    """(C,) or (g, C) -> broadcastable against a grouped input (g, b, C, *spatial)."""
    if stat.dim() == 1:
        stat = stat.unsqueeze(0)
    return stat.reshape(stat.shape[0], 1, stat.shape[1], *([1] * (ndim - 3)))


class FedBatchNorm2d(nn.Module):
    """BatchNorm over (N, C, H, W) whose training behaviour comes from the active rule.

    Buffers ``running_mean`` (init 0) and ``running_var`` (init 1) are the shared statistics
    the server last aggregated; eval mode normalizes with them, as nn.BatchNorm2d does.
    ``weight`` and ``bias`` may carry a client dimension, (g, C): each client's own affine
    parameters over the union's statistics (FedTAN; fednorm.models.clientwise).
    """

    mixing: tuple[str, ...] = ()  # parameters that mix the statistics (Hybrid BN's d)

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        # Where this layer's reports go in the NormContext: unique from the start, renamed to the
        # layer's name in its model by fednorm.norms.bn_layers.
        self.key = f"FedBatchNorm2d@{id(self):x}"
        self.elements_per_client = 0  # K = b*H*W of the last training forward pass

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"

    def _affine(self, xg: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        # y = (x - mean) / sqrt(var + eps) * w + b, folded into one multiply-add over x:
        # scale = w / sqrt(var + eps), shift = b - mean * scale (both per client and channel).
        scale = self.weight * torch.rsqrt(var + self.eps)
        shift = self.bias - mean * scale
        return torch.addcmul(_per_channel(shift, xg.dim()), xg, _per_channel(scale, xg.dim()))

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return self._affine(x.unsqueeze(0), self.running_mean, self.running_var).squeeze(0)
        ctx = _CONTEXT.get()
        if ctx is None or ctx.rule is None:
            raise RuntimeError(
                "FedBatchNorm2d in training mode needs a NormContext with a rule: train through "
                "fednorm.fl, or wrap the forward pass in fednorm.norms.norm_context(...)"
            )
        # bf16 autocast (fednorm.fl.precision): normalized in the statistics' dtype (float32),
        # as cuDNN's BN does; batch_norm's backward under vmap takes no bf16 input with float32
        # weights on the CPU. A no-op (the same tensor) when the dtypes agree
        x = x.to(self.running_mean.dtype)
        g = ctx.n_groups
        running = Stats(self.running_mean, self.running_var)
        mode = ctx.rule.normalize_with
        # each client normalized with its own batch (BatchNorm of each client's batch alone):
        # its statistics, with their gradient, serve the normalization and the report; one
        # client (under vmap) is x itself, with no grouped view
        own = self.weight.dim() == 1 and (mode == "batch" or (mode == "union" and g == 1))
        xg = x.reshape(g, -1, *x.shape[1:]) if g > 1 or not own else x
        if own:
            out, mean, var = self._own_batch_norm(xg, grouped=g > 1)
            batch = Stats(mean, var)
        else:
            batch = self._client_stats(xg)
        if ctx.batches is not None:
            ctx.batches[self.key] = batch
        K = x.numel() // (g * x.shape[1])
        self.elements_per_client = K
        # Hybrid BN's clients report the mixture they normalize with (reports_mixture)
        reported = batch
        if ctx.rule.reports_mixture:  # a report is data, never differentiated (through d)
            mixed = self._mixture(batch, running)
            reported = Stats(mixed.mean.detach(), mixed.var.detach())
        ctx.reports[self.key] = ctx.rule.report(reported, running, K, ctx.n_clients, ctx.beta)
        if own:
            return out.view(x.shape) if g > 1 else out
        if mode == "mixture":  # a mixture of the running and the batch's statistics
            return self._mixed(xg, running).reshape(x.shape)
        if mode == "running":  # constants: no gradient through the statistics
            return self._affine(xg, running.mean, running.var).reshape(x.shape)
        if self.weight.dim() == 1:  # BatchNorm on everything in this pass (the union)
            return self._own_batch_norm(x, grouped=False)[0]
        # FedTAN: the union's statistics, each client's own gamma, beta
        normed = F.batch_norm(x, None, None, None, None, True, 0.0, self.eps)
        xg = normed.reshape(xg.shape)
        return torch.addcmul(_per_channel(self.bias, xg.dim()), xg,
                             _per_channel(self.weight, xg.dim())).reshape(x.shape)

    def _mixed(self, xg: Tensor, running: Stats) -> Tensor:
        raise RuntimeError(f"a rule that normalizes with a mixture needs a layer that mixes, not "
                           f"{type(self).__name__}")

    def _mixture(self, batch: Stats, running: Stats) -> Stats:
        raise RuntimeError(f"a rule that reports a mixture needs a HybridBatchNorm2d, not "
                           f"{type(self).__name__}")

    @torch.no_grad()
    def _client_stats(self, xg: Tensor) -> Stats:
        """Each client's mean and biased variance per channel, (g, C), for its report.

        Shifted moments, var = E[(x-s)^2] - E[x-s]^2 with s the running mean (a constant close
        to the batch mean, which keeps the cancellation small): two plain mean reductions are
        far faster on CPU than torch.var_mean.
        """
        dims = (1, *range(3, xg.dim()))
        d = xg - _per_channel(self.running_mean, xg.dim())
        d_mean = d.mean(dims)
        var = ((d * d).mean(dims) - d_mean**2).clamp_min(0.0)
        return Stats(d_mean + self.running_mean, var)

    def _own_batch_norm(self, x: Tensor, grouped: bool) -> tuple[Tensor, Tensor, Tensor]:
        """BatchNorm of each client's rows of a ``grouped`` input (g, b, C, *spatial), or of
        all rows of x (N, C, *spatial) as one group, with its own statistics
        (:class:`GroupedBatchNorm`); returns (output, mean, biased variance), the statistics
        (g, C) (g = 1 for x) as data."""
        if folded_on(x):  # the CPU: ATen's fused kernels (fednorm.norms.folded)
            return cpu_batch_norm(x, self.weight, self.bias, self.eps, grouped)
        shape = (self.num_features, *[1] * (x.dim() - 2 - grouped))
        # torch.compile cannot trace the Function under vmap: there, autograd's graph of the
        # same forward (the same values; its gradient differs in rounding only)
        norm = (GroupedBatchNorm.forward if torch.compiler.is_compiling()
                else GroupedBatchNorm.apply)
        out, mean, var, _, _ = norm(x, self.weight.view(shape), self.bias.view(shape), self.eps,
                                    grouped)
        return out, mean, var


class GroupedBatchNorm(torch.autograd.Function):
    """Training-mode BatchNorm of each group (client) of x (g, b, C, *spatial) with its own
    batch statistics, mean and biased variance over (b, *spatial) per channel (not
    ``grouped``: x (N, C, *spatial) is one group, its statistics over (N, *spatial)):

        y = x_hat * w + b,   x_hat = (x - mean) / sqrt(var + eps),

    and its closed-form backward (as ATen's batch_norm_backward; K = b * prod(spatial)):

        dL/db = sum dy,   dL/dw = sum dy * x_hat   (over every dimension but C),
        dL/dx = w / (K sqrt(var + eps)) * (K dy - sum_K dy - x_hat * sum_K dy * x_hat)

    with the sums of dL/dx per group. Written with elementwise operators on the grouped input
    as it is: no transpose of clients into channels, and under vmap (``generate_vmap_rule``)
    no batching rule that copies the input into a channel-folded layout, as batch_norm's does;
    a few operators where autograd's graph of the same formula dispatches many more
    (docs/speed.md). Also returns the statistics, (g, C), not differentiated."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor, eps: float, grouped: bool = True
                ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        var, mean = torch.var_mean(x, dim=_reduced(x, grouped), correction=0, keepdim=True)
        invstd = torch.rsqrt(var + eps)
        x_hat = (x - mean) * invstd
        g = x.shape[0] if grouped else 1
        y = torch.addcmul(bias, x_hat, weight)
        return y, mean.view(g, -1), var.view(g, -1), x_hat, invstd

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        _, weight, _, _, grouped = inputs
        _, mean, var, x_hat, invstd = output
        ctx.mark_non_differentiable(mean, var, x_hat, invstd)
        ctx.set_materialize_grads(False)  # no zeros for the statistics' gradients
        ctx.save_for_backward(weight, x_hat, invstd)
        ctx.grouped = grouped

    @staticmethod
    def backward(ctx: Any, dy: Tensor, *_: Tensor
                 ) -> tuple[Tensor, Tensor, Tensor, None, None]:
        weight, x_hat, invstd = ctx.saved_tensors
        dims = _reduced(x_hat, ctx.grouped)
        sum_dy = dy.sum(dims, keepdim=True)
        sum_dy_xhat = (dy * x_hat).sum(dims, keepdim=True)
        k = x_hat.numel() // invstd.numel()  # values per group and channel
        inner = torch.sub(dy, torch.addcmul(sum_dy, x_hat, sum_dy_xhat), alpha=1.0 / k)
        dx = inner * (weight * invstd)
        if ctx.grouped:  # the affine parameters are every group's
            sum_dy, sum_dy_xhat = sum_dy.sum(0), sum_dy_xhat.sum(0)
        return dx, sum_dy_xhat.view_as(weight), sum_dy.view_as(weight), None, None


def _reduced(x: Tensor, grouped: bool) -> tuple[int, ...]:
    """The dimensions a group's statistics reduce: (b, *spatial) of a grouped (g, b, C,
    *spatial), (N, *spatial) of x (N, C, *spatial)."""
    return (1, *range(3, x.dim())) if grouped else (0, *range(2, x.dim()))
