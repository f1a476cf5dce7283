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
Everything is computed for all runs of a bundle at once: (R, L) errors for L BN layers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fednorm.fl.step import forward_fn, over_runs
from fednorm.fl.trainer import Trainer
from fednorm.norms import UnionStats

_EPS = 1e-12


@torch.no_grad()
def union_statistics(trainer: Trainer, x: Tensor, key: Tensor) -> dict[str, tuple[Tensor,
                                                                                    Tensor]]:
    """Each BN layer's input mean and unbiased variance, (R, C) each, on each run's union batch
    ``x`` (R, g*b, ...) of g clients (client-major), propagated as centralized BN would (every
    layer normalizes with the union statistics). A pure function: no state changes."""
    groups = x.shape[1] // trainer.cfg.batch_size
    forward = over_runs(forward_fn(trainer.model, UnionStats(), groups, trainer.n, 1.0),
                        trainer.runs)
    _, reports, _ = forward(trainer.state.params, trainer.state.stats, x, key)
    # With beta = 1 a report is the union batch's mean and Kn/(Kn-1)-unbiased variance; every
    # client row holds the same union statistics.
    return {k: (mean[:, 0], var[:, 0]) for k, (mean, var) in reports.items()}


def layer_errors(trainer: Trainer, central: dict[str, tuple[Tensor, Tensor]]
                 ) -> tuple[Tensor, Tensor]:
    """``mean_error`` and ``var_error`` (see the module docstring), (R, L) each, layers in the
    order of ``trainer.layers``."""
    mean_errors, var_errors = [], []
    for layer in trainer.layers:
        mu, var = central[layer.key]
        sigma2 = var.clamp_min(_EPS)
        run_mean = trainer.state.stats[f"{layer.key}.running_mean"]
        run_var = trainer.state.stats[f"{layer.key}.running_var"]
        mean_errors.append(((run_mean - mu).abs() / sigma2.sqrt()).mean(-1))
        var_errors.append(((run_var - var).abs() / sigma2).mean(-1))
    return torch.stack(mean_errors, 1), torch.stack(var_errors, 1)
