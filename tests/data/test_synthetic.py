"""The colour-classes dataset: shape, balance, class means, determinism."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from fednorm.data.synthetic import colour_classes, fibonacci_sphere


def test_shapes_dtypes_and_balance():
    data = colour_classes(n_train=205, n_test=50, image_size=8, seed=0)
    # 205 rounds down to 20 per class.
    assert data.train_x.shape == (200, 3, 8, 8) and data.train_x.dtype == torch.float32
    assert data.test_x.shape == (50, 3, 8, 8)
    assert data.train_y.dtype == torch.int64
    assert torch.bincount(data.train_y).tolist() == [20] * 10
    assert torch.bincount(data.test_y).tolist() == [5] * 10
    assert data.n_classes == 10 and data.name == "synthetic"


def test_labels_are_shuffled():
    labels = colour_classes(n_train=200, n_test=10, image_size=4, seed=0).train_y
    assert not torch.equal(labels, torch.sort(labels).values)


def test_sphere_points_are_unit_and_spread():
    points = fibonacci_sphere(10)
    torch.testing.assert_close(points.norm(dim=1), torch.ones(10))
    distances = torch.cdist(points, points) + 10 * torch.eye(10)
    # Ten points on the unit sphere; an even spread keeps every pair well apart.
    assert distances.min() > 0.9


@pytest.mark.parametrize(("separation", "noise"), [(1.0, 1.0), (3.0, 0.5)])
def test_classes_differ_only_in_mean_colour(separation: float, noise: float):
    size, per_class = 6, 40
    data = colour_classes(10 * per_class, 10, size, seed=1, separation=separation, noise=noise)
    colours = separation * fibonacci_sphere(10)
    # A class mean averages per_class * size^2 independent N(0, noise^2) values per channel.
    tolerance = 5 * noise / math.sqrt(per_class * size * size)
    for c in range(10):
        images = data.train_x[data.train_y == c]
        mean = images.mean(dim=(0, 2, 3))
        assert (mean - colours[c]).abs().max() < tolerance
        residual_std = (images - colours[c][:, None, None]).std(dim=(0, 2, 3))
        assert (residual_std / noise - 1).abs().max() < 0.1


def test_same_seed_same_data_other_seed_other_data():
    first = colour_classes(100, 20, 4, seed=3)
    again = colour_classes(100, 20, 4, seed=3)
    other = colour_classes(100, 20, 4, seed=4)
    assert torch.equal(first.train_x, again.train_x) and torch.equal(first.test_y, again.test_y)
    assert not torch.equal(first.train_x, other.train_x)


def test_test_set_does_not_depend_on_n_train():
    small = colour_classes(100, 30, 4, seed=3)
    large = colour_classes(300, 30, 4, seed=3)
    assert torch.equal(small.test_x, large.test_x)
    assert torch.equal(small.test_y, large.test_y)


def test_colours_do_not_depend_on_seed():
    a = colour_classes(1000, 10, 4, seed=0, noise=0.0)
    b = colour_classes(1000, 10, 4, seed=1, noise=0.0)
    for c in range(10):
        assert torch.equal(a.train_x[a.train_y == c][0], b.train_x[b.train_y == c][0])


def test_too_few_samples_is_rejected():
    with pytest.raises(ValueError, match="n_train=5"):
        colour_classes(5, 100, 4, seed=0)


def test_arrays_rejects_bad_shapes():
    data = colour_classes(20, 10, 4, seed=0)
    with pytest.raises(ValueError, match="train_x must be 4-D"):
        replace(data, train_x=data.train_x.flatten(1))
    with pytest.raises(ValueError, match="test_y must be 1-D with one label per image"):
        replace(data, test_y=data.test_y[:-1])


def test_arrays_to_moves_every_tensor():
    data = colour_classes(20, 10, 4, seed=0).to("meta")
    tensors = (data.train_x, data.train_y, data.test_x, data.test_y)
    assert all(t.device.type == "meta" for t in tensors)
    assert data.name == "synthetic" and data.n_classes == 10
