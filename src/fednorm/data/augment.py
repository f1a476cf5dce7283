"""Batched on-device data augmentation (no per-sample Python loop)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop_flip(x: Tensor, padding: int, u: Tensor) -> Tensor:
    """Random ``H×W`` crop of the zero-padded image, then a horizontal flip with probability 1/2.

    For image b with offsets ``(i_b, j_b)`` uniform on ``{0..2p}²`` and flip bit f_b:
    ``out[b, c, h, w] = pad(x)[b, c, i_b + h, j_b + w']`` with ``w' = W-1-w`` if f_b else ``w``.
    ``padding = 0`` only flips. The randomness is ``u``, (B, 3) uniforms in [0, 1) (from the
    run's key, fednorm.rng): ``i_b = ⌊u[b,0]·(2p+1)⌋``, ``j_b = ⌊u[b,1]·(2p+1)⌋``,
    ``f_b = u[b,2] < 1/2``.
    """
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got padding={padding}")
    batch, channels, height, width = x.shape
    if u.shape != (batch, 3):
        raise ValueError(f"u must have shape ({batch}, 3), got {tuple(u.shape)}")
    device = x.device
    padded = F.pad(x, (padding, padding, padding, padding))
    offsets = (u[:, :2] * (2 * padding + 1)).long().clamp_max(2 * padding)
    flip = (u[:, 2:] < 0.5)
    rows = offsets[:, :1] + torch.arange(height, device=device)
    cols = torch.where(flip, torch.arange(width - 1, -1, -1, device=device),
                       torch.arange(width, device=device)) + offsets[:, 1:]
    # Broadcast (B,1,1,1), (1,C,1,1), (B,1,H,1), (B,1,1,W) into one (B,C,H,W) gather.
    return padded[
        torch.arange(batch, device=device)[:, None, None, None],
        torch.arange(channels, device=device)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
