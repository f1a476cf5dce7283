"""In-memory image classification data: the whole train and test sets as tensors."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor

from fednorm.inputs import DatasetUnavailable, reading  # re-exported: the loaders raise it

__all__ = ["Arrays", "DatasetUnavailable", "cache_reading"]


def cache_reading(cache: Path):
    """Around the read of a dataset's decoded cache file: a damaged one (cut short by a full
    disk, another file under its name) is one line naming it and saying to delete it."""
    return reading(cache, "dataset cache", "to fix: delete it; the next run that needs it "
                   "writes it again from the dataset's files")


@dataclass(frozen=True)
class Arrays:
    """Train/test images ``x`` (float32, ``(N, C, H, W)``) with int64 labels ``y`` (``(N,)``)."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    n_classes: int
    name: str
    # images held out of the training set to choose hyper-parameters on (hold_out); None: none
    val_x: Tensor | None = None
    val_y: Tensor | None = None
    # feature shift (``domains``): the domains' names, and each image's domain (its position
    # in ``domains``, int64), of the training, test and validation images; None: no domains
    domains: tuple[str, ...] = ()
    train_domain: Tensor | None = None
    test_domain: Tensor | None = None
    val_domain: Tensor | None = None

    def __post_init__(self) -> None:
        for split, x, y in (("train", self.train_x, self.train_y),
                            ("test", self.test_x, self.test_y)):
            if x.dim() != 4:
                raise ValueError(f"{self.name}: {split}_x must be 4-D (N, C, H, W), "
                                 f"got shape {tuple(x.shape)}")
            if y.dim() != 1 or len(x) != len(y):
                raise ValueError(f"{self.name}: {split}_y must be 1-D with one label per image "
                                 f"({len(x)}), got shape {tuple(y.shape)}")

    @property
    def dtype(self) -> torch.dtype:
        """The images' floating dtype (the models take it)."""
        return self.train_x.dtype

    @property
    def device(self) -> torch.device:
        return self.train_x.device

    def chunks(self, split: str, size: int) -> Iterator[tuple[Tensor, Tensor]]:
        """The ``split`` ('test' or 'val') images and labels in order, ``size`` at a time (what
        the evaluation reads: fednorm.fl.train.evaluate_chunks)."""
        x, y = {"test": (self.test_x, self.test_y), "val": (self.val_x, self.val_y)}[split]
        if x is None or y is None:
            raise ValueError(f"{self.name}: split {split!r} has no images; allowed: 'test', "
                             f"or 'val' once a validation set is held out")
        return slices(x, y, size)

    def split_train(self, keep: Tensor, val: Tensor) -> Arrays:
        """The training images ``keep`` kept for training, the images ``val`` held out as the
        validation set (indices, on the data's device; :func:`hold_out`)."""
        if self.val_x is not None:
            raise ValueError(f"{self.name}: a validation set is already held out")
        domain = self.train_domain
        return dataclasses.replace(self, train_x=self.train_x[keep], train_y=self.train_y[keep],
                                   val_x=self.train_x[val], val_y=self.train_y[val],
                                   train_domain=None if domain is None else domain[keep],
                                   val_domain=None if domain is None else domain[val])

    def to(self, device: torch.device | str) -> Arrays:
        """The same data with every tensor moved to ``device``."""
        tensors = ("train_x", "train_y", "test_x", "test_y", "val_x", "val_y", "train_domain",
                   "test_domain", "val_domain")
        return dataclasses.replace(self, **{
            k: None if getattr(self, k) is None else getattr(self, k).to(device)
            for k in tensors})


def slices(x: Tensor, y: Tensor, size: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Images ``x`` and labels ``y`` in order, ``size`` at a time."""
    for i in range(0, len(x), size):
        yield x[i : i + size], y[i : i + size]


HOLD_OUT_SEED = 0  # the same validation images for every run of a dataset
# Arrays, or fednorm.data.imagenet.StreamedImages (its files held out the same way)
Data = TypeVar("Data")


def hold_out(data: Data, fraction: float) -> Data:
    """``data`` with round(fraction x n_c) training images of each class c (under feature
    shift: of each class and domain, ``train_domain``) moved into the validation set
    (``val_x``, ``val_y``, ``val_domain``): drawn by a permutation of fixed seed
    (HOLD_OUT_SEED), so every run and every method of a grid holds out the same images, and
    stratified, so the validation set has the training set's class (and domain)
    proportions, and every domain is scored as the test scores it. The remaining training images
    keep their order; the test set is untouched. ``fraction`` 0 returns ``data`` itself.
    ``data``: in-memory :class:`Arrays`, or images on disk (fednorm.data.imagenet.
    StreamedImages: its file lists split so): what is held out depends on the labels alone."""
    if fraction == 0:
        return data
    if data.val_y is not None:
        raise ValueError(f"{data.name}: a validation set is already held out")
    y = data.train_y.cpu()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(HOLD_OUT_SEED))
    domain = getattr(data, "train_domain", None)
    # one stratum per class, or per (class, domain): without domains the same images as ever
    strata = y if domain is None else y * (int(domain.max()) + 1) + domain.cpu()
    held = []
    for c in strata.unique().tolist():
        members = perm[strata[perm] == c]
        held.append(members[:round(fraction * len(members))])
    val = torch.cat(held).sort().values
    keep = torch.ones(len(y), dtype=torch.bool)
    keep[val] = False
    keep = keep.nonzero().flatten()  # in order
    return data.split_train(keep.to(data.device), val.to(data.device))
