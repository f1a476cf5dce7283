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
    """One SGD-with-momentum update, in place on ``params`` and ``momenta``."""
    if convention not in ("ema", "pytorch"):
        raise ValueError(f"momentum convention {convention!r}; allowed: 'ema', 'pytorch'")
    dampening = 1.0 - beta if convention == "ema" else 1.0
    for p, g, m in zip(params, grads, momenta, strict=True):
        if weight_decay:
            g = g + weight_decay * p
        m.mul_(beta).add_(g, alpha=dampening)
        if isinstance(lr, Tensor):
            p.sub_(m * lr.view(-1, *[1] * (p.dim() - 1)))
        else:
            p.add_(m, alpha=-lr)
