"""The clients' own parts: which of a model's tensors each client keeps across rounds, and how
the round loads, saves and serves them, so that no other module of the engine names a part.

The method says which tensors (fednorm.norms.Normalizer.client_parts, by module type); the
state holds them, (R, n, ...) each, in its ``local`` (what a resume point saves), and, when some
are averaged too, whether each client has trained (``joined``). Three kinds:

- ``own``: never averaged; the global copies stay as they were (the server excludes them);
- ``shared``: averaged into the global model as well; a client that has not trained yet starts
  from the server's average; a test takes the global model's;
- ``served``: averaged into the global model as well; at a round's end the server hands each
  participant its own mix of the participants' values (a matrix, the method's
  ``aggregation_matrix`` hook), which that client starts its next round from and is tested
  with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fednorm.fl.buffers import per_client, row_index, rows
from fednorm.norms import PartNames


class ClientParts:
    """The clients' own parts of one bundle (the module's docstring)."""

    def __init__(self, names: PartNames, stat_names: Sequence[str]) -> None:
        self.names = names
        self.averaged = frozenset((*names.shared, *names.served))  # theirs and the server's
        self.never_averaged = frozenset(names.own)
        self.tested = frozenset((*names.own, *names.served))  # each client tested with its own
        # the server aggregates no statistics when every client keeps all of them
        self.keeps_statistics = bool(stat_names) and set(stat_names) <= self.never_averaged

    @property
    def any(self) -> bool:
        """Whether the clients keep anything (then each client's state matters: FedAvg's
        per-client path)."""
        return bool(self.never_averaged or self.averaged)

    def create(self, state, n: int) -> None:
        """The state's ``local`` from its global tensors, and ``joined`` when some are
        averaged too."""
        everything = {**state.params, **state.stats}
        state.local = {k: per_client(everything[k], n) for k in (*self.names.own,
                                                                *self.names.shared,
                                                                *self.names.served)}
        if self.averaged:
            first = next(iter(state.params.values()))
            state.joined = {"clients": torch.zeros(first.shape[0], n, dtype=torch.bool,
                                                   device=first.device)}

    def load(self, state, who: Tensor | None, averaged_only: bool = False
             ) -> dict[str, Tensor]:
        """Each client's own parts, (R, n, ...), or those of the round's participants ``who``
        (R, m); ``averaged_only``: the parts the server also averages alone. Such a part is the
        global value for a client that has not trained yet: its first round starts from the
        server's average."""
        out = {}
        for k, own in state.local.items():
            if averaged_only and k not in self.averaged:
                continue
            part = own if who is None else rows(own, who)
            if k in self.averaged:
                joined = state.joined["clients"]
                joined = joined if who is None else joined.gather(1, who)
                glob = {**state.params, **state.stats}[k].unsqueeze(1)
                part = torch.where(joined.view(*joined.shape, *[1] * (part.dim() - 2)), part,
                                   glob)
            out[k] = part.clone()
        return out

    def save(self, state, new: dict[str, Tensor], who: Tensor | None) -> None:
        """The round's end on the clients: each client's own parts stored from ``new`` (the
        computing clients' tensors; idle ones' as they were), the clients that trained
        marked."""
        for k, own in state.local.items():
            _store(own, new[k], who)
        if self.averaged:  # the round's clients have trained: their own parts are theirs now
            joined = state.joined["clients"]
            if who is None:
                joined.fill_(True)
            else:
                joined.scatter_(1, who, True)

    @torch.no_grad()
    def serve(self, state, matrix: Tensor, clients: dict[str, Tensor], who: Tensor | None
              ) -> None:
        """Each computing client's served parts: its row of the server's ``matrix`` (R, m, m),
        row-stochastic over the computing clients, times the clients' trained values
        ``clients`` (R, m, ...): client i gets sum_j matrix[i, j] theta_j."""
        for k in self.names.served:
            p = clients[k]
            served = torch.einsum("rij,rjd->rid", matrix.to(p.dtype),
                                 p.reshape(*p.shape[:2], -1)).view_as(p)
            _store(state.local[k], served, who)

    def tested_parts(self, state) -> dict[str, Tensor]:
        """The parts a test takes from each client (none: the global model alone)."""
        return {k: own for k, own in state.local.items() if k in self.tested}


def _store(own: Tensor, new: Tensor, who: Tensor | None) -> None:
    if who is None:
        own.copy_(new)
    else:
        own.scatter_(1, row_index(who, own), new)
