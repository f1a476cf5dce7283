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


AGC_EPS = 1e-3  # Brock et al. (2021), §4.1: the floor of a unit's weight norm (its epsilon)


@torch.no_grad()
def adaptive_clip(grad: Tensor, weight: Tensor, lam: float, unit_dims: int) -> Tensor:
    """Adaptive gradient clipping (Brock et al. 2021, "High-Performance Large-Scale Image
    Recognition Without Normalization", §4.1, Eq. 3), unit-wise: for each unit i (an output
    channel of a conv, a row of a linear layer, one element of a vector),

        G_i <- lam * max(||W_i||, eps) / ||G_i|| * G_i   if ||G_i|| / max(||W_i||, eps) > lam,

    else unchanged, with Frobenius norms over the unit's ``unit_dims`` trailing dimensions
    (0: each element its own unit) and eps = AGC_EPS. Any leading dimensions (runs, clients)
    are units' batches: each is clipped on its own."""
    dims = tuple(range(grad.dim() - unit_dims, grad.dim()))
    g_norm = torch.linalg.vector_norm(grad, dim=dims, keepdim=True) if dims else grad.abs()
    w_norm = (torch.linalg.vector_norm(weight, dim=dims, keepdim=True) if dims
              else weight.abs()).clamp_min(AGC_EPS)
    limit = lam * w_norm
    return torch.where(g_norm > limit, grad * (limit / g_norm.clamp_min(1e-30)), grad)
