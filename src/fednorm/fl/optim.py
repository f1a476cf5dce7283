"""Client optimizers, written on plain tensors so one function serves a single model and a
stack of per-client models (leading client dimension) alike.

Momentum conventions (the FBN paper's Table 2 uses the first):
- ``ema``:     m <- beta * m + (1 - beta) * g   ("client momentum" of Robust-DSGD)
- ``pytorch``: m <- beta * m + g                 (torch.optim.SGD, dampening 0)
then p <- p - lr * m. With the same beta, ``ema`` takes steps (1 - beta) times as large.
``lr`` is a number, or one per run of a bundle: an (R,) tensor, every tensor then (R, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def momentum_step(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    momenta: Sequence[Tensor],
    *,
    lr: float | Tensor,
    beta: float,
    convention: str,
    weight_decay: float = 0.0,
) -> None:
    """One SGD-with-momentum update, in place on ``params`` and ``momenta``: a few
    ``torch._foreach_*`` operators over all tensors (on CUDA a kernel covers many tensors),
    not a Python loop of operators per tensor. The same arithmetic, operation by operation,
    as the loop ``g <- g + wd * p; m <- beta * m + dampening * g; p <- p - m * lr``."""
    if convention not in ("ema", "pytorch"):
        raise ValueError(f"momentum convention {convention!r}; allowed: 'ema', 'pytorch'")
    dampening = 1.0 - beta if convention == "ema" else 1.0
    params, grads, momenta = list(params), list(grads), list(momenta)
    if not params:  # torch's foreach operators refuse an empty list
        return
    if weight_decay:
        grads = torch._foreach_add(grads, torch._foreach_mul(params, weight_decay))
    torch._foreach_mul_(momenta, beta)
    torch._foreach_add_(momenta, grads, alpha=dampening)
    if isinstance(lr, Tensor):  # (R,): one view per rank (made once), broadcast over each
        shaped: dict[int, Tensor] = {}  # run's tensors
        for p in params:
            if p.dim() not in shaped:
                shaped[p.dim()] = lr.view(-1, *[1] * (p.dim() - 1))
        torch._foreach_sub_(params, torch._foreach_mul(momenta, [shaped[p.dim()] for p in params]))
    else:
        torch._foreach_add_(params, momenta, alpha=-lr)
