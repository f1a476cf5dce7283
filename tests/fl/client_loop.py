"""The plain per-client local step that several references share (tests/fl): one client, one
model, its own batch, written without the engine."""

from __future__ import annotations

import copy

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


class _RecordingMixedBN(nn.Module):
    """A HybridBatchNorm2d's training forward written out by hand (not the layer's code): the
    input's own mean and biased variance over (batch, H, W), mixed with the layer's global
    statistics by a = sigmoid(d); records both the input's and the mixed statistics."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer, self.seen = layer, {}

    def forward(self, x: Tensor) -> Tensor:
        la = self.layer
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)
        a = torch.sigmoid(la.mix)
        mixed = ((1 - a) * la.running_mean + a * mean, (1 - a) * la.running_var + a * var)
        self.seen = {"batch": (mean, var), "mixed": mixed}
        self.K = x.numel() // x.shape[1]  # values per channel: b*H*W
        shape = (1, -1, 1, 1)
        return ((x - mixed[0].view(shape)) / torch.sqrt(mixed[1].view(shape) + la.eps)
                * la.weight.view(shape) + la.bias.view(shape))


def hybrid_start_statistics(model: nn.Module | list[nn.Module], images: list[Tensor],
                            report: str, beta: float) -> dict[str, tuple[Tensor, Tensor]]:
    """Hybrid BN's new global statistics after a round, written as a per-client loop: each
    client runs a copy of the downloaded global ``model`` (or its own, ``model[i]``: the
    global weights with the client's own d) on its ``images[i]`` (no gradient), its BN layers
    reporting the ``report`` statistics ("batch" or "mixed"); the server pools them
    count-weighted (K = b*H*W values per client and channel, N = nK: pooled mean, and the
    unbiased pooled variance by the law of total variance) and smooths with ``beta``.
    Returns {layer name: (running_mean, running_var)}."""
    models = model if isinstance(model, list) else [model] * len(images)
    model = models[0]
    names = [name for name, m in model.named_modules() if hasattr(m, "mix")]
    reports: dict[str, list] = {name: [] for name in names}
    K: dict[str, int] = {}
    for own, x in zip(models, images, strict=True):
        client = copy.deepcopy(own).train()
        wrappers = {}
        for name in names:
            parent, _, leaf = name.rpartition(".")
            owner = client.get_submodule(parent) if parent else client
            wrappers[name] = _RecordingMixedBN(getattr(owner, leaf))
            setattr(owner, leaf, wrappers[name])
        with torch.no_grad():
            client(x)
        for name, w in wrappers.items():
            reports[name].append(w.seen[report])
            K[name] = w.K
    out = {}
    for name in names:
        layer = model.get_submodule(name)
        means = torch.stack([m for m, _ in reports[name]])  # (n, C)
        vars_ = torch.stack([v for _, v in reports[name]])
        N = len(images) * K[name]
        pooled = vars_.mean(0) + ((means - means.mean(0)) ** 2).mean(0)
        out[name] = ((1 - beta) * layer.running_mean + beta * means.mean(0),
                     (1 - beta) * layer.running_var + beta * N / (N - 1) * pooled)
    return out
