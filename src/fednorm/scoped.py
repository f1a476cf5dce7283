"""A value set for the length of a ``with`` block: the engine's way of telling the layers of a
forward pass what they cannot take as arguments (the normalization context, the dropout key).

:class:`contextvars.ContextVar` would do the same, but ``torch.compile`` cannot trace its
``set``: the graph break makes the whole vmapped gradient step run eagerly. A plain stack on
the object can be traced (Dynamo replays the mutation), so the engine's step compiles into one
graph (fednorm.fl.round, ``compile``). Training runs in one thread, which is all this needs.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Scoped(Generic[T]):
    """A value that :meth:`bound` sets for a block (nested blocks stack) and :meth:`get`
    reads: the innermost block's, or ``default`` outside every block."""

    def __init__(self, default: T) -> None:
        self._stack: list[T] = [default]

    def bound(self, value: T) -> _Bound[T]:
        """``with scoped.bound(value) as v:``: ``value`` for the block. torch 2.14's
        torch.compile traces it; torch 2.4.1's does not (nor a ``contextlib`` generator)."""
        return _Bound(self._stack, value)

    def get(self) -> T:
        return self._stack[-1]


class _Bound(Generic[T]):
    def __init__(self, stack: list[T], value: T) -> None:
        self.stack, self.value = stack, value

    def __enter__(self) -> T:
        self.stack.append(self.value)
        return self.value

    def __exit__(self, *exc: Any) -> None:
        self.stack.pop()
