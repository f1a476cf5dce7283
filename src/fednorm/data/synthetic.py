"""An offline image dataset whose classes differ only in their mean colour.

Why: with one class per client (γ = 0), a client's per-channel batch mean *is* its class colour,
so per-client BatchNorm statistics subtract exactly the information that separates the classes.
This reproduces the FBN paper's failure mode of naive BatchNorm cheaply on a CPU, without
CIFAR-10.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from fednorm.data.arrays import Arrays

# Offset for the test set's generator: the test images come from their own stream, so they do not
# change when n_train does.
_TEST_SEED_OFFSET = 1_000_003


def fibonacci_sphere(n_points: int) -> Tensor:
    """``n_points`` nearly evenly spread unit vectors in R^3 (float32, ``(n_points, 3)``).

    Point i has height ``z_i = 1 - 2(i + 1/2)/n``, radius ``r_i = sqrt(1 - z_i^2)`` and azimuth
    ``θ_i = i·π(3 - sqrt 5)`` (the golden angle): ``u_i = (r_i cos θ_i, r_i sin θ_i, z_i)``.
    """
    i = torch.arange(n_points, dtype=torch.float64)
    z = 1.0 - 2.0 * (i + 0.5) / n_points
    radius = torch.sqrt(1.0 - z**2)
    theta = i * math.pi * (3.0 - math.sqrt(5.0))
    return torch.stack([radius * torch.cos(theta), radius * torch.sin(theta), z], dim=1).float()


def _draw(
    colours: Tensor, per_class: int, image_size: int, noise: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``per_class`` images of every class in shuffled order: ``x = μ_y + noise·ε``, ε ~ N(0, I)."""
    n_classes = len(colours)
    labels = torch.arange(n_classes).repeat_interleave(per_class)
    labels = labels[torch.randperm(len(labels), generator=generator)]
    shape = (len(labels), 3, image_size, image_size)
    eps = torch.randn(shape, generator=generator)
    return colours[labels][:, :, None, None] + noise * eps, labels


def colour_classes(
    n_train: int,
    n_test: int,
    image_size: int,
    seed: int,
    n_classes: int = 10,
    separation: float = 1.0,
    noise: float = 1.0,
) -> Arrays:
    """Images ``x = μ_c + ε`` (μ_c broadcast over H×W, ε i.i.d. N(0, noise²) per pixel/channel).

    Class colours are ``μ_c = separation · u_c`` with ``u_c`` the Fibonacci-sphere points of
    :func:`fibonacci_sphere`, fixed independently of ``seed``. Labels are balanced: each split
    holds ``n // n_classes`` images per class (``n`` rounded down to a multiple of n_classes),
    shuffled. The train set uses a generator seeded with ``seed``, the test set one seeded with
    ``seed + 1_000_003``, so the test set does not depend on ``n_train``.
    """
    if min(n_train, n_test) < n_classes:
        raise ValueError(f"n_train={n_train} and n_test={n_test} must each be >= "
                         f"n_classes={n_classes} (at least one image per class)")
    colours = separation * fibonacci_sphere(n_classes)
    train_x, train_y = _draw(colours, n_train // n_classes, image_size, noise,
                             torch.Generator().manual_seed(seed))
    test_x, test_y = _draw(colours, n_test // n_classes, image_size, noise,
                           torch.Generator().manual_seed(seed + _TEST_SEED_OFFSET))
    return Arrays(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                  n_classes=n_classes, name="synthetic")
