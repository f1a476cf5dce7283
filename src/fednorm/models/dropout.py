"""Dropout whose masks come from a key (fednorm.rng), not from the global random state.

A run trained alone and the same run trained in a bundle (vmap over runs) must drop the same
units; ``nn.Dropout`` draws from the global generator, which a bundle shares between its runs.
Here the mask of a forward pass is ``uniform(fold(key, salt), x.shape) >= p``, with ``key`` set
by the engine around the forward (``fednorm.rng.dropout_key``; a 0-dim key per run, or per
client inside vmap) and ``salt`` telling the model's dropout layers apart. Kept units are
scaled by 1/(1 - p), as ``nn.Dropout`` does; in eval mode the layer is the identity.
"""

from __future__ import annotations

from torch import Tensor, nn

from fednorm import rng


class KeyedDropout(nn.Module):
    def __init__(self, p: float, salt: int) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p must be in [0, 1), got p={p}")
        self.p, self.salt = p, salt

    def extra_repr(self) -> str:
        return f"p={self.p}, salt={self.salt}"

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        key = rng.current_dropout_key()
        if key is None:
            raise RuntimeError("KeyedDropout in training mode needs a key: train through "
                               "fednorm.fl, or wrap the forward pass in fednorm.rng.dropout_key")
        keep = rng.uniform(rng.fold(key, self.salt), x.shape) >= self.p
        return x * keep / (1.0 - self.p)
