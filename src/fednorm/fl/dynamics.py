"""The FixBN paper's training dynamics of BN under FedAvg (its §6.1 and Fig. 3 (a), (b)),
recorded only for runs that ask (``record_dynamics: true``): ordinary runs pay nothing, their
normalization layers record no mini-batch statistics.

Per BN layer, S is the layer's statistics as one vector: the per-channel means, then the
per-channel variances (2C numbers; a client's mini-batch variance is the biased one its layer
normalizes with), and ||.||_1 the sum of absolute values. At every evaluation point, for the
steps since the previous one:

- ``stat_change``: ||S̄(t+1) - S̄(t)||_1, how far one round of aggregation moved the global
  running statistics S̄, averaged over the rounds (Fig. 3a, "changes of global accumulated
  statistics");
- ``stat_deviation``: ||S_m,B(t+1) - S̄(t)||_1, how far client m's mini-batch statistics in a
  local step of a round are from the global statistics that round started from, averaged over
  the clients and the local steps (Fig. 3a, "deviations of local mini-batch statistics");
- ``stat_variance``: the variance of each client's mini-batch statistics S_m,B over the last
  ``dynamics_window`` local steps (t - W, t] (fewer at the start; the population variance, as
  the paper's Appendix B.6 formula), summed over the 2C entries and averaged over the clients
  (Fig. 3b).

Fig. 3c, the clients' average local training loss, is every run's ``train_loss``; Fig. 3d, the
final accuracy against the freezing round, is a grid over ``fixbn_freeze``. The run's
``dynamics.csv`` has one row per evaluation point and layer; its ``metrics.csv`` sums the layers
(the L1 norm over all the network's statistics).

Everything stays on the device between evaluation points: running sums of the norms, and a ring
buffer of the last W mini-batch statistics, (R, W, n, 2C) per layer, for the windowed variance;
they are part of the bundle's state (fednorm.fl.state.BundleState), run axis first, so they are
saved, resumed and sliced with the rest of it.
DSGD (E = 1) has one local step per round.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from fednorm.metrics import DYNAMICS as QUANTITIES
from fednorm.norms import Stats


def _vector(mean: Tensor, var: Tensor) -> Tensor:
    """(..., C) mean and variance -> S, (..., 2C)."""
    return torch.cat([mean, var], dim=-1)


class Dynamics:
    """The recorder of one bundle's dynamics, R runs and L layers (in ``keys``' order). Its
    sums live in the bundle's state (fednorm.fl.state.BundleState.dynamics, :meth:`zeros`), run
    axis first: ``change`` and ``deviation`` (R, L), ``ring`` {layer: (R, W, n, 2C)}, and the
    counters ``position``, ``filled``, ``rounds``, ``steps``. The engine calls
    :meth:`observe_step` every local step and :meth:`observe_round` after every aggregation,
    the training loop :meth:`take` at every evaluation point."""

    def __init__(self, keys: list[str], window: int) -> None:
        self.keys, self.window = list(keys), window

    def zeros(self, runs: int, device: torch.device) -> dict:
        """The sums of ``runs`` runs before any step (the ring is allocated at the first)."""
        return {"ring": {}, "change": torch.zeros(runs, len(self.keys), device=device),
                "deviation": torch.zeros(runs, len(self.keys), device=device),
                "position": 0, "filled": 0, "rounds": 0, "steps": 0}

    def _stat(self, stats: dict[str, Tensor], key: str) -> Tensor:
        return _vector(stats[f"{key}.running_mean"], stats[f"{key}.running_var"])

    @torch.no_grad()
    def observe_step(self, sums: dict, batches: dict[str, Stats | tuple[Tensor, Tensor]],
                     global_stats: dict[str, Tensor]) -> None:
        """One local step: ``batches`` maps a layer to its clients' mini-batch (mean, var),
        (R, n, C) each; ``global_stats`` holds the running statistics the round started from,
        ``<layer>.running_mean`` / ``running_var`` (R, C)."""
        ring = sums["ring"]
        for i, key in enumerate(self.keys):
            mean, var = batches[key]
            s = _vector(mean, var).to(sums["change"].dtype)  # (R, n, 2C)
            start = self._stat(global_stats, key).to(s.dtype).unsqueeze(1)  # (R, 1, 2C)
            sums["deviation"][:, i] += (s - start).abs().sum(-1).mean(-1)
            if key not in ring:
                ring[key] = s.new_zeros(s.shape[0], self.window, *s.shape[1:])
            ring[key][:, sums["position"]] = s
        sums["position"] = (sums["position"] + 1) % self.window
        sums["filled"] = min(sums["filled"] + 1, self.window)
        sums["steps"] += 1

    @torch.no_grad()
    def observe_round(self, sums: dict, before: dict[str, Tensor],
                      after: dict[str, Tensor]) -> None:
        """One aggregation: the global running statistics ``before`` and ``after`` it."""
        for i, key in enumerate(self.keys):
            moved = self._stat(after, key) - self._stat(before, key)
            sums["change"][:, i] += moved.abs().sum(-1).to(sums["change"].dtype)
        sums["rounds"] += 1

    @torch.no_grad()
    def take(self, sums: dict) -> dict[str, Tensor]:
        """The quantities (QUANTITIES -> (R, L)) since the last call, which restarts the sums
        (not the window). NaN where nothing was observed yet."""
        nan = torch.full_like(sums["change"], math.nan)
        change = sums["change"] / sums["rounds"] if sums["rounds"] else nan
        deviation = sums["deviation"] / sums["steps"] if sums["steps"] else nan
        filled = sums["filled"]
        if filled:
            variance = torch.stack(
                [ring[:, :filled].var(1, correction=0).sum(-1).mean(-1)
                 for ring in (sums["ring"][k] for k in self.keys)], dim=1)
        else:
            variance = nan
        sums["change"], sums["deviation"] = torch.zeros_like(nan), torch.zeros_like(nan)
        sums["rounds"] = sums["steps"] = 0
        return dict(zip(QUANTITIES, (change, deviation, variance), strict=True))
