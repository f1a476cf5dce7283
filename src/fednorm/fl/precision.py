"""A training job's arithmetic (``execution.precision``, fednorm.config.PRECISIONS).

- ``float32``: IEEE float32 throughout; on CUDA, TF32 off for matmuls and for cuDNN's
  convolutions (PyTorch's own default lets cuDNN convolve in TF32);
- ``tf32``: on CUDA, matmuls and convolutions in TF32 (inputs rounded to a 10-bit mantissa,
  products summed in float32); the rest float32. On the CPU the same as float32;
- ``bf16``: each gradient step (forward and backward, fednorm.fl.trainer's ``gradient_step``)
  under ``torch.autocast(device_type, dtype=torch.bfloat16)``: convolutions and matmuls in
  bfloat16, the loss (log-softmax, NLL) in float32 by autocast's own lists; TF32 off. What
  outlives a step stays float32: the parameters and their gradients (float32 leaves), the
  momenta and the optimizer's arithmetic, the BN layers (fednorm.norms.layer normalizes in its
  statistics' dtype, as cuDNN's BN does under autocast), hence the clients' reported
  statistics, the server's aggregation of them and the running statistics; evaluation runs in
  float32.

The TF32 flags are process-wide: :func:`job_math` sets them for a job's training and restores
them after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from fednorm.config import PRECISIONS

AUTOCAST = {"bf16": torch.bfloat16}  # precision -> the gradient step's autocast dtype


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}; allowed: one of {list(PRECISIONS)}")
    return precision


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype the gradient steps autocast to under ``precision``; None: no autocast."""
    return AUTOCAST.get(check_precision(precision))


def autocast_step(step: Callable, device_type: str, dtype: torch.dtype) -> Callable:
    """``step`` (a gradient step: forward and backward) run under autocast to ``dtype``."""
    def autocast(*args: Any) -> Any:
        with torch.autocast(device_type, dtype=dtype):
            return step(*args)

    return autocast


@contextmanager
def job_math(precision: str) -> Iterator[dict[str, Any]]:
    """Within the block, CUDA's TF32 flags as ``precision`` asks (on for tf32, off otherwise),
    restored after; yields what run.json records: the precision, the flags and the autocast
    dtype of the gradient steps."""
    use_tf32 = check_precision(precision) == "tf32"
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = matmul.allow_tf32, cudnn.allow_tf32
    matmul.allow_tf32 = cudnn.allow_tf32 = use_tf32
    dtype = autocast_dtype(precision)
    try:
        yield {"precision": precision, "matmul_tf32": use_tf32, "cudnn_tf32": use_tf32,
               "autocast": None if dtype is None else str(dtype).removeprefix("torch.")}
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before
