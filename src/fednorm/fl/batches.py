"""Per-client mini-batches drawn on the device, for all clients of all runs of a bundle at once
(no per-client or per-run loop).

Randomness is counter-based (fednorm.rng): the batch of run r at step t is a pure function of
(run r's seed, stream, t), so a run draws the same batches alone or in a bundle, on any device,
and a run can be dropped from the bundle without changing what the others draw. Under partial
participation the sampler may draw for a round's participants only (:meth:`ClientBatches.
for_participants`): their rows of the same draws, so a participant's batch is the same whether
the idle clients' batches are drawn too or not.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor

from fednorm import rng
from fednorm.data.augment import Augment
from fednorm.fl.participation import Participants


class ClientBatches:
    """Samples b examples per client per step from each client's index set, for R runs.

    ``parts[r][i]`` holds the indices of client i's data in run r (runs may split the data
    differently). Each client's b indices are drawn uniformly from its own data, independently
    across steps (with replacement across and within steps: clients of unequal size, as under
    Dirichlet partitions, are handled by the same single gather). A sample is stacked
    run-major, then client-major: ``x[r, i*b:(i+1)*b]`` is client i's batch in run r.
    ``augment`` (not None): each image goes through it (fednorm.data.augment: CIFAR's padded
    crop and flip, ImageNet's resized crop and flip) with the run's own random draws.
    ``participants`` (None: every client): the clients whose batches are drawn, m of them at
    every step; then ``x[r, j*b:(j+1)*b]`` is the batch of run r's j-th participant
    (:meth:`for_participants`).
    """

    # Draws on the device: a step may be a device tensor (the engine's clock), and then no
    # number of it reaches the host (fednorm.fl.streamed's decoders take Python steps)
    on_device = True

    def __init__(self, x: Tensor | None, y: Tensor, parts: Sequence[Sequence[Tensor]],
                 batch_size: int, seeds: Sequence[int], stream: int = rng.SAMPLE,
                 augment: Augment | None = None) -> None:
        if any(len(p) == 0 for run in parts for p in run):
            raise ValueError("every client needs at least one training example")
        if len({len(run) for run in parts}) != 1 or len(parts) != len(seeds):
            raise ValueError("every run needs the same number of clients, and one seed each")
        device = y.device  # x: None for images streamed from disk (fednorm.data.imagenet)
        self.x, self.y, self.b, self.augment = x, y, batch_size, augment
        self.stream = stream  # rng.SAMPLE: training batches; rng.PROBE: the probe's
        self.n = len(parts[0])
        self.sizes = torch.tensor([[len(p) for p in run] for run in parts], device=device)
        self.index = torch.zeros(len(parts), self.n, int(self.sizes.max()), dtype=torch.long,
                                 device=device)
        for r, run in enumerate(parts):  # once, at start-up
            for i, p in enumerate(run):
                self.index[r, i, : len(p)] = p.to(device)
        keys = rng.run_key(torch.tensor(list(seeds)), device)
        self.keys = rng.fold(keys, stream)
        # the training batches' crops and flips: the run's AUGMENT stream; another stream's
        # (the probe's, of streamed images: fednorm.data.imagenet) are drawn from its own key
        self.augment_keys = rng.fold(keys if stream == rng.SAMPLE else self.keys, rng.AUGMENT)
        self.participants: Participants | None = None

    def for_participants(self, participants: Participants) -> ClientBatches:
        """This sampler drawing, at every step, only the batches of the round's participants
        (``participants.at(step)``), each the same as the full draw's rows of that client."""
        out = copy.copy(self)
        keys = participants.keys.to(self.keys.device)
        out.participants = Participants(keys, participants.n, participants.m,
                                        participants.local_steps)
        return out

    def resized(self, batch_size: int, stream: int) -> ClientBatches:
        """This sampler drawing ``batch_size`` examples per client from draws of their own,
        ``stream`` folded into its keys (Hybrid BN's round-start statistics: rng.STATISTICS),
        for the same clients (the same participants) at every step."""
        out = copy.copy(self)
        out.b = batch_size
        out.keys = rng.fold(self.keys, stream)
        out.augment_keys = rng.fold(self.augment_keys, stream)
        return out

    def _who(self, step: int | Tensor) -> Tensor | None:
        """(R, m) the round's participants at ``step``, or None: every client is drawn."""
        return None if self.participants is None else self.participants.at(step)

    @staticmethod
    def _clients(who: Tensor | None, per_client: Tensor) -> Tensor:
        """``per_client`` (R, n, ...), the rows of the clients ``who`` (R, m) whose batches
        are drawn (None: all n)."""
        if who is None:
            return per_client
        return per_client.gather(1, who.view(*who.shape, *[1] * (per_client.dim() - 2))
                                 .expand(*who.shape, *per_client.shape[2:]))

    def indices(self, step: int | Tensor, who: Tensor | None = None) -> Tensor:
        """(R, n*b) indices into the data of the examples drawn at ``step`` (R, m*b for the
        participants alone; ``who``: them, when the caller has drawn them already)."""
        who = self._who(step) if who is None else who
        u = self._clients(who, rng.uniform(rng.fold(self.keys, step), (self.n, self.b)))
        sizes = self._clients(who, self.sizes)[..., None]  # (R, n or m, 1)
        pos = torch.minimum((u * sizes).long(), sizes - 1)
        return self._clients(who, self.index).gather(2, pos).flatten(1)

    def augment_draws(self, step: int | Tensor, draws: int, who: Tensor | None = None
                      ) -> Tensor:
        """(R, n*b, draws) uniforms of the augmentation of ``step``'s images, one row per image
        of :meth:`indices` (its participants' rows alone when they are drawn)."""
        u = rng.uniform(rng.fold(self.augment_keys, step), (self.n * self.b, draws))
        if self.participants is None:
            return u
        who = self._who(step) if who is None else who
        return self._clients(who, u.view(u.shape[0], self.n, self.b, draws)).flatten(1, 2)

    def sample(self, step: int | Tensor) -> tuple[Tensor, Tensor]:
        """``x`` (R, n*b, C, H, W) and ``y`` (R, n*b) of ``step`` (m*b: the participants',
        drawn once for both the indices and the augmentation)."""
        who = self._who(step)
        idx = self.indices(step, who)
        x = self.x[idx]
        if self.augment is not None:
            u = self.augment_draws(step, self.augment.draws, who)
            x = self.augment.fn(x.flatten(0, 1), u.flatten(0, 1)).view_as(x)
        return x, self.y[idx]

    def select(self, runs: Tensor) -> ClientBatches:
        """The sampler of the runs ``runs`` (indices into this bundle), same draws for each."""
        out = copy.copy(self)
        out.sizes, out.index = self.sizes[runs], self.index[runs]
        out.keys, out.augment_keys = self.keys[runs], self.augment_keys[runs]
        if self.participants is not None:
            out.participants = self.participants.select(runs)
        return out
