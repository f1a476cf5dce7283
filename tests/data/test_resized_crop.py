"""PyTorch's ImageNet augmentation, batched (fednorm.data.augment.random_resized_crop_flip):
its boxes against torchvision's ranges, its resampling against F.interpolate of the crop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fednorm import rng
from fednorm.data.augment import (
    augment_for,
    random_crop_flip,
    random_resized_crop_flip,
    resized_crop_boxes,
)


def images(batch: int, size: int = 16) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0),
                       dtype=torch.float64)


def u_of(batch: int, area: float, ratio_u: float, top_u: float, left_u: float, flip: bool):
    row = [(area - 0.08) / 0.92, ratio_u, top_u, left_u, 0.0 if flip else 0.9]
    return torch.tensor([row] * batch, dtype=torch.float64)


@pytest.mark.parametrize("flip", [False, True])
def test_a_box_of_the_whole_image_is_the_identity_or_its_mirror(flip):
    x = images(3)
    out = random_resized_crop_flip(x, u_of(3, area=1.0, ratio_u=0.5, top_u=0, left_u=0,
                                          flip=flip))
    torch.testing.assert_close(out, x.flip(-1) if flip else x)


def test_a_box_of_a_quarter_of_the_area_is_that_crop_enlarged_twice_bilinearly():
    # area 1/4 at ratio 1: an 8x8 box of the 16x16 image; top = floor(0.5 * 9) = 4, left = 2
    x = images(2)
    out = random_resized_crop_flip(x, u_of(2, area=0.25, ratio_u=0.5, top_u=0.5, left_u=0.25,
                                          flip=False))
    crop = x[:, :, 4:12, 2:10]
    expected = F.interpolate(crop, scale_factor=2, mode="bilinear", align_corners=False)
    # equal away from the box's edge (there we read the next pixel, interpolate repeats the edge)
    torch.testing.assert_close(out[:, :, 1:-1, 1:-1], expected[:, :, 1:-1, 1:-1])
    assert not torch.allclose(out[:, :, 0], expected[:, :, 0])  # the documented difference


def test_boxes_fit_and_follow_torchvisions_area_and_ratio_ranges():
    u = rng.uniform(rng.run_key(3), (4000, 4))
    top, left, h, w = resized_crop_boxes(64, 48, u).unbind(1)
    assert bool((top >= 0).all() and (left >= 0).all())
    assert bool((top + h <= 64).all() and (left + w <= 48).all())
    area = (h * w).double() / (64 * 48)
    assert area.min() > 0.07 and area.max() <= 1.0
    free = (h < 64) & (w < 48)  # boxes that did not need clamping
    ratio = (w / h).double()[free]
    # rounding to pixels moves a ratio by at most a pixel's worth on each side
    assert ratio.min() > 0.75 * 0.8 and ratio.max() < 4 / 3 * 1.25
    assert abs(ratio.log().mean().item()) < 0.05  # log-uniform around ratio 1


def test_the_augments_a_config_names():
    x, u = images(2, 8), rng.uniform(rng.run_key(0), (2, 5)).double()
    assert augment_for("none", 4) is None
    crop = augment_for("crop_flip", 2)
    assert crop.draws == 3
    torch.testing.assert_close(crop.fn(x, u[:, :3]), random_crop_flip(x, 2, u[:, :3]))
    resized = augment_for("resized_crop_flip", 4)
    assert resized.draws == 5
    torch.testing.assert_close(resized.fn(x, u), random_resized_crop_flip(x, u))
    with pytest.raises(ValueError, match="u must have shape"):
        random_resized_crop_flip(x, u[:, :3])
