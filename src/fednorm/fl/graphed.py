"""A local step captured once as a CUDA graph and replayed (``execution.cuda_graph``).

A local step of the engine (fednorm.fl.round: ``_local_step``, ``_fused_step``) reads nothing
back to the host, makes no tensor from a Python number, reads and writes the same static
buffers at every step of a bundle, and dispatches the same operators each time
(tests/fl/test_dispatched.py). So on CUDA it can be recorded once as a ``torch.cuda.CUDAGraph``
and replayed: one launch of the whole step instead of one launch per operator (the PyTorch
docs' "whole-network capture"; docs/speed.md, a CUDA graph of the local step).

:class:`Graphed` wraps such a step, a function of no arguments (what it reads and writes are
tensors it closes over, the same ones at every call of a key), by the key that decides its
operators and tensors (the step's kind, the round's rule and trained parameters, the buffers'
addresses). Per key, on CUDA when requested (``auto``):

1. the first call runs the step eagerly on a side stream (a real step, and the warm-up that
   capture needs: cuDNN's and cuBLAS's lazy set-up happens outside the capture);
2. the second call captures it (capture records the kernels without running them) into a
   memory pool shared by the wrapper's graphs, then replays it once: that step's result;
3. every later call replays the graph and returns the same output tensors, overwritten.

On the CPU, or with ``off``, every call runs the step eagerly: the same function, so the
two paths compute the same numbers (tests/fl/test_graphed.py: bit for bit on CUDA; the eager
path through the wrapper against the engine without it on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

MODES = ("auto", "off")  # execution.cuda_graph: auto captures on CUDA; off never does
T = TypeVar("T")


class Graphed:
    """Runs a step per key eagerly, or on CUDA (``mode`` ``auto``) as a graph captured at the
    key's second call and replayed from then on (see the module's text)."""

    def __init__(self, mode: str = "off", device: torch.device | str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"execution.cuda_graph: {mode!r}; allowed: {', '.join(MODES)}")
        device = torch.device("cpu" if device is None else device)
        self.mode = mode
        self.enabled = mode == "auto" and device.type == "cuda"
        self._graphs: dict[Hashable, Any] = {}  # key -> "warm", or (graph, its outputs)
        self._pool: Any = None  # one memory pool for all of this wrapper's graphs

    def __call__(self, key: Hashable, step: Callable[[], T]) -> T:
        """``step()``, eagerly or through the key's graph. A graph's outputs are the same
        tensors at every replay: use them before the next call of the key."""
        if not self.enabled:
            return step()
        held = self._graphs.get(key)
        if held is None:  # warm-up: a real step, eagerly, on a side stream
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = step()
            torch.cuda.current_stream().wait_stream(side)
            self._graphs[key] = "warm"
            return out
        if held == "warm":
            graph = torch.cuda.CUDAGraph()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self._pool):
                out = step()
            held = self._graphs[key] = (graph, out)
        graph, out = held
        graph.replay()
        return out

    @property
    def captured(self) -> int:
        """Graphs captured so far (one per key past its warm-up)."""
        return sum(1 for held in self._graphs.values() if held != "warm")

    def reset(self) -> None:
        """Forget every graph (the buffers they were captured on are gone: a bundle that drops
        runs, fednorm.fl.trainer ``keep``)."""
        self._graphs.clear()
