"""The static buffers a local step reads and writes, and the views of them, made once.

A local step that a CUDA graph can replay (fednorm.fl.graphed) touches the same tensors at
every step and dispatches no operator to reshape them. So the clients' parameters and
statistics of a round are buffers allocated once per bundle and number of computing clients,
filled in place each round; the participants' momenta are gathered into buffers of their own;
and every view a step needs (flattened over (run, client), the statistics as the layers report
them) is made once per tensor and looked up after. :class:`Views` holds them all, each under
its role and key, beside the state they were made from (a bundle that drops runs starts a new
state, and so new buffers: :meth:`Views.clear`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from fednorm.fl.state import BundleState


class Views:
    """The buffers and views of one trainer's state, made once each (see the module)."""

    def __init__(self) -> None:
        self._held: dict[tuple, tuple[Any, Any]] = {}

    def clear(self) -> None:
        """Forget them all (views and buffers of R runs: the state changed its runs)."""
        self._held.clear()

    def view(self, role: str, key: str, t: Tensor, make: Callable[[Tensor], Tensor]) -> Tensor:
        """``make(t)``, a view of ``t``, made once while ``t`` is the same tensor."""
        held = self._held.get((role, key))
        if held is None or held[0] is not t:
            held = self._held[(role, key)] = (t, make(t))
        return held[1]

    def flat(self, role: str, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        """(R, n, ...) -> (R*n, ...) views, made once per tensor."""
        return {k: self.view(role, k, t, lambda u: u.view(-1, *u.shape[2:]))
                for k, t in tensors.items()}

    def round_buffers(self, state: BundleState, n: int
                      ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The clients' parameters and statistics of a round of ``n`` computing clients, (R, n,
        ...): buffers allocated once per state and ``n``, each client's filled from the
        global state in place (one foreach copy, broadcast over the clients)."""
        key = ("buffers", str(n))
        held = self._held.get(key)
        glob = {**state.params, **state.stats}
        if held is None or held[0] is not state:
            made = {k: t.new_empty((t.shape[0], n, *t.shape[1:])) for k, t in glob.items()}
            held = self._held[key] = (state, made)
        buffers = held[1]
        torch._foreach_copy_(list(buffers.values()),
                             [self.view("per_client", k, t, lambda u: u.unsqueeze(1))
                              for k, t in glob.items()])
        return ({k: buffers[k] for k in state.params}, {k: buffers[k] for k in state.stats})

    def picked_momenta(self, state: BundleState, who: Tensor) -> dict[str, Tensor]:
        """The participants' ``who`` (R, m) rows of the clients' momenta, (R, m, ...), gathered
        into buffers allocated once per state (a round's gathered state stays static)."""
        key = ("picked", str(who.shape[1]))
        held = self._held.get(key)
        if held is None or held[0] is not state:
            made = {k: m.new_empty((m.shape[0], who.shape[1], *m.shape[2:]))
                    for k, m in state.momenta.items()}
            held = self._held[key] = (state, made)
        for k, m in state.momenta.items():
            torch.gather(m, 1, row_index(who, m), out=held[1][k])
        return dict(held[1])

    def zeros(self, like: Tensor, count: int) -> Tensor:
        """``count`` zeros of ``like``'s kind, made once per count (a constant key)."""
        held = self._held.get(("zeros", str(count)))
        if held is None:
            zero = like.new_zeros(count)
            held = self._held[("zeros", str(count))] = (zero, zero)
        return held[1]


def row_index(who: Tensor, t: Tensor) -> Tensor:
    """(R, m) clients -> an index of ``t`` (R, n, ...)'s client dimension for gather/scatter."""
    return who.view(*who.shape, *[1] * (t.dim() - 2)).expand(*who.shape, *t.shape[2:])


def rows(t: Tensor, who: Tensor) -> Tensor:
    """The clients ``who`` (R, m) of ``t`` (R, n, ...): (R, m, ...), a copy."""
    return t.gather(1, row_index(who, t))


def per_client(t: Tensor, n: int) -> Tensor:
    """(R, ...) global state -> (R, n, ...): every client starts the round from it."""
    return t.unsqueeze(1).expand(t.shape[0], n, *t.shape[1:]).clone()


def stack(tensors: list[Tensor]) -> Tensor:
    """The runs' tensors with a leading run dimension. One run: a view of the model's own
    tensor, so that the model sees every in-place update."""
    return tensors[0].detach().unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)
