"""Batched crop-and-flip against a brute-force reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fednorm import rng
from fednorm.data.augment import random_crop_flip


def draws(batch: int, seed: int) -> torch.Tensor:
    """The (batch, 3) uniforms a run's key gives (fednorm.rng), as the samplers draw them."""
    return rng.uniform(rng.run_key(seed), (batch, 3))


def images(batch: int, size: int = 5, seed: int = 0) -> torch.Tensor:
    # Distinct values everywhere, so an output can only match one crop/flip of its own image.
    x = torch.randperm(batch * 3 * size * size, generator=torch.Generator().manual_seed(seed))
    return x.float().view(batch, 3, size, size) + 1


def candidates(image: torch.Tensor, padding: int) -> list[torch.Tensor]:
    """Every crop of the zero-padded image, flipped or not, built with explicit loops."""
    _, height, width = image.shape
    padded = F.pad(image, (padding, padding, padding, padding))
    found = []
    for top in range(2 * padding + 1):
        for left in range(2 * padding + 1):
            crop = torch.zeros_like(image)
            for h in range(height):
                for w in range(width):
                    crop[:, h, w] = padded[:, top + h, left + w]
            found += [crop, crop.flip(-1)]
    return found


def test_padding_zero_only_flips():
    x = images(64)
    out = random_crop_flip(x, 0, draws(len(x), 0))
    flipped = [torch.equal(o, i.flip(-1)) for o, i in zip(out, x, strict=True)]
    kept = [torch.equal(o, i) for o, i in zip(out, x, strict=True)]
    assert all(f != k for f, k in zip(flipped, kept, strict=True))
    # P(at most 16 of 64 fair coins land on one side) is below 1e-4.
    assert 16 < sum(flipped) < 48


@pytest.mark.parametrize("padding", [1, 2])
def test_each_output_is_a_crop_of_the_padded_input(padding: int):
    x = images(12)
    out = random_crop_flip(x, padding, draws(len(x), 1))
    matches = [sum(torch.equal(o, c) for c in candidates(i, padding))
               for o, i in zip(out, x, strict=True)]
    assert matches == [1] * len(x)
    # With padding > 0 some crops must shift the image (12 images, 25 or 9 offsets each).
    assert any(not torch.equal(o, i) and not torch.equal(o, i.flip(-1))
               for o, i in zip(out, x, strict=True))


def test_shape_and_dtype_are_kept():
    x = torch.randint(0, 256, (4, 3, 7, 9), dtype=torch.uint8)
    out = random_crop_flip(x, 3, draws(len(x), 0))
    assert out.shape == x.shape and out.dtype == torch.uint8


def test_same_key_same_output():
    x = images(16)
    first = random_crop_flip(x, 2, draws(len(x), 5))
    again = random_crop_flip(x, 2, draws(len(x), 5))
    other = random_crop_flip(x, 2, draws(len(x), 6))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_negative_padding_is_rejected():
    with pytest.raises(ValueError, match="padding=-1"):
        random_crop_flip(images(1), -1, draws(1, 0))


def test_offsets_cover_every_crop_and_flip_half_the_images():
    """The uniforms map onto {0..2p}² offsets and the flip bit without bias: over 4,000 images
    every one of the 25 offsets (p = 2) occurs, and about half are flipped."""
    x_marked = torch.arange(4000, dtype=torch.float32).view(-1, 1, 1, 1) + 1
    u = draws(4000, 3)
    out = random_crop_flip(x_marked, 2, u)
    kept = (out.view(-1) != 0).sum().item()  # the 1x1 image survives only at offset (2, 2)
    assert 4000 / 25 * 0.7 < kept < 4000 / 25 * 1.3
    offsets = (u[:, :2] * 5).long()
    assert len({tuple(o) for o in offsets.tolist()}) == 25
    assert 1800 < int((u[:, 2] < 0.5).sum()) < 2200
