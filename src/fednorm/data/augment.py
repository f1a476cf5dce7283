"""Batched on-device data augmentation (no per-sample Python loop)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

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


# PyTorch's ImageNet example (torchvision.transforms.RandomResizedCrop's defaults): the crop's
# area is a fraction in SCALE of the image's, its aspect ratio (width / height) log-uniform in
# RATIO.
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)


def resized_crop_boxes(height: int, width: int, u: Tensor) -> Tensor:
    """(B, 4) integer boxes ``(top, left, h, w)`` of the random resized crop, from (B, 4)
    uniforms: area fraction ``s = 0.08 + u0·0.92``, ratio ``r = exp(log 3/4 + u1·log 16/9)``,
    ``w = round(√(s·H·W·r))``, ``h = round(√(s·H·W/r))``, each clamped into [1, side];
    ``top = ⌊u2·(H-h+1)⌋``, ``left = ⌊u3·(W-w+1)⌋``. torchvision instead redraws (s, r) up to 10
    times while the box does not fit and then falls back to a centre crop; clamping keeps one
    draw per image (a box of the wrong shape only where torchvision would have redrawn)."""
    area = height * width * (SCALE[0] + u[:, 0] * (SCALE[1] - SCALE[0]))
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    ratio = torch.exp(log_lo + u[:, 1] * (log_hi - log_lo))
    w = torch.sqrt(area * ratio).round().long().clamp(1, width)
    h = torch.sqrt(area / ratio).round().long().clamp(1, height)
    top = (u[:, 2] * (height - h + 1)).long().clamp_max(height - h)
    left = (u[:, 3] * (width - w + 1)).long().clamp_max(width - w)
    return torch.stack([top, left, h, w], dim=1)


def random_resized_crop_flip(x: Tensor, u: Tensor) -> Tensor:
    """PyTorch's ImageNet training augmentation, batched: a random box
    (:func:`resized_crop_boxes`, from ``u[:, :4]``) resized back to the image's ``H×W`` by
    bilinear interpolation, then a horizontal flip when ``u[:, 4] < 1/2``.

    Output pixel (y, x) samples the input at ``(top + (y+½)·h/H - ½, left + (x+½)·w/W - ½)``
    (pixel centres, as ``F.interpolate(mode="bilinear", align_corners=False)``); a box of the
    whole image is the identity. Since the output has the image's own size the box is only ever
    enlarged, so no antialiasing is needed (torchvision's PIL path differs only within half a
    pixel of the box's edges, where it repeats the edge pixel and we read the next one).
    ``u``: (B, 5) uniforms in [0, 1) from the run's key (fednorm.rng).
    """
    batch, _, height, width = x.shape
    if u.shape != (batch, 5):
        raise ValueError(f"u must have shape ({batch}, 5), got {tuple(u.shape)}")
    box = resized_crop_boxes(height, width, u).to(x.dtype)
    top, left, h, w = box.unbind(1)
    ys = torch.arange(height, device=x.device, dtype=x.dtype) + 0.5
    xs = torch.arange(width, device=x.device, dtype=x.dtype) + 0.5
    xs = torch.where(u[:, 4:] < 0.5, xs.flip(0), xs)  # (B, W): flipped images read right to left
    # grid_sample's coordinates with align_corners=False: -1 and 1 are the image's outer edges
    gy = (top[:, None] + ys * h[:, None] / height) * 2 / height - 1  # (B, H)
    gx = (left[:, None] + xs * w[:, None] / width) * 2 / width - 1  # (B, W)
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


@dataclass(frozen=True)
class Augment:
    """A batched augmentation: ``fn(x (B, C, H, W), u (B, draws))`` -> an image batch of the
    same shape, ``u`` the run's uniforms of the step (fednorm.fl.batches)."""

    fn: Callable[[Tensor, Tensor], Tensor]
    draws: int


def augment_for(kind: str, crop_padding: int) -> Augment | None:
    """The augmentation a run config names (its ``augment`` and ``crop_padding``); None for
    'none'. crop_flip: CIFAR's padded crop and flip; resized_crop_flip: ImageNet's."""
    if kind == "crop_flip":
        return Augment(lambda x, u: random_crop_flip(x, crop_padding, u), 3)
    if kind == "resized_crop_flip":
        return Augment(random_resized_crop_flip, 5)
    if kind != "none":
        raise ValueError(f"unknown augment={kind!r}; allowed: none, crop_flip, resized_crop_flip")
    return None
