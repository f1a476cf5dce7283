"""Digits-Five: the digits 0-9 in five domains (MNIST, SVHN, USPS, SynthDigits, MNIST-M), the
feature-shift benchmark of FedBN (Li et al. 2021, arXiv 2102.07623, Sec. 5.1) and FedWon
(Zhuang & Lyu 2023, arXiv 2306.05879): each client holds one domain. Each domain is read from
the files its authors publish, at the paths of FILES under one data folder ``root``:

- ``mnist``: ``MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`` (LeCun et al.; the
  folder torchvision.datasets.MNIST(root, download=True) fills). Gzip'd IDX files: a big-endian
  header (magic 2051 = 0x00000803, uint8 and 3 dimensions, then N, 28, 28 for the images;
  magic 2049 and N for the labels), then the bytes row by row. Read by torchvision's own
  ``read_image_file`` / ``read_label_file`` (``torchvision.datasets.mnist``), which check the
  type and the dimensions; labels 0-9. Grey, 28×28.
- ``svhn``: ``SVHN/{train,test}_32x32.mat`` (Netzer et al. 2011,
  http://ufldl.stanford.edu/housenumbers/). MATLAB v5 files: ``X`` uint8 (32, 32, 3, N) (row,
  column, channel R G B, image) and ``y`` (N, 1) with 1-9 for the digits 1-9 and 10 for the digit
  0. Read with ``scipy.io.loadmat``, as torchvision.datasets.SVHN reads them (that class checks
  each file's md5 sum when it opens it, so it refuses any other copy, a small one included).
- ``usps``: ``USPS/usps.bz2`` and ``USPS/usps.t.bz2`` (Hull 1994; LIBSVM's copy,
  https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass.html#usps). Bzip2'd LIBSVM
  lines ``label 1:v 2:v ... 256:v``: a 16×16 grey image row by row with v in [-1, 1], and the
  label 1-10 meaning the digit 0-9. Read by torchvision.datasets.USPS, which checks no md5 sum
  when it opens a file (only after a download) and maps v to the uint8 ``(v + 1) / 2 · 255``,
  truncated.
- ``synthdigits``: ``SynthDigits/synth_{train,test}_32x32.mat`` (Ganin & Lempitsky 2015, ICML,
  "Unsupervised Domain Adaptation by Backpropagation"; http://yaroslav.ganin.net/, mirrored at
  https://github.com/domainadaptation/datasets under synth/). SVHN's layout (``X`` uint8
  (32, 32, 3, N), ``y`` (N, 1)), but the labels are the digits 0-9 themselves: FedBN's
  preprocessing (utils/data_preprocess.py, process_synth) keeps them as stored while it maps
  SVHN's 10 to 0, and trains a 10-class model on both. A 10 in this file is an error, not a 0.
- ``mnistm``: ``mnist_m/`` as ``mnist_m.tar.gz`` unpacks (Ganin et al. 2016, JMLR,
  http://yaroslav.ganin.net/): ``mnist_m_{train,test}/`` of 32×32 RGB PNG files and
  ``mnist_m_{train,test}_labels.txt``, one line ``<file name> <digit>`` per image. Decoded with
  PIL, in the order of the labels file.

Every reader returns uint8 images (N, 3, H, W), grey replicated to the three channels, and
int64 digits 0-9, in file order. A malformed file (truncated, a wrong count, a page saved
under its name, a short line, a label outside the file's convention) is one line naming it
(fednorm.inputs.InputError); a missing one, DatasetUnavailable naming it and its source. What
a run sees (:func:`load_digits5`):

- the published train and test splits (FedBN instead pools each domain's two splits and draws
  its own stratified 80/20 split; its clients then train on 743 images each, 10% of USPS's
  7,438, the smallest domain): ``n_train`` / ``n_test`` take a stratified subset of each split
  (:func:`stratified_subset`: each class's share kept, images drawn with a fixed seed), so
  ``n_train=743`` gives FedBN's client size; None takes every image;
- each domain resized to ``image_size`` (FedBN: 28, MNIST's size) by antialiased bilinear
  interpolation, the resize that FedBN's ``transforms.Resize([28, 28])`` applies to PIL images;
- normalized as FedBN does, ``(x/255 - 0.5) / 0.5`` in every channel of every domain.
"""

from __future__ import annotations

import bz2
import gzip
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fednorm.data.arrays import Arrays, DatasetUnavailable
from fednorm.inputs import InputError, reading
from fednorm.metrics import DIGITS5_DOMAINS

DOMAINS = DIGITS5_DOMAINS  # the names the configuration checks (fednorm.metrics)
SPLITS = ("train", "test")
N_CLASSES = 10
IMAGE_SIZE = 28  # FedBN resizes every domain to MNIST's 28×28
SUBSET_SEED = 0  # the same subset for every run: fixed by the data, never by a run's seed
# FedBN's transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)) for every domain: one fixed map
# to [-1, 1]. Each domain's own mean and deviation would remove part of the very feature shift
# (brightness, contrast) that the benchmark is about.
MEAN, STD = 0.5, 0.5

# The files of each domain and split under ``root``, as published (see the module docstring).
FILES: dict[str, dict[str, tuple[str, ...]]] = {
    "mnist": {s: (f"MNIST/raw/{p}-images-idx3-ubyte.gz", f"MNIST/raw/{p}-labels-idx1-ubyte.gz")
              for s, p in (("train", "train"), ("test", "t10k"))},
    "svhn": {s: (f"SVHN/{s}_32x32.mat",) for s in SPLITS},
    "usps": {"train": ("USPS/usps.bz2",), "test": ("USPS/usps.t.bz2",)},
    "synthdigits": {s: (f"SynthDigits/synth_{s}_32x32.mat",) for s in SPLITS},
    "mnistm": {s: (f"mnist_m/mnist_m_{s}_labels.txt", f"mnist_m/mnist_m_{s}") for s in SPLITS},
}
SOURCES = {
    "mnist": "torchvision.datasets.MNIST(root, download=True) fetches them, from "
             "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "svhn": "http://ufldl.stanford.edu/housenumbers/",
    "usps": "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass/",
    "synthdigits": "http://yaroslav.ganin.net/ (SynNumbers), or "
                   "https://github.com/domainadaptation/datasets (synth/)",
    "mnistm": "extract mnist_m.tar.gz from http://yaroslav.ganin.net/ into the data folder",
}


def _require(root: str | Path, domain: str, split: str) -> list[Path]:
    """The paths of FILES[domain][split] under ``root``; DatasetUnavailable, naming the first
    missing one and where to get it, if any is missing."""
    paths = [Path(root) / name for name in FILES[domain][split]]
    for path in paths:
        if not path.exists():
            raise DatasetUnavailable(f"Digits-Five domain '{domain}' ({split}) needs {path}, "
                                     f"which is missing. To fix: put it there (from "
                                     f"{SOURCES[domain]}), then re-run.")
    return paths


def _reading(path: Path, domain: str):
    """Around the read of one of ``domain``'s files: a malformed file is one line naming it
    and where to get the published one (fednorm.inputs.reading)."""
    return reading(path, f"Digits-Five domain '{domain}': file", f"to fix: replace it with the "
                   f"published file (source: {SOURCES[domain]}), then re-run")


def _labels(raw: object, allowed: range, where: Path) -> Tensor:
    """``raw`` labels as a flat int64 tensor, each checked to lie in ``allowed`` (the file's
    convention); an InputError naming the file otherwise."""
    y = torch.as_tensor(np.asarray(raw), dtype=torch.int64).flatten()
    if len(y) and (int(y.min()) < allowed.start or int(y.max()) >= allowed.stop):
        raise InputError(f"{where}: labels range over {int(y.min())}..{int(y.max())}; allowed: "
                         f"{allowed.start}..{allowed.stop - 1}, this file's convention")
    return y


def _rgb(grey: Tensor) -> Tensor:
    """uint8 (N, H, W) -> (N, 3, H, W), the grey value in all three channels."""
    return grey[:, None].expand(-1, 3, -1, -1).contiguous()


def read_mnist(root: str | Path, split: str) -> tuple[Tensor, Tensor]:
    """MNIST's gzip'd IDX files, unpacked into a temporary folder (torchvision's
    ``extract_archive``, as its MNIST class unpacks them) and read by torchvision's readers."""
    from torchvision.datasets.mnist import read_image_file, read_label_file
    from torchvision.datasets.utils import extract_archive

    images, labels = _require(root, "mnist", split)
    with tempfile.TemporaryDirectory() as tmp:
        with _reading(images, "mnist"):
            x = read_image_file(extract_archive(images, tmp))
        with _reading(labels, "mnist"):
            y = read_label_file(extract_archive(labels, tmp))
    if len(x) != len(y):
        raise InputError(f"Digits-Five domain 'mnist': {images} holds {len(x)} images and "
                         f"{labels} {len(y)} labels; to fix: replace them with the published "
                         f"files (source: {SOURCES['mnist']}), then re-run")
    return _rgb(x), _labels(y, range(10), labels)


def _read_mat(path: Path, domain: str) -> tuple[Tensor, np.ndarray]:
    """SVHN's .mat layout: ``X`` (32, 32, 3, N) -> uint8 (N, 3, 32, 32); ``y`` as stored."""
    from scipy.io import loadmat

    with _reading(path, domain):
        mat = loadmat(path)
        x, y = mat["X"], mat["y"]
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[2] != 3 or y.size != x.shape[3]:
            raise ValueError(f"X has shape {x.shape} and type {x.dtype}, y {y.size} labels; "
                             f"expected X uint8 (32, 32, 3, N) and N labels")
    x = np.ascontiguousarray(x.transpose(3, 2, 0, 1))  # (row, col, channel, image)
    return torch.from_numpy(x), y


def read_svhn(root: str | Path, split: str) -> tuple[Tensor, Tensor]:
    """SVHN's .mat file; its label 10 (the digit 0) becomes 0."""
    (path,) = _require(root, "svhn", split)
    x, y = _read_mat(path, "svhn")
    return x, _labels(y, range(1, 11), path) % 10


def read_synthdigits(root: str | Path, split: str) -> tuple[Tensor, Tensor]:
    """SynthDigits' .mat file, SVHN's layout with the digits 0-9 as labels."""
    (path,) = _require(root, "synthdigits", split)
    x, y = _read_mat(path, "synthdigits")
    return x, _labels(y, range(10), path)


def read_usps(root: str | Path, split: str) -> tuple[Tensor, Tensor]:
    """USPS's bzip2'd LIBSVM file through torchvision.datasets.USPS: pixels ``(v + 1)/2 · 255``
    truncated to uint8, labels 1-10 shifted to the digits 0-9 (by torchvision)."""
    from torchvision.datasets import USPS

    (path,) = _require(root, "usps", split)
    with _reading(path, "usps"):
        data = USPS(path.parent, train=split == "train")
    return _rgb(torch.from_numpy(data.data)), _labels(data.targets, range(10), path)


def read_mnistm(root: str | Path, split: str) -> tuple[Tensor, Tensor]:
    """MNIST-M's PNG files, in the order of its labels file (lines ``<file name> <digit>``)."""
    from PIL import Image  # torchvision's dependency; imported here to keep `import fednorm` light

    labels, folder = _require(root, "mnistm", split)
    with _reading(labels, "mnistm"):
        lines = labels.read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if fields and (len(fields) != 2 or not fields[1].isdigit()):
            raise InputError(f"Digits-Five domain 'mnistm': file {labels} line {number} is "
                             f"{line.strip()!r}; expected '<file name> <digit>'; to fix: "
                             f"replace it with the published file (source: {SOURCES['mnistm']})")
        if fields:
            rows.append(fields)

    def decode(name: str) -> np.ndarray:
        with _reading(folder / name, "mnistm"), Image.open(folder / name) as image:
            return np.asarray(image.convert("RGB")).transpose(2, 0, 1)

    images = [decode(name) for name, _ in rows]
    shapes = {image.shape for image in images}
    if len(shapes) > 1:
        raise InputError(f"Digits-Five domain 'mnistm': the images of {folder} differ in size "
                         f"({sorted(shapes)}); to fix: replace them with the published files "
                         f"(source: {SOURCES['mnistm']})")
    x = torch.from_numpy(np.stack(images))
    return x, _labels([int(digit) for _, digit in rows], range(10), labels)


READERS: dict[str, Callable[[str | Path, str], tuple[Tensor, Tensor]]] = {
    "mnist": read_mnist, "svhn": read_svhn, "usps": read_usps,
    "synthdigits": read_synthdigits, "mnistm": read_mnistm}


def read_domain(root: str | Path, domain: str, split: str) -> tuple[Tensor, Tensor]:
    """``(images, digits)`` of one domain's ``split`` ('train' or 'test'): uint8 (N, 3, H, W)
    and int64 (N,) in 0-9, in file order."""
    if domain not in READERS or split not in SPLITS:
        raise ValueError(f"Digits-Five has no domain {domain!r} with split {split!r}; allowed: "
                         f"a domain of {DOMAINS} and a split of {SPLITS}")
    x, y = READERS[domain](root, split)
    if x.dtype != torch.uint8 or x.dim() != 4 or x.shape[1] != 3 or len(x) != len(y):
        raise ValueError(f"Digits-Five domain '{domain}' ({split}) in {root}: {len(y)} labels "
                         f"for images of shape {tuple(x.shape)} and type {x.dtype}; expected "
                         f"uint8 (N, 3, H, W), one label per image")
    return x, y


def proportional_counts(class_sizes: Tensor, n: int) -> Tensor:
    """How many of ``n`` images each class gets: its share ``n · size_c / total`` rounded by
    largest remainders (Hamilton's apportionment): the floor of each share, then one more to
    the classes of largest fractional part (ties to the lower digit) until the counts sum to
    ``n``. Each count is thus the floor or the ceiling of its share, and never more than the
    class holds."""
    share = class_sizes.double() * n / class_sizes.sum()
    counts = share.floor().long()
    order = torch.argsort(share - counts, descending=True, stable=True)
    counts[order[:n - int(counts.sum())]] += 1
    return counts


def stratified_subset(labels: Tensor, n: int, seed: int = SUBSET_SEED) -> Tensor:
    """The sorted indices of ``n`` images of ``labels`` (digits 0-9): each class's count from
    :func:`proportional_counts`, its images the first of one permutation of seed ``seed``.
    The same labels, ``n`` and seed give the same indices."""
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(labels), generator=generator)
    counts = proportional_counts(torch.bincount(labels, minlength=N_CLASSES), n)
    keep = [perm[labels[perm] == c][:k] for c, k in enumerate(counts.tolist())]
    return torch.cat(keep).sort().values


def to_float(x: Tensor, image_size: int) -> Tensor:
    """uint8 (N, 3, h, w) -> float32 (N, 3, s, s): ``x/255`` resized to ``image_size`` by
    antialiased bilinear interpolation (within one grey level of PIL's bilinear resize), then
    ``(x - MEAN) / STD``."""
    out = x.float() / 255.0
    if out.shape[-2:] != (image_size, image_size):
        out = F.interpolate(out, size=(image_size, image_size), mode="bilinear",
                            antialias=True, align_corners=False)
    return (out - MEAN) / STD


def _split(root: str | Path, domain: str, split: str, n: int | None, image_size: int,
           seed: int) -> tuple[Tensor, Tensor]:
    x, y = read_domain(root, domain, split)
    if n is not None:
        if n > len(y):
            raise ValueError(f"key 'n_{split}' has value {n}; allowed: at most the {len(y)} "
                             f"{split} images of Digits-Five domain '{domain}' in {root}")
        keep = stratified_subset(y, n, seed)
        x, y = x[keep], y[keep]
    return to_float(x, image_size), y


def load_digits5(root: str | Path, domains: tuple[str, ...] = DOMAINS,
                 image_size: int = IMAGE_SIZE, n_train: int | None = None,
                 n_test: int | None = None, seed: int = SUBSET_SEED) -> dict[str, Arrays]:
    """Each domain of ``domains`` as normalized float32 :class:`Arrays` (name
    ``digits5/<domain>``), in the order given: read from ``root`` (FILES), a stratified subset
    of ``n_train`` training and ``n_test`` test images (None: all), resized and normalized as
    the module docstring says. A missing file raises DatasetUnavailable naming it."""
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        raise ValueError(f"key 'domains' has value {list(domains)}; allowed: domains of "
                         f"{DOMAINS} ({unknown} are not)")
    out = {}
    for domain in domains:
        train_x, train_y = _split(root, domain, "train", n_train, image_size, seed)
        test_x, test_y = _split(root, domain, "test", n_test, image_size, seed)
        out[domain] = Arrays(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                             n_classes=N_CLASSES, name=f"digits5/{domain}")
    return out


# --- tiny copies in the published formats, for tests (nothing can be downloaded there) -------

SAMPLE_SHAPES = {"mnist": (1, 28), "svhn": (3, 32), "usps": (1, 16), "synthdigits": (3, 32),
                 "mnistm": (3, 32)}  # (channels, side) as each domain publishes its images


def _write_mnist(root: Path, split: str, grey: np.ndarray, digits: np.ndarray) -> None:
    images, labels = (root / name for name in FILES["mnist"][split])
    images.parent.mkdir(parents=True, exist_ok=True)
    n, rows, cols = grey.shape
    images.write_bytes(gzip.compress(struct.pack(">IIII", 2051, n, rows, cols) + grey.tobytes()))
    labels.write_bytes(gzip.compress(struct.pack(">II", 2049, n)
                                     + digits.astype(np.uint8).tobytes()))


def _write_mat(path: Path, rgb: np.ndarray, stored: np.ndarray) -> None:
    from scipy.io import savemat

    path.parent.mkdir(parents=True, exist_ok=True)
    savemat(path, {"X": rgb.transpose(2, 3, 1, 0), "y": stored.astype(np.uint8)[:, None]})


def _write_usps(path: Path, values: np.ndarray, digits: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{d + 1} " + " ".join(f"{i}:{v:.6f}" for i, v in enumerate(row, 1))
             for d, row in zip(digits.tolist(), values.reshape(len(digits), -1), strict=True)]
    path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))


def _write_mnistm(root: Path, split: str, rgb: np.ndarray, digits: np.ndarray) -> None:
    from PIL import Image

    labels, folder = (root / name for name in FILES["mnistm"][split])
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"{i:08d}.png" for i in range(len(digits))]  # the published files' naming
    for name, image in zip(names, rgb, strict=True):
        Image.fromarray(image.transpose(1, 2, 0)).save(folder / name)
    labels.write_text("".join(f"{n} {d}\n" for n, d in zip(names, digits.tolist(), strict=True)))


def write_sample_archives(root: str | Path, per_class: int = 2, seed: int = 0
                          ) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Write a tiny copy of every domain, ``per_class`` images of each digit per split in
    shuffled order, in its published format at the paths of FILES under ``root``. Each image
    is noise around a grey level of its digit (learnable). Returns, for each domain and split,
    what its reader must give: the images (N, 3, H, W) in 0-255 (uint8; for USPS float64, the
    value its floats stand for before torchvision truncates it) and the digits (int64)."""
    root = Path(root)
    gen = np.random.default_rng(seed)
    levels = np.linspace(30.0, 225.0, N_CLASSES)
    written: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for domain, (channels, side) in SAMPLE_SHAPES.items():
        written[domain] = {}
        for split in SPLITS:
            digits = gen.permutation(np.repeat(np.arange(N_CLASSES), per_class))
            noisy = levels[digits][:, None, None, None] + gen.normal(
                0, 20, (len(digits), channels, side, side))
            pixels = np.clip(noisy, 0, 255).round().astype(np.uint8)
            if domain == "usps":
                values = np.round(pixels[:, 0] / 127.5 - 1.0, 6)  # [-1, 1], as the file holds
                _write_usps(root / FILES[domain][split][0], values, digits)
                pixels = ((values + 1.0) / 2.0 * 255.0)[:, None]
            elif domain == "mnist":
                _write_mnist(root, split, pixels[:, 0], digits)
            elif domain == "mnistm":
                _write_mnistm(root, split, pixels, digits)
            else:  # SVHN stores the digit 0 as 10, SynthDigits as 0
                stored = np.where(digits == 0, 10, digits) if domain == "svhn" else digits
                _write_mat(root / FILES[domain][split][0], pixels, stored)
            rgb = np.broadcast_to(pixels, (len(digits), 3, side, side)).copy()
            written[domain][split] = (rgb, digits.astype(np.int64))
    return written


def load_digits5_arrays(root: str | Path, domains: tuple[str, ...], image_size: int,
                        n_train: int, n_test: int) -> Arrays:
    """The ``domains`` of Digits-Five as one feature-shift dataset: their training and test
    images side by side (domain by domain, ``n_train`` and ``n_test`` of each), each image's
    domain in ``train_domain`` and ``test_domain`` (its position in ``domains``)."""
    parts = load_digits5(root, domains, image_size, n_train, n_test)
    arrays = [parts[d] for d in domains]

    def ids(split: str) -> Tensor:
        return torch.cat([torch.full((len(getattr(a, f"{split}_y")),), i, dtype=torch.int64)
                          for i, a in enumerate(arrays)])

    return Arrays(train_x=torch.cat([a.train_x for a in arrays]),
                  train_y=torch.cat([a.train_y for a in arrays]),
                  test_x=torch.cat([a.test_x for a in arrays]),
                  test_y=torch.cat([a.test_y for a in arrays]), n_classes=N_CLASSES,
                  name="digits5", domains=tuple(domains), train_domain=ids("train"),
                  test_domain=ids("test"))
