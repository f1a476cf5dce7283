"""The plain per-client local step that several references share (tests/fl): one client, one
model, its own batch, written without the engine."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fednorm.norms import NormContext, StatRule, bn_layers, norm_context


def client_step(client: nn.Module, x: Tensor, y: Tensor, rule: StatRule | None, n: int,
                beta: float, momenta: list[Tensor], momentum: float, lr: float) -> None:
    """One local step of one client on its batch (x, y): the forward under ``rule`` as one
    client of n, the gradient by autograd, momentum SGD in the FBN paper's convention
    (m <- momentum m + (1 - momentum) g; p <- p - lr m), and the client's BN running statistics
    set to what its layers report."""
    layers = bn_layers(client)  # names each layer's key, where its report goes
    ctx = NormContext(rule, 1, n, beta)
    with norm_context(ctx):
        loss = F.nll_loss(client(x), y)
    grads = torch.autograd.grad(loss, list(client.parameters()))
    with torch.no_grad():
        for p, m, g in zip(client.parameters(), momenta, grads, strict=True):
            m.mul_(momentum).add_((1 - momentum) * g)
            p.sub_(lr * m)
        for layer in layers:
            layer.running_mean.copy_(ctx.reports[layer.key].mean[0])
            layer.running_var.copy_(ctx.reports[layer.key].var[0])
