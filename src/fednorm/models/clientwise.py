"""Layers that carry the client dimension through a model (for FedTAN, fednorm.fl.round).

FedTAN normalizes every client's batch with the statistics of the union of all clients' current
batches while each client computes with its own weights. A BN layer's statistics then reduce
across clients inside one forward pass, which ``torch.func.vmap`` over clients cannot express
(the lanes of a vmap never see each other). So for FedTAN the client dimension is an explicit
tensor dimension through the layers instead: the model runs once on the n clients' batches
stacked client-major along the batch dimension, (n*b, ...), with parameters that carry a leading
client dimension, (n, *shape), and

- a layer with weights (:class:`ClientConv2d`, :class:`ClientLinear`) applies client i's
  weights to client i's b rows: a vmap over the clients of the plain op (one grouped call);
- a layer without weights (ReLU, pooling, dropout, flatten, residual sums) is per sample and
  needs nothing;
- the BN layer (fednorm.norms.FedBatchNorm2d) reduces over all n*b rows, the union, and
  applies each client's own affine parameters (n, C).

With parameters of their usual shape the layers are exactly nn.Conv2d and nn.Linear (the
global model at evaluation). :func:`clientwise` converts a built model in place: the classes
change, the parameters, their names and the state dict do not.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import vmap


def _per_client(op, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``op(x_i, weight_i, bias_i)`` for each client i of the (n*b, ...) rows of ``x``."""
    n = weight.shape[0]
    xs = x.reshape(n, -1, *x.shape[1:])
    if bias is None:
        out = vmap(lambda xi, wi: op(xi, wi, None))(xs, weight)
    else:
        out = vmap(op)(xs, weight, bias)
    return out.reshape(-1, *out.shape[2:])


class ClientConv2d(nn.Conv2d):
    """nn.Conv2d; with a (n, out, in, kh, kw) weight, client i's filters on client i's rows."""

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.dim() == 4:
            return super().forward(x)

        def conv(xi: Tensor, wi: Tensor, bi: Tensor | None) -> Tensor:
            return F.conv2d(xi, wi, bi, self.stride, self.padding, self.dilation, self.groups)

        return _per_client(conv, x, self.weight, self.bias)


class ClientLinear(nn.Linear):
    """nn.Linear; with a (n, out, in) weight, client i's weights on client i's rows."""

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.dim() == 2:
            return super().forward(x)
        return _per_client(F.linear, x, self.weight, self.bias)


_CLIENTWISE = {nn.Conv2d: ClientConv2d, nn.Linear: ClientLinear}


def clientwise(model: nn.Module) -> nn.Module:
    """Make every nn.Conv2d and nn.Linear of ``model`` (exactly those classes; a subclass such
    as WSConv2d is refused) accept client-stacked weights; returns ``model``."""
    for module in model.modules():
        if type(module) in _CLIENTWISE:
            module.__class__ = _CLIENTWISE[type(module)]
        elif isinstance(module, nn.Conv2d | nn.Linear) and type(module) not in (
                ClientConv2d, ClientLinear):
            raise TypeError(f"{type(module).__name__} has no client-stacked form")
    return model
