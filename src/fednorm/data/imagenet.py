"""ImageNet-1K (ILSVRC 2012): 1,000 classes, 1,281,167 training and 50,000 validation JPEGs of
every size, read from the folder tree users already have and streamed from disk.

The pipeline never downloads ImageNet (its licence asks each user to obtain it). It reads
``<data>/imagenet/`` (FOLDER), laid out as ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG``:
an ImageFolder tree, which is also what ``torchvision.datasets.ImageNet(root)`` leaves in its
root once it has parsed the ILSVRC 2012 archives (it adds ``meta.bin``, not read here). The
validation images are the test set, as in the FixBN paper's Table 2.

Conventions, all fixed by the data, never by a run:

- class c is the c-th wnid of ``train/`` in sorted order (torchvision's ImageFolder); a ``val/``
  folder whose wnid is not among them is an error naming it; within a class the files are in
  sorted name order, the classes one after another (:func:`read_folder`);
- JPEGs are decoded by PIL (torchvision's dependency) and converted to RGB (grey and CMYK
  files exist in ImageNet);
- 1.28 M images do not fit a tensor in memory (about 190 GB as uint8 at 224x224), so nothing
  is cached: :class:`StreamedBatches` decodes each step's images in DataLoader worker
  processes, off the training thread.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fednorm import rng
from fednorm.data.arrays import DatasetUnavailable
from fednorm.data.augment import resized_crop_boxes
from fednorm.data.tinyimagenet import IMAGENET_MEAN, IMAGENET_STD
from fednorm.fl.batches import ClientBatches

FOLDER = "imagenet"  # under the data folder
SPLITS = ("train", "val")
SUFFIXES = (".jpeg", ".jpg", ".png")  # ImageNet's files are .JPEG; case is ignored
DRAWS = 5  # uniforms per training image: fednorm.data.augment.resized_crop_boxes (4), flip (1)


@dataclass(frozen=True)
class ImageFiles:
    """One split of an image folder tree: ``paths[k]`` has label ``labels[k]``, and label c is
    ``wnids[c]``."""

    paths: tuple[str, ...]
    labels: Tensor
    wnids: tuple[str, ...]


def _where(root: Path) -> str:
    return (f"ImageNet is not in {root}: the pipeline never downloads it (its licence). To fix: "
            f"put the ILSVRC 2012 images there as {root}/train/<wnid>/*.JPEG and "
            f"{root}/val/<wnid>/*.JPEG (an ImageFolder tree; torchvision.datasets.ImageNet("
            f"'{root}') makes it from the official archives), then re-run.")


def read_folder(root: str | Path, split: str, wnids: Sequence[str] | None = None) -> ImageFiles:
    """The images of ``root``/``split``/<wnid>/ in the order of the module docstring.
    ``wnids``: the classes (those of ``train``, for ``val``); None reads them from the folder.
    Raises DatasetUnavailable (saying where to put the images) when the folder is missing or
    empty, ValueError naming a class folder that is not among ``wnids``."""
    root = Path(root)
    folder = root / split
    found = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if not found:
        raise DatasetUnavailable(_where(root))
    wnids = tuple(found if wnids is None else wnids)
    label = {w: c for c, w in enumerate(wnids)}
    paths, labels = [], []
    for wnid in found:
        if wnid not in label:
            raise ValueError(f"{folder / wnid}: class folder {wnid!r} is not among the "
                             f"{len(wnids)} classes of {root / 'train'}")
        files = sorted(f.name for f in (folder / wnid).iterdir()
                       if f.suffix.lower() in SUFFIXES)
        paths += [str(folder / wnid / f) for f in files]
        labels += [label[wnid]] * len(files)
    if not paths:
        raise DatasetUnavailable(_where(root))
    return ImageFiles(tuple(paths), torch.tensor(labels, dtype=torch.int64), wnids)


def read_imagenet(data_dir: str | Path) -> tuple[ImageFiles, ImageFiles]:
    """(train, val) of ``data_dir``/imagenet, val labelled with train's classes."""
    root = Path(data_dir) / FOLDER
    train = read_folder(root, "train")
    return train, read_folder(root, "val", train.wnids)


def decode_crop_flip(path: str, u: Sequence[float], size: int) -> np.ndarray:
    """uint8 (3, size, size): the JPEG at ``path``, in RGB, through PyTorch's ImageNet training
    augmentation: the box of :func:`fednorm.data.augment.resized_crop_boxes` on the image's own
    height and width from ``u[:4]``, resized to ``size`` x ``size`` (PIL's bilinear filter,
    antialiased when it shrinks, as torchvision's RandomResizedCrop on PIL images), mirrored
    left-right when ``u[4] < 1/2``."""
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB")
        top, left, h, w = resized_crop_boxes(image.height, image.width,
                                             torch.tensor([list(u[:4])])).tolist()[0]
        out = image.resize((size, size), Image.Resampling.BILINEAR,
                           box=(left, top, left + w, top + h))
    if u[4] < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out).transpose(2, 0, 1)


def normalize(x: Tensor) -> Tensor:
    """uint8 (..., 3, H, W) -> float32 ``(x/255 - mean_c) / std_c`` (ImageNet statistics)."""
    mean = torch.tensor(IMAGENET_MEAN, device=x.device)[:, None, None]
    std = torch.tensor(IMAGENET_STD, device=x.device)[:, None, None]
    return (x.float() / 255.0 - mean) / std


class _Steps(torch.utils.data.Dataset):
    """Item ``t``: step t's uint8 images (R, n*b, 3, s, s) and labels (R, n*b), decoded in the
    worker that fetches it."""

    def __init__(self, batches: StreamedBatches) -> None:
        self.batches = copy.copy(batches)
        self.batches._ahead = None  # a worker needs the draws and the files, not the workers

    def __getitem__(self, step: int) -> tuple[Tensor, Tensor]:
        b = self.batches
        idx = b.indices(step)  # (R, n*b), on the CPU
        u = b.augment_draws(step, DRAWS)  # (R, n*b or m*b, DRAWS): as idx's rows
        x = np.stack([decode_crop_flip(b.files.paths[k], uk, b.image_size)
                      for k, uk in zip(idx.flatten().tolist(), u.flatten(0, 1).tolist(),
                                       strict=True)])
        return torch.from_numpy(x).view(*idx.shape, *x.shape[1:]), b.files.labels[idx]


class StreamedBatches(ClientBatches):
    """:class:`fednorm.fl.batches.ClientBatches` over image files: what is drawn is decided
    exactly as there, only the images are read from disk.

    The draw: client i of run r at step t takes the b positions ``floor(u * |part_i|)`` of
    ``u = rng.uniform(fold(fold(run_key(seed_r), SAMPLE), t), (n, b))`` in its index list
    ``parts[r][i]`` (the partition of the labels, fednorm.data.partition, as for in-memory data);
    image k of the step gets the 5 uniforms ``rng.uniform(fold(fold(run_key(seed_r), AUGMENT),
    t), (n*b, 5))[k]``: its crop box and flip (:func:`decode_crop_flip`). Every draw is a pure
    function of (seed, step, position), so the batches do not depend on the number of workers,
    on which worker decodes which step, or on the other runs of the bundle.

    :meth:`sample` returns step t's ``x`` (R, n*b, 3, s, s) float32 normalized, on ``device``,
    and ``y`` (R, n*b). The steps are read ahead: ``workers`` processes (torch's DataLoader)
    each decode a whole step, ``prefetch`` steps each, while the engine trains; a step asked out
    of order (calibration's step -1, a restart) starts the read-ahead again from it.
    ``workers = 0`` decodes in the calling thread (tests).
    """

    def __init__(self, files: ImageFiles, parts: Sequence[Sequence[Tensor]], batch_size: int,
                 seeds: Sequence[int], image_size: int, workers: int = 4, prefetch: int = 2,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(None, files.labels, parts, batch_size, seeds, rng.SAMPLE)
        self.files, self.image_size, self.device = files, image_size, torch.device(device)
        self.workers, self.prefetch = workers, prefetch
        self._ahead: Iterator[tuple[Tensor, Tensor]] | None = None
        self._next = 0  # the step that self._ahead yields next

    def _read_from(self, step: int) -> Iterator[tuple[Tensor, Tensor]]:
        steps = iter(range(step, 2**62))  # the sampler: steps in order, from ``step``
        extra = {"prefetch_factor": self.prefetch} if self.workers else {}
        return iter(torch.utils.data.DataLoader(_Steps(self), batch_size=None, sampler=steps,
                                                num_workers=self.workers, **extra))

    def sample(self, step: int) -> tuple[Tensor, Tensor]:
        if self._ahead is None or self._next != step:
            self._ahead = self._read_from(step)
        x, y = next(self._ahead)
        self._next = step + 1
        return normalize(x.to(self.device, non_blocking=True)), y.to(self.device)

    def select(self, runs: Tensor) -> StreamedBatches:
        out = super().select(runs.cpu())  # the draws live on the CPU, with the workers
        out._ahead = None  # its workers would read the dropped runs too
        return out
