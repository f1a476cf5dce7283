"""A value set for the length of a ``with`` block: the engine's way of telling the layers of a
forward pass what they cannot take as arguments (the normalization context, the dropout key).

:class:`contextvars.ContextVar` would do the same, but ``torch.compile`` cannot trace its
``set``: the graph break makes the whole vmapped gradient step run eagerly. A plain stack on
the object can be traced (Dynamo replays the mutation), so the engine's step compiles into one
graph (fednorm.fl.engine, ``compile``). Training runs in one thread, which is all this needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Scoped(Generic[T]):
    """A value that :meth:`bound` sets for a block (nested blocks stack) and :meth:`get`
    reads: the innermost block's, or ``default`` outside every block."""

    def __init__(self, default: T) -> None:
        self._stack: list[T] = [default]

    @contextlib.contextmanager
    def bound(self, value: T) -> Iterator[T]:
        self._stack.append(value)
        try:
            yield value
        finally:
            self._stack.pop()

    def get(self) -> T:
        return self._stack[-1]
