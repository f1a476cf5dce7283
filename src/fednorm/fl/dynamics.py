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
buffer of the last W mini-batch statistics, (W, R, n, 2C) per layer, for the windowed variance.
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
    """Running sums of one bundle's dynamics, (R, L) for R runs and L layers (in ``keys``'
    order); the engine calls :meth:`observe_step` every local step and :meth:`observe_round`
    after every aggregation, the training loop :meth:`take` at every evaluation point."""

    def __init__(self, keys: list[str], window: int, runs: int, device: torch.device) -> None:
        self.keys, self.window = list(keys), window
        self.ring: dict[str, Tensor] = {}  # (W, R, n, 2C), allocated at the first step
        self.position = self.filled = 0
        self.change = torch.zeros(runs, len(self.keys), device=device)
        self.deviation = torch.zeros(runs, len(self.keys), device=device)
        self.rounds = self.steps = 0

    def _stat(self, stats: dict[str, Tensor], key: str) -> Tensor:
        return _vector(stats[f"{key}.running_mean"], stats[f"{key}.running_var"])

    @torch.no_grad()
    def observe_step(self, batches: dict[str, Stats | tuple[Tensor, Tensor]],
                     global_stats: dict[str, Tensor]) -> None:
        """One local step: ``batches`` maps a layer to its clients' mini-batch (mean, var),
        (R, n, C) each; ``global_stats`` holds the running statistics the round started from,
        ``<layer>.running_mean`` / ``running_var`` (R, C)."""
        for i, key in enumerate(self.keys):
            mean, var = batches[key]
            s = _vector(mean, var).to(self.change.dtype)  # (R, n, 2C)
            start = self._stat(global_stats, key).to(s.dtype).unsqueeze(1)  # (R, 1, 2C)
            self.deviation[:, i] += (s - start).abs().sum(-1).mean(-1)
            if key not in self.ring:
                self.ring[key] = s.new_zeros(self.window, *s.shape)
            self.ring[key][self.position] = s
        self.position = (self.position + 1) % self.window
        self.filled = min(self.filled + 1, self.window)
        self.steps += 1

    @torch.no_grad()
    def observe_round(self, before: dict[str, Tensor], after: dict[str, Tensor]) -> None:
        """One aggregation: the global running statistics ``before`` and ``after`` it."""
        for i, key in enumerate(self.keys):
            moved = self._stat(after, key) - self._stat(before, key)
            self.change[:, i] += moved.abs().sum(-1).to(self.change.dtype)
        self.rounds += 1

    @torch.no_grad()
    def take(self) -> dict[str, Tensor]:
        """The quantities (QUANTITIES -> (R, L)) since the last call, which restarts the sums
        (not the window). NaN where nothing was observed yet."""
        nan = torch.full_like(self.change, math.nan)
        change = self.change / self.rounds if self.rounds else nan
        deviation = self.deviation / self.steps if self.steps else nan
        if self.filled:
            variance = torch.stack(
                [ring[: self.filled].var(0, correction=0).sum(-1).mean(-1)
                 for ring in (self.ring[k] for k in self.keys)], dim=1)
        else:
            variance = nan
        self.change, self.deviation = torch.zeros_like(nan), torch.zeros_like(nan)
        self.rounds = self.steps = 0
        return dict(zip(QUANTITIES, (change, deviation, variance), strict=True))

    _COUNTERS = ("position", "filled", "rounds", "steps")

    def state_dict(self) -> dict:
        """The sums and the window, for a resume point (fednorm.fl.resume)."""
        return {"ring": self.ring, "change": self.change, "deviation": self.deviation,
                **{k: getattr(self, k) for k in self._COUNTERS}}

    def load_state_dict(self, saved: dict) -> None:
        device = self.change.device
        self.ring = {k: t.to(device) for k, t in saved["ring"].items()}
        self.change, self.deviation = saved["change"].to(device), saved["deviation"].to(device)
        for k in self._COUNTERS:
            setattr(self, k, saved[k])

    def select(self, runs: Tensor) -> None:
        """Keep the runs ``runs`` (indices into the bundle) alone."""
        self.load_state_dict(self.select_state(self.state_dict(), runs))

    @staticmethod
    def select_state(saved: dict, runs: Tensor) -> dict:
        """:meth:`state_dict` of the runs ``runs`` alone (the window's slots are dim 0, the
        runs dim 1 of the ring)."""
        return {**saved, "ring": {k: ring[:, runs] for k, ring in saved["ring"].items()},
                "change": saved["change"][runs], "deviation": saved["deviation"][runs]}
