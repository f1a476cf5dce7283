"""The pieces of a local step, each a function of tensors and records (never of a trainer).

- :func:`over_runs` and :func:`over_clients` lift a function of one run's (one client's)
  tensors to a bundle's: ``torch.func.vmap`` over the run dimension when R > 1 (a convolution
  whose weights carry a run dimension becomes one grouped convolution), a plain call on the
  squeezed state when R = 1; one vmap over the (run, client) lanes for the clients. No reduction
  crosses a lane, so a run that diverges (NaN) cannot touch the others.
- :func:`forward_fn` and :func:`grad_fn`: one run's (one client's) training-mode forward and
  gradient through ``functional_call`` of the template model, the normalization layers
  reporting their statistics into a context (fednorm.norms.NormContext), never into their
  buffers.
- :func:`optimize`: the method's gradient transform (its hooks, fednorm.norms.hooks), the
  run's gradient clipping, then the momentum step (fednorm.fl.optim), in place.
- :func:`learning_rate`: each run's rate at the device's step counter.

The local steps that put them together, :meth:`fednorm.fl.round.FedAvg._local_step` and
:meth:`fednorm.fl.round.Rounds._fused_step`, read nothing back to the host.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from torch.utils._pytree import tree_map

from fednorm import rng
from fednorm.config import RunConfig
from fednorm.fl.optim import momentum_step
from fednorm.norms import NormContext, StatRule, norm_context
from fednorm.norms.hooks import Reports  # layer key -> (mean, var): a pytree


def over_runs(fn: Callable, runs: int, in_dims: tuple[int | None, ...] | None = None
              ) -> Callable:
    """``fn`` of one run's tensors, applied to a bundle's: every argument (but those whose
    ``in_dims`` entry is None, shared by all runs) and every result carries a leading run
    dimension. vmap over it for several runs; for one, a plain call without it."""
    if runs > 1:
        return vmap(fn, in_dims=0 if in_dims is None else in_dims)

    def single(*args):
        dims = in_dims or (0,) * len(args)
        out = fn(*(a if d is None else tree_map(lambda t: t.squeeze(0), a)
                   for a, d in zip(args, dims, strict=True)))
        return tree_map(lambda t: t.unsqueeze(0), out)

    return single


def over_clients(fn: Callable) -> Callable:
    """``fn`` of one client's tensors, applied to a bundle's clients flattened over (run,
    client): every argument and result carries a leading R*n dimension (views of the (R, n,
    ...) buffers, fednorm.fl.buffers). One vmap over the R*n clients, not a vmap over runs of
    a vmap over clients: one level of batching rules dispatches far fewer operators
    (docs/speed.md)."""
    return vmap(fn)


def forward_fn(model: nn.Module, rule: StatRule | None, n_groups: int, n: int, beta: float,
               record: bool = False) -> Callable:
    """One run's training-mode forward: (params, stats, x, key) -> (log-probs, reports,
    batches); ``n``: the n of the rules' Kn/(Kn-1). ``batches`` holds each layer's raw
    mini-batch statistics per client when ``record``, else nothing."""

    def forward(params: dict[str, Tensor], stats: dict[str, Tensor], x: Tensor,
                key: Tensor) -> tuple[Tensor, Reports, Reports]:
        ctx = NormContext(rule, n_groups, n, beta, batches={} if record else None)
        with norm_context(ctx), rng.dropout_key(key):
            out = functional_call(model, {**params, **stats}, (x,))
        batches = {k: (s.mean, s.var) for k, s in (ctx.batches or {}).items()}
        return out, {k: (s.mean, s.var) for k, s in ctx.reports.items()}, batches

    return forward


def grad_fn(model: nn.Module, rule: StatRule | None, n_groups: int, n: int, beta: float,
            record: bool = False, loss_scale: float = 1.0) -> Callable:
    """One run's (or client's) gradient: (params, stats, x, y, key) -> (grads, (loss,
    reports, batches)); the loss is the mean over the batch (= the mean of the clients'
    losses), differentiated times ``loss_scale``; the rest as :func:`forward_fn`."""
    forward = forward_fn(model, rule, n_groups, n, beta, record)

    def loss_fn(params, stats, x, y, key):
        out, reports, batches = forward(params, stats, x, key)
        loss = F.nll_loss(out, y)
        return loss * loss_scale, (loss.detach(), reports, batches)

    return grad(loss_fn, has_aux=True)


def learning_rate(lrs: Tensor, milestones: Tensor, clock: Tensor) -> Tensor:
    """(R,) each run's learning rate at the clock's step: its phase is the milestones passed,
    counted on the device."""
    if lrs.shape[1] == 1:
        return lrs[:, 0]
    phase = (clock >= milestones).sum().view(1)
    return lrs.index_select(1, phase).squeeze(1)


def optimize(cfg: RunConfig, transform: Callable, names: list[str], params: dict[str, Tensor],
             grads: dict[str, Tensor], momenta: dict[str, Tensor], lr: Tensor,
             per_client: bool) -> None:
    """The optimizer step of the parameters ``names`` (stacked per run, or per run and
    client, or per client flattened over (run, client) with their ``momenta`` and ``lr``
    (R*n,): ``per_client``): the method's gradient ``transform`` (its hooks' ``grads``), the
    run's gradient clipping (``clip_norm``), then the momentum step."""
    clipped = transform(grads, params, names)
    if cfg.clip_norm is not None:
        clipped = clip_norm(clipped, cfg.clip_norm, lead=1 if per_client else 2)
    momentum_step(
        [params[k] for k in names], [clipped[k] for k in names],
        [momenta[k] for k in names], lr=lr, beta=cfg.momentum,
        convention=cfg.momentum_convention, weight_decay=cfg.weight_decay,
    )


def clip_norm(grads: dict[str, Tensor], max_norm: float, lead: int = 2) -> dict[str, Tensor]:
    """Each client's gradient, (R, n, ...) per parameter (a per-client path; ``lead`` 1:
    (R*n, ...)), scaled to at most ``max_norm`` in global L2 norm over the parameters it
    steps, as torch.nn.utils.clip_grad_norm_ (its coefficient max_norm / (norm + 1e-6), at
    most 1), after the method's transform; no host synchronization (a tensor coefficient)."""
    squares = sum(g.pow(2).flatten(lead).sum(-1) for g in grads.values())
    coef = (max_norm / (squares.sqrt() + 1e-6)).clamp(max=1.0)  # (R, n) or (R*n,)
    return {k: g * coef.view(*coef.shape, *[1] * (g.dim() - lead)) for k, g in grads.items()}
