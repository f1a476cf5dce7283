"""Batched on-device data augmentation (no per-sample Python loop)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop_flip(
    x: Tensor, padding: int, generator: torch.Generator | None = None
) -> Tensor:
    """Random ``H×W`` crop of the zero-padded image, then a horizontal flip with probability 1/2.

    For image b with offsets ``(i_b, j_b)`` drawn uniformly from ``{0..2p}²`` and flip bit f_b:
    ``out[b, c, h, w] = pad(x)[b, c, i_b + h, j_b + w']`` with ``w' = W-1-w`` if f_b else ``w``.
    ``padding = 0`` only flips. Random numbers come from ``generator`` (on ``x``'s device; the
    device's default generator when None).
    """
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got padding={padding}")
    batch, channels, height, width = x.shape
    device = x.device
    padded = F.pad(x, (padding, padding, padding, padding))
    row_offset = torch.randint(0, 2 * padding + 1, (batch, 1), generator=generator, device=device)
    col_offset = torch.randint(0, 2 * padding + 1, (batch, 1), generator=generator, device=device)
    flip = torch.randint(0, 2, (batch, 1), generator=generator, device=device).bool()
    rows = row_offset + torch.arange(height, device=device)
    cols = torch.where(flip, torch.arange(width - 1, -1, -1, device=device),
                       torch.arange(width, device=device)) + col_offset
    # Broadcast (B,1,1,1), (1,C,1,1), (B,1,H,1), (B,1,1,W) into one (B,C,H,W) gather.
    return padded[
        torch.arange(batch, device=device)[:, None, None, None],
        torch.arange(channels, device=device)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
