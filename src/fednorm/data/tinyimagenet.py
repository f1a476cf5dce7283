"""Tiny-ImageNet (Le & Yang 2015): 200 classes, 100,000 training and 10,000 validation images
of 64×64, read from its official archive and decoded once into a uint8 tensor file.

The archive ``tiny-imagenet-200.zip`` (ARCHIVE_URL) holds, under ``tiny-imagenet-200/``:
``wnids.txt`` (the 200 WordNet ids, one a line), ``train/<wnid>/images/*.JPEG`` (500 a class)
and ``val/images/*.JPEG`` with their labels in ``val/val_annotations.txt`` (tab-separated:
file name, wnid, then a bounding box). The test split has no labels and is not read; the
validation images are the test set, as in the FixBN paper (its Table F: 100K / 10K).

Conventions, all fixed by the data, never by a run:

- class c is the c-th wnid in sorted order (what ``torchvision.datasets.ImageFolder`` gives the
  ``train/`` folder); the training images are laid out class by class, each class's files in
  sorted name order; the validation images in sorted file-name order;
- grey JPEGs (a few hundred in the archive) are converted to RGB by PIL (the grey value in all
  three channels);
- a run may take a subset (``n_train``, ``n_test``): the first images of the stratified order of
  :func:`fednorm.data.mnist5k.stratified_order` (one image of each class in turn), so every class
  keeps its share; None takes every image;
- images smaller than 64 (``image_size``) are area-resized (each output pixel the mean of the
  input pixels it covers), then normalized per channel with the ImageNet mean and standard
  deviation of PyTorch's ImageNet example (IMAGENET_MEAN, IMAGENET_STD).
"""

from __future__ import annotations

import io
import shutil
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fednorm.config import TINYIMAGENET_SIZE as IMAGE_SIZE
from fednorm.data.arrays import Arrays, DatasetUnavailable, cache_reading
from fednorm.data.mnist5k import stratified_order
from fednorm.inputs import reading
from fednorm.io import atomic_path

ARCHIVE_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
ARCHIVE_NAME = "tiny-imagenet-200.zip"
CACHE_NAME = "tinyimagenet_uint8.pt"  # fednorm.data.CACHES
TOP = "tiny-imagenet-200"
# Per-channel (R, G, B) mean and standard deviation of ImageNet's training images in [0, 1], as
# PyTorch's ImageNet example normalizes (the FixBN paper follows that script for Tiny-ImageNet).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _remedy(root: Path) -> str:
    return (f"To fix: copy {ARCHIVE_NAME} ({ARCHIVE_URL}, about 237 MB) into {root} on this "
            f"machine, then re-run.")


def fetch_archive(root: str | Path, download: bool = True) -> Path:
    """``root``/tiny-imagenet-200.zip: the copy already there, else downloaded from ARCHIVE_URL
    (atomically) when ``download`` and the network allow. Raises :class:`DatasetUnavailable`,
    saying where to put the archive, otherwise."""
    root = Path(root)
    archive = root / ARCHIVE_NAME
    if archive.exists():
        return archive
    if not download:
        raise DatasetUnavailable(f"Tiny-ImageNet is not in {root} (no {ARCHIVE_NAME}) and "
                                 f"download=False. {_remedy(root)}")
    try:
        with urllib.request.urlopen(ARCHIVE_URL, timeout=60) as response, \
                atomic_path(archive) as tmp, tmp.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as err:  # URLError, timeouts and refused connections are OSErrors
        raise DatasetUnavailable(f"Tiny-ImageNet is not in {root} and the download from "
                                 f"{ARCHIVE_URL} failed: {err}. {_remedy(root)}") from err
    return archive


def _decode(data: bytes) -> np.ndarray:
    """One JPEG's bytes -> uint8 (3, H, W), RGB."""
    from PIL import Image  # torchvision's dependency; imported here to keep `import fednorm` light

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB")).transpose(2, 0, 1)


def _stack(archive: zipfile.ZipFile, names: list[str]) -> Tensor:
    return torch.from_numpy(np.stack([_decode(archive.read(n)) for n in names]))


def read_tinyimagenet_uint8(archive_path: str | Path
                            ) -> tuple[Tensor, Tensor, Tensor, Tensor, list[str]]:
    """``(train_x, train_y, test_x, test_y, wnids)`` from the archive, in the order of the module
    docstring: uint8 images (N, 3, H, W), int64 labels, the sorted wnids (label c is wnids[c]).
    A validation label that is not among the wnids is an error naming the file."""
    fix = f"to fix: replace it with the official {ARCHIVE_NAME} ({ARCHIVE_URL})"
    with reading(archive_path, "Tiny-ImageNet archive", fix), \
            zipfile.ZipFile(archive_path) as archive:
        wnids = sorted(archive.read(f"{TOP}/wnids.txt").decode().split())
        label = {w: c for c, w in enumerate(wnids)}
        train = sorted(
            (label[p.parts[2]], n) for n in archive.namelist()
            if (p := PurePosixPath(n)).suffix == ".JPEG" and len(p.parts) == 5
            and p.parts[1] == "train" and p.parts[3] == "images")
        val_label = {}
        for line in archive.read(f"{TOP}/val/val_annotations.txt").decode().splitlines():
            if line.strip():
                name, wnid = line.split("\t")[:2]
                if wnid not in label:
                    raise ValueError(f"{archive_path}: val/val_annotations.txt labels {name} "
                                     f"with {wnid!r}, which is not in wnids.txt")
                val_label[name] = label[wnid]
        val = sorted(val_label)
        train_x = _stack(archive, [n for _, n in train])
        test_x = _stack(archive, [f"{TOP}/val/images/{n}" for n in val])
    train_y = torch.tensor([c for c, _ in train], dtype=torch.int64)
    test_y = torch.tensor([val_label[n] for n in val], dtype=torch.int64)
    return train_x, train_y, test_x, test_y, wnids


def cache_tinyimagenet(root: str | Path, download: bool = True) -> Path:
    """Decode the archive (:func:`fetch_archive`) into ``root``/tinyimagenet_uint8.pt,
    atomically: a ``torch.save`` of ``{"train_x", "train_y", "test_x", "test_y", "wnids"}``."""
    train_x, train_y, test_x, test_y, wnids = read_tinyimagenet_uint8(
        fetch_archive(root, download))
    target = Path(root) / CACHE_NAME
    with atomic_path(target) as tmp:
        torch.save({"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y,
                    "wnids": wnids}, tmp)
    return target


def _subset(x: Tensor, y: Tensor, n: int | None, key: str) -> tuple[Tensor, Tensor]:
    """The first ``n`` images of the stratified order (all of them, in file order, if None)."""
    if n is None:
        return x, y
    if n > len(y):
        raise ValueError(f"key '{key}' has value {n}; allowed: at most the {len(y)} images of "
                         f"this Tiny-ImageNet copy")
    keep = stratified_order(y)[:n]
    return x[keep], y[keep]


def to_float(x: Tensor, image_size: int) -> Tensor:
    """uint8 (N, 3, 64, 64) -> float32 (N, 3, s, s): area-resized to ``image_size``, then
    ``(x/255 - mean_c) / std_c`` with the ImageNet statistics."""
    out = x.float() / 255.0
    if image_size != out.shape[-1]:
        out = F.interpolate(out, size=(image_size, image_size), mode="area")
    mean = torch.tensor(IMAGENET_MEAN)[:, None, None]
    std = torch.tensor(IMAGENET_STD)[:, None, None]
    return (out - mean) / std


def load_tinyimagenet(root: str | Path, n_train: int | None = None, n_test: int | None = None,
                      image_size: int = IMAGE_SIZE, download: bool = False) -> Arrays:
    """Tiny-ImageNet as normalized float32 :class:`Arrays`, from ``root``/tinyimagenet_uint8.pt
    (written first from the archive, :func:`cache_tinyimagenet`, when absent)."""
    cache = Path(root) / CACHE_NAME
    if not cache.exists():
        cache_tinyimagenet(root, download)
    with cache_reading(cache):
        t = torch.load(cache, weights_only=True)
    train_x, train_y = _subset(t["train_x"], t["train_y"], n_train, "n_train")
    test_x, test_y = _subset(t["test_x"], t["test_y"], n_test, "n_test")
    return Arrays(train_x=to_float(train_x, image_size), train_y=train_y,
                  test_x=to_float(test_x, image_size), test_y=test_y,
                  n_classes=len(t["wnids"]), name="tinyimagenet")


def write_sample_archive(path: str | Path, n_classes: int = 4, train_per_class: int = 5,
                         val_per_class: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a small archive in the official layout to ``path`` (for tests and the .test DAG:
    nothing is downloaded there): ``n_classes`` made-up wnids, 64×64 JPEGs of colour noise
    around a mean colour of their class (learnable), every third one saved grey; the validation
    labels only in ``val/val_annotations.txt``, in shuffled order (the real file is not sorted
    either). Returns each wnid's mean colour (RGB, 0-255)."""
    from PIL import Image

    gen = np.random.default_rng(seed)
    wnids = [f"n{9_000_000 - 17 * c:08d}" for c in range(n_classes)]  # not in sorted order
    colours = gen.uniform(40, 215, size=(n_classes, 3))

    def jpeg(c: int, k: int) -> bytes:
        pixels = np.clip(colours[c] + gen.normal(0, 25, (IMAGE_SIZE, IMAGE_SIZE, 3)), 0, 255)
        image = Image.fromarray(pixels.astype(np.uint8))
        out = io.BytesIO()
        (image.convert("L") if k % 3 == 2 else image).save(out, format="JPEG", quality=95)
        return out.getvalue()

    val = [(f"val_{i}.JPEG", c) for i, c in enumerate(
        gen.permutation(np.repeat(np.arange(n_classes), val_per_class)).tolist())]
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w") as archive:
        archive.writestr(f"{TOP}/wnids.txt", "\n".join(wnids) + "\n")
        for c, wnid in enumerate(wnids):
            archive.writestr(f"{TOP}/train/{wnid}/{wnid}_boxes.txt", "")
            for k in range(train_per_class):
                archive.writestr(f"{TOP}/train/{wnid}/images/{wnid}_{k}.JPEG", jpeg(c, k))
        lines = [f"{name}\t{wnids[c]}\t0\t0\t63\t63" for name, c in val]
        archive.writestr(f"{TOP}/val/val_annotations.txt", "\n".join(lines) + "\n")
        for k, (name, c) in enumerate(val):
            archive.writestr(f"{TOP}/val/images/{name}", jpeg(c, k))
    return dict(zip(wnids, colours, strict=True))
