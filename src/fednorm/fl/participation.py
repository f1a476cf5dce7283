"""Which clients take part in a round (``participation`` < 1; the FixBN paper, Fig. I).

Each round (FedAvg) or step (DSGD, E = 1) run r draws m of its n clients without replacement:
the clients are ranked by ``rng.uniform(fold(key_r, round's first step), (n,))`` and the m
smallest draws take part (ties, possible with 24-bit draws, go to the lower client index: a
stable sort). The draw is counter-based (fednorm.rng, stream ``PARTICIPATE``): a pure function
of the run's seed and the round's first step, so a run draws the same clients alone or in a
bundle, on CPU or CUDA, and after other runs left the bundle. The engine trains the (R, m)
participants alone (fednorm.fl.round), and :class:`Participants` tells the samplers
(fednorm.fl.batches) whose batches to draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fednorm import rng


def participation_keys(seeds: Sequence[int], device: torch.device | str | None = None) -> Tensor:
    """(R,) keys of the runs' participation stream."""
    return rng.fold(rng.run_key(torch.tensor(list(seeds)), device), rng.PARTICIPATE)


def participant_indices(keys: Tensor, first_step: int | Tensor, n: int, m: int) -> Tensor:
    """(R, m) int64: the clients of each run that take part in the round from ``first_step``,
    in increasing order (the m of smallest draw, ties to the lower index). No host sync."""
    u = rng.uniform(rng.fold(keys, first_step), (n,))  # (R, n)
    return u.argsort(dim=-1, stable=True)[:, :m].sort(dim=-1).values


@dataclass(frozen=True)
class Participants:
    """Which m of the n clients of each run take part in the round of a step: what the engine
    trains and the samplers draw batches for (fednorm.fl.batches.ClientBatches); picklable, so
    the decoding workers of streamed data (fednorm.data.imagenet) draw the same clients."""

    keys: Tensor  # (R,) participation keys (:func:`participation_keys`)
    n: int
    m: int
    local_steps: int  # a round's steps: its clients are drawn at its first step

    def at(self, step: int | Tensor) -> Tensor:
        """(R, m) clients of the round that ``step`` belongs to, on the keys' device."""
        return participant_indices(self.keys, step - step % self.local_steps, self.n, self.m)

    def select(self, runs: Tensor) -> Participants:
        """Those of the runs ``runs`` (indices into the bundle)."""
        return Participants(self.keys[runs.to(self.keys.device)], self.n, self.m,
                            self.local_steps)
