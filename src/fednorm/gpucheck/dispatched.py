"""What the engine's local steps dispatch: every operator that reaches a kernel (PyTorch's
dispatcher below autograd and vmap, as ``TorchDispatchMode`` sees it), with its arguments that
are not tensors.

Why: a local step that a CUDA graph can capture and replay (docs/speed.md, the local step's graph)
reads nothing back to the host, makes no tensor from a Python number, and runs the same
operators with the same arguments at every step. These three facts can be checked on the CPU,
where no graph is captured: :func:`local_steps` records each local step of a trainer
(fednorm.fl.round: ``_local_step`` and ``_fused_step``) and tests/fl/test_dispatched.py asks
them of every method. The counts are also what benchmarks/engine_launches.py reports as the
operators reaching a kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that copy a device value to the host (a host synchronization on CUDA): a scalar
# read (.item(), bool(), int()), and nonzero, whose output size is known on the host alone.
HOST_SYNCS = frozenset({"aten._local_scalar_dense.default", "aten.item.default",
                        "aten.is_nonzero.default", "aten.nonzero.default",
                        "aten.masked_select.default", "aten.unique_dim.default",
                        "aten._unique2.default", "host.tolist", "host.cpu", "host.numpy"})
# Operators that make a tensor from Python data (torch.as_tensor / torch.tensor of a number):
# on CUDA a copy from the host, which a CUDA graph would replay with the captured value.
# (``aten.scalar_tensor`` is not one: it fills a tensor on its device with a value that is an
# argument, which the same-arguments-every-step check sees change.)
FROM_PYTHON = frozenset({"aten.lift_fresh.default", "aten.lift_fresh_copy.default"})


class Dispatched(TorchDispatchMode):
    """Records ``(operator, non-tensor arguments)`` of every operator dispatched inside it,
    and host reads that bypass the dispatcher on the CPU (``Tensor.tolist``, ``.cpu()``,
    ``.numpy()``, recorded as ``host.<name>``)."""

    def __init__(self, kind: str = "") -> None:
        super().__init__()
        self.kind = kind  # what was recorded (the engine's method name, for a local step)
        self.ops: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func), _constants((args, kwargs or {}))))
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def watching_host_reads(self) -> Iterator[None]:
        originals = {name: getattr(Tensor, name) for name in ("tolist", "cpu", "numpy")}

        def wrap(name: str, method: Any) -> Any:
            def read(tensor: Tensor, *args: Any, **kwargs: Any) -> Any:
                self.ops.append((f"host.{name}", ()))
                return method(tensor, *args, **kwargs)
            return read

        try:
            for name, method in originals.items():
                setattr(Tensor, name, wrap(name, method))
            with self:
                yield
        finally:
            for name, method in originals.items():
                setattr(Tensor, name, method)

    def names(self) -> list[str]:
        return [name for name, _ in self.ops]

    def syncs(self) -> list[str]:
        return [name for name in self.names() if name in HOST_SYNCS]

    def from_python(self) -> list[str]:
        return [name for name in self.names() if name in FROM_PYTHON]


def _constants(tree: Any) -> tuple:
    """The arguments that are not tensors (Python numbers, shapes, dtypes), in order."""
    leaves = torch.utils._pytree.tree_leaves(tree)
    return tuple(leaf for leaf in leaves if not isinstance(leaf, Tensor))


@contextlib.contextmanager
def local_steps(trainer: Any) -> Iterator[list[Dispatched]]:
    """Within the block, each local step of ``trainer`` (its ``_local_step`` or
    ``_fused_step``, a step of every client of every run) appends its record to the list."""
    steps: list[Dispatched] = []

    def recorded(name: str, method: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            mode = Dispatched(name)
            with mode.watching_host_reads():
                out = method(*args, **kwargs)
            steps.append(mode)
            return out
        return step

    names = [name for name in ("_local_step", "_fused_step") if hasattr(trainer, name)]
    for name in names:
        setattr(trainer, name, recorded(name, getattr(trainer, name)))
    try:
        yield steps
    finally:
        for name in names:
            delattr(trainer, name)  # the class's method again
