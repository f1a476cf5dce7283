"""CIFAR-10 through torchvision, with a single-file uint8 cache for fast job start-up."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from fednorm.data.arrays import Arrays, DatasetUnavailable, cache_reading
from fednorm.io import atomic_path

ARCHIVE_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CACHE_NAME = "cifar10_uint8.pt"  # fednorm.data.CACHES

# Per-channel (R, G, B) mean and standard deviation of the 50,000 CIFAR-10 training images,
# pixel values scaled to [0, 1]; the values commonly used for CIFAR-10 normalization.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def _remedy(root: Path) -> str:
    return (
        f"To fix: run `fednorm download-cifar10 --root {root}` on a machine with network access, "
        f"or copy cifar-10-python.tar.gz ({ARCHIVE_URL}) into {root}, then re-run."
    )


def read_cifar10_uint8(
    root: str | Path, download: bool = True
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(train_x, train_y, test_x, test_y)`` read through ``torchvision.datasets.CIFAR10``.

    Images are uint8 ``(N, 3, 32, 32)`` (channels R, G, B), labels int64 ``(N,)``. With
    ``download`` torchvision fetches cifar-10-python.tar.gz into ``root`` (or uses a copy already
    there) and extracts it, checking md5 sums. Raises :class:`DatasetUnavailable` when the data
    is absent and cannot be downloaded.
    """
    from torchvision.datasets import CIFAR10  # imported here to keep `import fednorm` light

    root = Path(root)
    try:
        train = CIFAR10(root, train=True, download=download)
        test = CIFAR10(root, train=False, download=download)
    # URLError is an OSError; torchvision raises RuntimeError for missing or corrupt files.
    except (OSError, RuntimeError) as err:
        if download:
            reason = f"the download failed: {err}"
        else:
            reason = f"no readable copy there and download=False (torchvision: {err})"
        raise DatasetUnavailable(f"CIFAR-10 is not available in {root}: {reason}. "
                                 f"{_remedy(root)}") from err

    def images(dataset: CIFAR10) -> Tensor:
        # torchvision keeps images as (N, H, W, C); the models want (N, C, H, W).
        return torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()

    def targets(dataset: CIFAR10) -> Tensor:
        return torch.tensor(dataset.targets, dtype=torch.int64)

    return images(train), targets(train), images(test), targets(test)


def cache_cifar10(root: str | Path, download: bool = True) -> Path:
    """Read CIFAR-10 via :func:`read_cifar10_uint8` and save ``root/cifar10_uint8.pt`` atomically.

    The file is a ``torch.save`` of ``{"train_x", "train_y", "test_x", "test_y"}`` (uint8 images,
    int64 labels). Returns its path.
    """
    train_x, train_y, test_x, test_y = read_cifar10_uint8(root, download)
    target = Path(root) / CACHE_NAME
    with atomic_path(target) as tmp:
        torch.save({"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y},
                   tmp)
    return target


def to_float(
    x: Tensor, mean: tuple[float, ...] = CIFAR10_MEAN, std: tuple[float, ...] = CIFAR10_STD
) -> Tensor:
    """Per-channel normalization of uint8 images: ``(x/255 - mean_c) / std_c`` as float32."""
    mean_t = torch.tensor(mean, dtype=torch.float32)[:, None, None]
    std_t = torch.tensor(std, dtype=torch.float32)[:, None, None]
    return (x.float() / 255.0 - mean_t) / std_t


def load_cifar10(root: str | Path, download: bool = True) -> Arrays:
    """CIFAR-10 as normalized float32 :class:`Arrays` (see :func:`to_float`).

    Uses ``root/cifar10_uint8.pt`` when present; otherwise reads through torchvision (downloading
    if allowed) and writes that cache first.
    """
    cache = Path(root) / CACHE_NAME
    if not cache.exists():
        cache_cifar10(root, download)
    with cache_reading(cache):
        tensors = torch.load(cache, weights_only=True)
    return Arrays(
        train_x=to_float(tensors["train_x"]),
        train_y=tensors["train_y"],
        test_x=to_float(tensors["test_x"]),
        test_y=tensors["test_y"],
        n_classes=10,
        name="cifar10",
    )
