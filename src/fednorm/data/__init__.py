"""Datasets (CIFAR-10 through torchvision; an offline synthetic set), partitions, augmentation."""

from __future__ import annotations

from pathlib import Path

from fednorm.config import RunConfig
from fednorm.data.arrays import Arrays

__all__ = ["Arrays", "load_dataset"]


def load_dataset(cfg: RunConfig, data_dir: str | Path, download: bool = False) -> Arrays:
    """The run's dataset as normalized float tensors (on the CPU).

    CIFAR-10 is read from ``data_dir`` (the pipeline's data rule downloads it there once);
    ``download=True`` lets torchvision fetch it when absent. The synthetic set is generated.
    """
    if cfg.dataset == "cifar10":
        from fednorm.data.cifar import load_cifar10

        return load_cifar10(data_dir, download=download)
    from fednorm.data.synthetic import colour_classes

    assert cfg.n_train is not None and cfg.n_test is not None  # enforced by the config rules
    # The dataset's seed is fixed (not the run's): every run of a grid sees the same images.
    return colour_classes(
        cfg.n_train, cfg.n_test, cfg.image_size, seed=0, separation=cfg.synthetic_separation
    )
