"""Counter-based random numbers: every draw is a pure function of (key, counter).

A run's randomness (which examples each client samples, its dropout masks, its augmentation)
must be the same whether it trains alone or in a bundle of runs (fednorm.fl.bundle), on CPU or
on CUDA. Stateful generators cannot give that cheaply: one ``torch.Generator`` per run means a
Python loop over runs at every step, and the streams of CPU and CUDA generators differ. So the
randomness here is a hash of integers, in the spirit of counter-based generators (Salmon et al.
2011, "Parallel random numbers: as easy as 1, 2, 3"; JAX's keys):

- a key is an int64 tensor holding a 32-bit value; :func:`run_key` makes one from a seed and
  :func:`fold` derives new keys from a key and integers (a stream, a step, a client), so the
  draws of different streams, steps and clients are unrelated;
- :func:`uniform` maps a key of any shape, e.g. ``(R,)`` for R runs, or a 0-dim key inside
  ``torch.func.vmap``, to ``key.shape + shape`` floats in [0, 1), hashing each element's
  position with the key. Only elementwise integer arithmetic: the same bits on every device,
  and ``vmap`` needs no special randomness mode.

The hash is a 32-bit integer finalizer (two rounds of xorshift-multiply with 0x45D9F3B, a
multiplier below 2**31 so every product fits in int64) of ``key ^ position``; keys are
themselves hashed values, so the streams of two keys are unrelated. It is a simulation-quality
hash, not a cryptographic one.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
from torch import Tensor

from fednorm.scoped import Scoped

_MASK = 0xFFFFFFFF
_MULT = 0x45D9F3B
_GOLDEN = 0x9E3779B9  # 2**32 / golden ratio: offsets small salts before hashing

# Streams of one run's randomness (fold a run's key with one of these first).
SAMPLE, PROBE, DROPOUT, AUGMENT, PARTICIPATE, STATISTICS = 1, 2, 3, 4, 5, 6


def mix(x: Tensor) -> Tensor:
    """A bijection of 32-bit values (held in int64) that scrambles every bit into every other."""
    x = (((x >> 16) ^ x) * _MULT) & _MASK
    x = (((x >> 16) ^ x) * _MULT) & _MASK
    return (x >> 16) ^ x


def run_key(seed: int | Tensor, device: torch.device | str | None = None) -> Tensor:
    """The key of a run (or a tensor of runs) from its seed."""
    seed = torch.as_tensor(seed, dtype=torch.int64, device=device)
    return mix((seed & _MASK) ^ _GOLDEN)


def _mix_int(x: int) -> int:
    """:func:`mix` of one Python integer, in Python: the same bits (a 32-bit value times a
    multiplier below 2**31 never overflows int64, so the tensor version never wraps either)."""
    x = (((x >> 16) ^ x) * _MULT) & _MASK
    x = (((x >> 16) ^ x) * _MULT) & _MASK
    return (x >> 16) ^ x


def fold(key: Tensor, *data: int | Tensor) -> Tensor:
    """A new key from ``key`` and integers (broadcast against it): key <- mix(key ^ mix(d)).

    A Python integer (a stream, a layer's salt) is hashed in Python and enters the key's
    arithmetic as a scalar: no tensor is made from it, so no host-to-device copy, which a
    CUDA graph could not hold. Whatever changes during training (a step) comes as a tensor
    on the key's device (the engine's step counter) and is hashed there."""
    for d in data:
        if isinstance(d, Tensor):
            key = mix(key ^ mix((d.to(key.device) + _GOLDEN) & _MASK))
        else:
            key = mix(key ^ _mix_int((int(d) + _GOLDEN) & _MASK))
    return key


def uniform(key: Tensor, shape: tuple[int, ...] | torch.Size) -> Tensor:
    """Floats in [0, 1), shape ``key.shape + shape``: 24 bits of hash(key, position) each."""
    shape = tuple(shape)
    count = 1
    for s in shape:
        count *= s
    position = torch.arange(count, device=key.device, dtype=torch.int64).reshape(shape)
    bits = mix(position ^ key.reshape(*key.shape, *([1] * len(shape))))
    return (bits >> 8).to(torch.float32) * (1.0 / (1 << 24))


# The key a forward pass draws its dropout masks from (set by the engine around each forward).
_DROPOUT_KEY: Scoped[Tensor | None] = Scoped(None)


def dropout_key(key: Tensor) -> AbstractContextManager[Tensor | None]:
    """Within the block, :class:`fednorm.models.dropout.KeyedDropout` layers draw from ``key``."""
    return _DROPOUT_KEY.bound(key)


def current_dropout_key() -> Tensor | None:
    return _DROPOUT_KEY.get()
