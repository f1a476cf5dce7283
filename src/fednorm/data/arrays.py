"""In-memory image classification data: the whole train and test sets as tensors."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor


class DatasetUnavailable(RuntimeError):
    """A dataset is not on disk (or its package is missing) and cannot be had here; the message
    says what to do."""


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

    def __post_init__(self) -> None:
        for split, x, y in (("train", self.train_x, self.train_y),
                            ("test", self.test_x, self.test_y)):
            if x.dim() != 4:
                raise ValueError(f"{self.name}: {split}_x must be 4-D (N, C, H, W), "
                                 f"got shape {tuple(x.shape)}")
            if y.dim() != 1 or len(x) != len(y):
                raise ValueError(f"{self.name}: {split}_y must be 1-D with one label per image "
                                 f"({len(x)}), got shape {tuple(y.shape)}")

    def to(self, device: torch.device | str) -> Arrays:
        """The same data with every tensor moved to ``device``."""
        return dataclasses.replace(
            self,
            train_x=self.train_x.to(device),
            train_y=self.train_y.to(device),
            test_x=self.test_x.to(device),
            test_y=self.test_y.to(device),
            val_x=None if self.val_x is None else self.val_x.to(device),
            val_y=None if self.val_y is None else self.val_y.to(device),
        )


HOLD_OUT_SEED = 0  # the same validation images for every run of a dataset


def hold_out(data: Arrays, fraction: float) -> Arrays:
    """``data`` with round(fraction x n_c) training images of each class c moved into the
    validation set (``val_x``, ``val_y``): drawn by a permutation of fixed seed (HOLD_OUT_SEED),
    so every run and every method of a grid holds out the same images, and stratified, so the
    validation set has the training set's class proportions. The remaining training images
    keep their order; the test set is untouched. ``fraction`` 0 returns ``data`` itself."""
    if fraction == 0:
        return data
    if data.val_x is not None:
        raise ValueError(f"{data.name}: a validation set is already held out")
    y = data.train_y.cpu()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(HOLD_OUT_SEED))
    held = []
    for c in range(data.n_classes):
        members = perm[y[perm] == c]
        held.append(members[:round(fraction * len(members))])
    val = torch.cat(held).sort().values
    keep = torch.ones(len(y), dtype=torch.bool)
    keep[val] = False
    val, keep = val.to(data.train_y.device), keep.to(data.train_y.device)
    return dataclasses.replace(data, train_x=data.train_x[keep], train_y=data.train_y[keep],
                               val_x=data.train_x[val], val_y=data.train_y[val])
