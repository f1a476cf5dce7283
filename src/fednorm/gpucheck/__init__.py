"""``make gpu-check``: the GPU proven by one prepared command (``python -m fednorm.gpucheck``).

The rooms: ``check`` (the steps of ``make gpu-check`` and its command line, :func:`main`),
``quick`` (``make gpu-quick``: the quick DAG on a GPU and what it rests on), ``throughput``
(images/s of the engine and of a plain PyTorch loop at each paper's shape), ``steps`` (steps
timed, each failure recorded, the report rewritten after each).
"""

from fednorm.gpucheck.check import main

__all__ = ["main"]
