"""The server's side of a run with Byzantine clients: what it receives, how it combines it.

The last ``f`` of the n clients are Byzantine. They follow the protocol (they hold data, train
and compute their statistics like everyone else) except for what they send: in place of their
statistics, each sends ``attack(honest rows)`` (fednorm.robust.attacks), computed from the
n - f honest clients' rows of the same round; an omniscient adversary, as in the FBN paper §5.

- Each statistic is attacked on its own: the means with ``attack(honest means)``, the variances
  with ``attack(honest variances)``; ``attack_stats`` says which are ("mean_var": both, "mean":
  the Byzantine clients send their honest variances, "var": their honest means).
- A variance must stay a variance: an attacked variance is clamped at ``var_floor``
  (:func:`~fednorm.robust.attacks.keep_variance_valid`). SF and FOE send negative variances
  (-mean, -eps * mean), which become ``var_floor``: a tiny variance, i.e. a huge scale
  1/sqrt(var_floor + eps) once normalized with. Honest variances are never touched.
- With ``attack_updates`` the Byzantine clients also send ``attack(honest updates)`` in place of
  their model updates (flattened, one row per client: :meth:`Server.receive_rows`), and the
  server combines the updates with the same rule (Robust-DSGD when E = 1: the update of a
  client is -lr times its momentum).
- The server combines each (n, C) statistic with ``aggregator`` after NNM if ``nnm``
  (fednorm.robust.aggregators); the normalizer's rule decides what it combines
  (:meth:`fednorm.norms.rules.StatRule.aggregate`; for FBN, also the spread of the means).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fednorm.config import RunConfig
from fednorm.norms.rules import Stats, mean_rows
from fednorm.robust.aggregators import aggregate
from fednorm.robust.attacks import attack as run_attack
from fednorm.robust.attacks import keep_variance_valid

__all__ = ["Server"]


@dataclass(frozen=True)
class Server:
    """The Byzantine clients' attack and the server's aggregation rule of one run."""

    attack: str = "none"
    f: int = 0
    aggregator: str = "mean"
    nnm: bool = False
    foe_eps: float = 1.1
    alie_z: float | None = None
    var_floor: float = 1e-5
    attack_stats: str = "mean_var"
    attack_updates: bool = False

    @classmethod
    def from_config(cls, cfg: RunConfig) -> Server:
        return cls(cfg.attack, cfg.f, cfg.aggregator, cfg.nnm, cfg.foe_eps, cfg.alie_z,
                   cfg.var_floor, cfg.attack_stats, cfg.attack_updates)

    def _params(self) -> dict[str, Any]:
        return {"foe": {"eps": self.foe_eps}, "alie": {"z": self.alie_z}}.get(self.attack, {})

    def _byzantine_rows(self, x: Tensor) -> Tensor:
        """(n, C) -> (n, C): the honest rows, then the f rows the attack computes from them."""
        honest = x[: x.shape[0] - self.f]
        return torch.cat([honest, run_attack(self.attack, honest, self.f, **self._params())])

    def receive_rows(self, x: Tensor) -> Tensor:
        """(n, d) client vectors (e.g. flattened model updates) as the server receives them:
        the last f rows replaced by the attack on the first n - f; unchanged without one."""
        if self.attack == "none" or self.f == 0:
            return x
        if x.shape[0] <= 2 * self.f:
            raise ValueError(f"x must have more than 2f = {2 * self.f} client rows, got "
                             f"{x.shape[0]}")
        return self._byzantine_rows(x)

    def receive(self, reports: Stats) -> Stats:
        """The statistics as the server receives them: the last f rows replaced by the attack.

        Without an attack (or with f = 0) the reports come back unchanged.
        """
        if self.attack == "none" or self.f == 0:
            return reports
        mean, var = reports.mean, reports.var
        if self.attack_stats in ("mean_var", "mean"):
            mean = self.receive_rows(mean)
        if self.attack_stats in ("mean_var", "var"):
            honest = var.shape[0] - self.f
            var = self.receive_rows(var)
            var = torch.cat([var[:honest], keep_variance_valid(var[honest:], self.var_floor)])
        return Stats(mean, var)

    def combine(self, x: Tensor) -> Tensor:
        """(n, C) -> (C,): the configured aggregator (after NNM if set); by default the plain
        mean of :func:`fednorm.norms.rules.mean_rows`, bit for bit as without a server."""
        if self.aggregator == "mean" and not self.nnm:
            return mean_rows(x)
        return aggregate(x, self.aggregator, self.f, nnm=self.nnm)
