"""A bundle's training state: everything that must survive a kill, in one object whose every
tensor carries the run axis first (torchtitan's ``TrainState``, sliced along the runs).

:class:`BundleState` holds what the rounds change; everything else (samplers, learning rates,
random keys, servers) is a function of the runs' configs and the step, and is rebuilt from them.
Three operations serve every use:

- :meth:`BundleState.select` keeps some runs (one tree map over the tensors): dropping the runs
  that diverged, taking the runs requested out of a resume point, and halving a bundle that does
  not fit the device's memory are the same call.
- :meth:`BundleState.state_dict` is what a resume point saves (fednorm.fl.resume).
- :meth:`BundleState.load_state_dict` continues from it: the model tensors are written in place
  (a one-run bundle's tensors are views of its model's own), the rest replaced.

The runs of one state train in lock-step, so ``step`` and ``since`` are shared numbers, not
tensors.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

# each run's rows so far, the columns of fednorm.metrics.METRIC_COLUMNS and fednorm.fl.train's
# LAYER_COLUMNS and DYNAMICS_COLUMNS; a finished run's TrainResult has the same three lists
HISTORY = ("rows", "layer_rows", "dynamics_rows")
# written in place by load_state_dict
MODEL_PARTS = ("params", "stats", "momenta", "local", "joined")


def empty_history() -> dict[str, list[dict]]:
    return {k: [] for k in HISTORY}


@dataclass
class BundleState:
    """The state of R runs training in lock-step; every tensor is (R, ...)."""

    runs: list[dict[str, Any]]  # the runs' identities (fednorm.config.RunConfig.identity)
    params: dict[str, Tensor]  # (R, *shape)
    stats: dict[str, Tensor]  # BN running statistics, (R, C)
    momenta: dict[str, Tensor]  # (R, *shape) (DSGD) or (R, n, *shape) (FedAvg)
    loss_sum: Tensor  # (R,): the training loss summed since the last evaluation point
    # the clients' own parts (FedBN, SiloBN, Hybrid BN's d: fednorm.fl.round.FedAvg), (R, n,
    # ...), kept for every client across rounds
    local: dict[str, Tensor] = field(default_factory=dict)
    # "clients": (R, n) bool, whether each client has trained (and so holds its own parts that
    # the server also averages: Normalizer.kept); empty when none are
    joined: dict[str, Tensor] = field(default_factory=dict)
    # what a method's hooks compute once and keep (R, ...) (fednorm.norms.hooks: a mixing
    # matrix's inputs), replaced as a whole by load_state_dict
    method: dict[str, Tensor] = field(default_factory=dict)
    # the training dynamics' sums (fednorm.fl.dynamics.Dynamics.zeros), when recorded
    dynamics: dict[str, Any] | None = None
    history: list[dict[str, list[dict]]] = field(default_factory=list)  # per run: HISTORY
    step: int = 0  # the first step of the next round
    since: int = 0  # the steps summed in loss_sum

    @property
    def size(self) -> int:
        return len(self.runs)

    def select(self, ids: Tensor | list[int]) -> BundleState:
        """The runs at positions ``ids`` alone, in that order: every tensor indexed along its
        run axis (new tensors), the per-run lists picked."""
        index = torch.as_tensor(ids, dtype=torch.long)
        picks = index.tolist()

        def pick(leaf: Any) -> Any:
            return leaf[index.to(leaf.device)] if isinstance(leaf, Tensor) else leaf

        tensors = {f: tree_map(pick, getattr(self, f))
                   for f in (*MODEL_PARTS, "loss_sum", "dynamics", "method")}
        return dataclasses.replace(self, **tensors, runs=[self.runs[i] for i in picks],
                                   history=[self.history[i] for i in picks])

    def state_dict(self) -> dict[str, Any]:
        """Every field by name (tensors not copied: saving writes them out at once)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_state_dict(cls, saved: dict[str, Any]) -> BundleState:
        """A saved state as an object (its tensors where they were loaded), to select from."""
        return cls(**saved)

    @torch.no_grad()
    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` of a state of the same runs and shapes: the model
        parts copied into this state's tensors, the rest moved to their device; the rows are
        copied, so that training on never appends to ``saved``'s."""
        for part in MODEL_PARTS:
            own, new = getattr(self, part), saved.get(part, {})
            if own.keys() != new.keys():
                raise ValueError(f"BundleState: the saved {part} have other keys")
            for k, t in own.items():
                t.copy_(new[k])
        device = self.loss_sum.device
        self.dynamics = tree_map(lambda t: t.to(device) if isinstance(t, Tensor) else t,
                                 saved["dynamics"])
        self.loss_sum = saved["loss_sum"].to(device)
        self.method = {k: t.to(device) for k, t in saved.get("method", {}).items()}
        self.runs = list(saved["runs"])
        self.history = [{k: list(h[k]) for k in HISTORY} for h in saved["history"]]
        self.step, self.since = saved["step"], saved["since"]
