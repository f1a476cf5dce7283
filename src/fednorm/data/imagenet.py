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
  is cached: :class:`StreamedImages` holds the file lists and labels (what the training code
  reads of :class:`fednorm.data.arrays.Arrays`), :class:`fednorm.fl.streamed.StreamedBatches`
  decodes each step's training images in DataLoader worker processes, off the training
  thread, and :meth:`StreamedImages.chunks` the test images, in chunks, for the evaluation;
- training images go through PyTorch's ImageNet training augmentation (:func:`decode_crop_flip`),
  test and held-out validation images through its evaluation transform (:func:`decode_centre`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fednorm.config import DATA_WORKERS
from fednorm.data.arrays import DatasetUnavailable
from fednorm.data.augment import resized_crop_boxes
from fednorm.data.tinyimagenet import IMAGENET_MEAN, IMAGENET_STD
from fednorm.inputs import reading

FOLDER = "imagenet"  # under the data folder
SPLITS = ("train", "val")
SUFFIXES = (".jpeg", ".jpg", ".png")  # ImageNet's files are .JPEG; case is ignored
DRAWS = 5  # uniforms per training image: fednorm.data.augment.resized_crop_boxes (4), flip (1)
FIX_IMAGE = "to fix: replace it with an intact copy, or remove it (its class folder keeps the rest)"


@dataclass(frozen=True)
class ImageFiles:
    """One split of an image folder tree: ``paths[k]`` has label ``labels[k]``, and label c is
    ``wnids[c]``."""

    paths: tuple[str, ...]
    labels: Tensor
    wnids: tuple[str, ...]

    def take(self, index: Tensor) -> ImageFiles:
        """The files ``index`` (1-D, on any device), in that order, with their labels."""
        index = index.cpu()
        return ImageFiles(tuple(self.paths[k] for k in index.tolist()), self.labels[index],
                          self.wnids)


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

    with reading(path, "ImageNet image", FIX_IMAGE), Image.open(path) as image:
        image = image.convert("RGB")
        top, left, h, w = resized_crop_boxes(image.height, image.width,
                                             torch.tensor([list(u[:4])])).tolist()[0]
        out = image.resize((size, size), Image.Resampling.BILINEAR,
                           box=(left, top, left + w, top + h))
    if u[4] < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out).transpose(2, 0, 1)


def centre_resize(size: int) -> int:
    """The shorter side an image is resized to before its centre ``size`` x ``size`` is cut:
    PyTorch's ImageNet evaluation (Resize(256), CenterCrop(224)) scaled to ``size``."""
    return round(size * 256 / 224)


def decode_centre(path: str, size: int) -> np.ndarray:
    """uint8 (3, size, size): the JPEG at ``path``, in RGB, through PyTorch's ImageNet
    evaluation transform scaled to ``size``: its shorter side resized to
    :func:`centre_resize` (``size``), the longer in proportion (truncated, as torchvision's
    Resize), PIL's bilinear filter (antialiased when it shrinks), then the centre ``size`` x
    ``size`` (torchvision CenterCrop's rounding). Equal to torchvision's Resize + CenterCrop
    on the PIL image (tested)."""
    from PIL import Image

    short = centre_resize(size)
    with reading(path, "ImageNet image", FIX_IMAGE), Image.open(path) as image:
        image = image.convert("RGB")
        w, h = image.size
        new = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
        image = image.resize(new, Image.Resampling.BILINEAR)
    top, left = round((new[1] - size) / 2.0), round((new[0] - size) / 2.0)
    out = image.crop((left, top, left + size, top + size))
    return np.asarray(out).transpose(2, 0, 1)


def normalize(x: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """uint8 (..., 3, H, W) -> ``(x/255 - mean_c) / std_c`` (ImageNet statistics) in ``dtype``
    (float32 for training; float64 for the tests' exact comparisons)."""
    mean = torch.tensor(IMAGENET_MEAN, device=x.device, dtype=dtype)[:, None, None]
    std = torch.tensor(IMAGENET_STD, device=x.device, dtype=dtype)[:, None, None]
    return (x.to(dtype) / 255.0 - mean) / std


class _Chunks(torch.utils.data.Dataset):
    """Item i: the i-th ``size`` images of ``files`` through :func:`decode_centre`, uint8
    (k, 3, s, s), and their labels (k,)."""

    def __init__(self, files: ImageFiles, size: int, image_size: int) -> None:
        self.files, self.size, self.image_size = files, size, image_size

    def __len__(self) -> int:
        return -(-len(self.files.paths) // self.size)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        lo, hi = i * self.size, min((i + 1) * self.size, len(self.files.paths))
        x = np.stack([decode_centre(p, self.image_size) for p in self.files.paths[lo:hi]])
        return torch.from_numpy(x), self.files.labels[lo:hi]


@dataclass(frozen=True)
class StreamedImages:
    """ImageNet-1K as the training code reads a dataset (the parts of
    :class:`fednorm.data.arrays.Arrays` it uses), with the images left on disk: the training,
    test and (held out: :func:`fednorm.data.arrays.hold_out`) validation files, their labels in
    memory (1.28 M int64: 10 MB), the classes, the images' side and the decoding workers.

    Training batches: :func:`fednorm.fl.streamed.streamed_batches`. Test and validation images:
    :meth:`chunks`, decoded with the evaluation transform (:func:`decode_centre`) in ``workers``
    processes, a chunk each, in file order. ``device``: where batches, chunks and labels are
    handed out (:meth:`to`); the files' labels themselves stay on the CPU, with the workers.
    """

    train: ImageFiles
    test: ImageFiles
    n_classes: int
    image_size: int
    workers: int = DATA_WORKERS
    name: str = "imagenet"
    val: ImageFiles | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # the decoded images' (normalize) and so the models': float32; float64 where a test
    # compares runs exactly (dataclasses.replace(data, dtype=torch.float64))
    dtype: torch.dtype = torch.float32

    @property
    def train_y(self) -> Tensor:
        return self.train.labels.to(self.device)

    @property
    def test_y(self) -> Tensor:
        return self.test.labels.to(self.device)

    @property
    def val_y(self) -> Tensor | None:
        return None if self.val is None else self.val.labels.to(self.device)

    def to(self, device: torch.device | str) -> StreamedImages:
        """The same data handed out on ``device``."""
        return dataclasses.replace(self, device=torch.device(device))

    def split_train(self, keep: Tensor, val: Tensor) -> StreamedImages:
        """The training files ``keep`` kept for training, the files ``val`` held out as the
        validation set (indices; :func:`fednorm.data.arrays.hold_out`)."""
        if self.val is not None:
            raise ValueError(f"{self.name}: a validation set is already held out")
        return dataclasses.replace(self, train=self.train.take(keep), val=self.train.take(val))

    def chunks(self, split: str, size: int) -> Iterator[tuple[Tensor, Tensor]]:
        """The ``split`` ('test' or 'val') images in file order, ``size`` at a time: ``x``
        (k, 3, s, s) float32 normalized and ``y`` (k,), on ``device``; each chunk decoded
        (:func:`decode_centre`) by one of ``workers`` processes (0: in this thread)."""
        files = {"test": self.test, "val": self.val}.get(split)
        if files is None:
            raise ValueError(f"{self.name}: split {split!r} has no images; allowed: 'test', "
                             f"or 'val' once a validation set is held out")
        loader = torch.utils.data.DataLoader(_Chunks(files, size, self.image_size),
                                             batch_size=None, num_workers=self.workers)
        for x, y in loader:
            yield normalize(x.to(self.device, non_blocking=True), self.dtype), y.to(self.device)


def load_imagenet(data_dir: str | Path, image_size: int,
                  workers: int = DATA_WORKERS) -> StreamedImages:
    """``data_dir``/imagenet as :class:`StreamedImages` (all of it: every file of the tree)."""
    if not (isinstance(workers, int) and workers >= 0):
        raise ValueError(f"data workers has value {workers!r}; allowed: an integer >= 0 "
                         f"(0: decode in the training process)")
    train, val = read_imagenet(data_dir)
    return StreamedImages(train, val, len(train.wnids), image_size, workers)


def write_sample_tree(root: str | Path, n_classes: int = 4, train_per_class: int = 5,
                      val_per_class: int = 2, seed: int = 0) -> None:
    """Write a small ImageNet-shaped tree ``root``/imagenet/{train,val}/<wnid>/*.JPEG (tests
    and the .test DAG: ImageNet is never downloaded): ``n_classes`` made-up wnids (not in
    sorted order), JPEGs of varied sizes (neither square nor alike: 24-60 pixels a side) of
    colour noise around a mean colour of their class (learnable), every third one saved grey.
    """
    from PIL import Image

    gen = np.random.default_rng(seed)
    wnids = [f"n{9_000_000 - 17 * c:08d}" for c in range(n_classes)]
    colours = gen.uniform(40, 215, size=(n_classes, 3))
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for c, wnid in enumerate(wnids):
            folder = Path(root, FOLDER, split, wnid)
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                h, w = (int(v) for v in gen.integers(24, 61, size=2))
                pixels = np.clip(colours[c] + gen.normal(0, 25, (h, w, 3)), 0, 255)
                image = Image.fromarray(pixels.astype(np.uint8))
                (image.convert("L") if k % 3 == 2 else image).save(
                    folder / f"{wnid}_{split}_{k}.JPEG", quality=95)
