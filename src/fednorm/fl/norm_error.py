"""Normalization error of a global model: how far the statistics it uses at test time (each BN
layer's running statistics) are from the statistics centralized BN would compute on the union of
the clients' current batches (what none of the papers plots; FBN paper Fig 2c is its 2-D analogue).

Per layer, averaged over channels c (sigma^2 the central unbiased variance):
    mean_error = mean_c |mu_run - mu| / sigma          (the mean's error in units of the std)
    var_error  = mean_c |sigma^2_run - sigma^2| / sigma^2   (relative error of the variance)
The mean's error is scaled by sigma, not |mu|: channel means near 0 would make a relative error
meaningless, and sigma is the scale at which a shifted mean moves the normalized outputs.

With Byzantine clients (an ``attack``), the union is that of the n - f honest clients' batches:
the statistics a robust server should recover (fednorm.fl.train builds the probe).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fednorm.norms import FedBatchNorm2d, NormContext, Stats, UnionStats, norm_context

_EPS = 1e-12


@torch.no_grad()
def union_statistics(model: nn.Module, layers: list[FedBatchNorm2d], x: Tensor,
                     n_clients: int) -> dict[str, Stats]:
    """Each BN layer's input mean and unbiased variance on the union batch ``x`` (client-major),
    propagated as centralized BN would (every layer normalizes with the union statistics).

    Leaves the model's buffers, its mode and the global random state as they were.
    """
    was_training = model.training
    model.train()
    ctx = NormContext(UnionStats(), n_clients, n_clients, beta=1.0)
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), norm_context(ctx):
        model(x)
    model.train(was_training)
    # With beta = 1 a report is the union batch's mean and Kn/(Kn-1)-unbiased variance.
    return {layer.key: Stats(ctx.reports[layer.key].mean[0], ctx.reports[layer.key].var[0])
            for layer in layers}


def layer_errors(layers: list[FedBatchNorm2d], central: dict[str, Stats]) -> list[dict]:
    """One row per layer: ``layer``, ``mean_error``, ``var_error`` (see the module docstring)."""
    rows = []
    for layer in layers:
        c = central[layer.key]
        sigma2 = c.var.clamp_min(_EPS)
        rows.append({
            "layer": layer.key,
            "mean_error": ((layer.running_mean - c.mean).abs() / sigma2.sqrt()).mean().item(),
            "var_error": ((layer.running_var - c.var).abs() / sigma2).mean().item(),
        })
    return rows
