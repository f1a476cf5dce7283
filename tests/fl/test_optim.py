"""fednorm.fl.optim.momentum_step: the foreach update is, bit for bit, the per-tensor loop it
replaced (so a run's numbers did not move), for every convention, weight decay, a number or
one learning rate per run."""

from __future__ import annotations

import pytest
import torch

from fednorm.fl.optim import momentum_step


def loop_step(params, grads, momenta, lr, beta, convention, weight_decay):
    """The update written one tensor at a time (the code before foreach)."""
    dampening = 1.0 - beta if convention == "ema" else 1.0
    for p, g, m in zip(params, grads, momenta, strict=True):
        if weight_decay:
            g = g + weight_decay * p
        m.mul_(beta).add_(g, alpha=dampening)
        if isinstance(lr, torch.Tensor):
            p.sub_(m * lr.view(-1, *[1] * (p.dim() - 1)))
        else:
            p.add_(m, alpha=-lr)


@pytest.mark.parametrize("lr", [0.05, torch.tensor([0.1, 0.03, 0.007])])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
@pytest.mark.parametrize("convention", ["ema", "pytorch"])
def test_foreach_update_equals_the_per_tensor_loop(lr, weight_decay, convention):
    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 4, 2, 3, 3), (3, 4), (3, 5, 4), (3,)]  # (R, ...), R = 3 runs

    def tensors():
        return [torch.randn(s, generator=gen) for s in shapes]

    params, grads, momenta = tensors(), tensors(), tensors()
    ref = [[t.clone() for t in ts] for ts in (params, momenta)]
    for _ in range(3):
        momentum_step(params, grads, momenta, lr=lr, beta=0.9, convention=convention,
                      weight_decay=weight_decay)
        loop_step(ref[0], grads, ref[1], lr, 0.9, convention, weight_decay)
    for got, want in zip([*params, *momenta], [*ref[0], *ref[1]], strict=True):
        assert torch.equal(got, want)


