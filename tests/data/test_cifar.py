"""CIFAR-10 loading against a tiny archive in the real cifar-10-python format, fully offline."""

from __future__ import annotations

import hashlib
import pickle
import shutil
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10

from fednorm.data.cifar import (
    CACHE_NAME,
    CIFAR10_MEAN,
    CIFAR10_STD,
    DatasetUnavailable,
    load_cifar10,
)

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
PER_BATCH = 2  # images per training batch file
N_TEST = 3


@dataclass(frozen=True)
class TinyCifar:
    """What the tiny archive holds: images as (N, 3, 32, 32) uint8 and their labels."""

    train_x: np.ndarray
    train_y: list[int]
    test_x: np.ndarray
    test_y: list[int]


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _write_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    # The real format: each row is the R plane, then G, then B, each 32x32 row-major. The real
    # files are Python 2 pickles whose byte-string keys (b"data", ...) torchvision's
    # pickle.load(encoding="latin1") turns into str; Python 3 bytes would stay bytes, so the
    # keys are written as the str that torchvision ends up seeing.
    batch = {
        "batch_label": path.name,
        "labels": labels,
        "data": images.reshape(len(images), 3 * 32 * 32),
        "filenames": [f"img{i}.png" for i in range(len(images))],
    }
    path.write_bytes(pickle.dumps(batch))


class _QuietHandler(SimpleHTTPRequestHandler):
    # The default handler logs every request to stderr, cluttering test output.
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over HTTP on the loopback interface, and its base URL."""
    folder = tmp_path / "remote"
    folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def tiny_cifar(
    tmp_path: Path, serve_dir: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> TinyCifar:
    """Packs a tiny cifar-10-python.tar.gz and points torchvision's CIFAR10 at it.

    A file:// URL does not work: torchvision's downloader reads ``response.length``, which
    urllib's file:// responses lack. So the archive is served over loopback HTTP, and only the
    CIFAR10 class attributes (URL and the md5 sums it verifies) are replaced.
    """
    rng = np.random.default_rng(0)
    n_train = PER_BATCH * len(TRAIN_FILES)
    tiny = TinyCifar(
        train_x=rng.integers(0, 256, (n_train, 3, 32, 32), dtype=np.uint8),
        train_y=[int(v) for v in rng.integers(0, 10, n_train)],
        test_x=rng.integers(0, 256, (N_TEST, 3, 32, 32), dtype=np.uint8),
        test_y=[int(v) for v in rng.integers(0, 10, N_TEST)],
    )
    folder = tmp_path / "build" / CIFAR10.base_folder
    folder.mkdir(parents=True)
    for i, name in enumerate(TRAIN_FILES):
        rows = slice(i * PER_BATCH, (i + 1) * PER_BATCH)
        _write_batch(folder / name, tiny.train_x[rows], tiny.train_y[rows])
    _write_batch(folder / "test_batch", tiny.test_x, tiny.test_y)
    label_names = [f"class{i}" for i in range(10)]
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": label_names}))

    remote, base_url = serve_dir
    archive = remote / CIFAR10.filename
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=CIFAR10.base_folder)

    monkeypatch.setattr(CIFAR10, "url", f"{base_url}/{CIFAR10.filename}")
    monkeypatch.setattr(CIFAR10, "tgz_md5", _md5(archive))
    monkeypatch.setattr(CIFAR10, "train_list", [[n, _md5(folder / n)] for n in TRAIN_FILES])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", _md5(folder / "test_batch")]])
    meta = {"filename": "batches.meta", "key": "label_names",
            "md5": _md5(folder / "batches.meta")}
    monkeypatch.setattr(CIFAR10, "meta", meta)
    return tiny


def _expected_float(images: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(images).double() / 255.0
    mean = torch.tensor(CIFAR10_MEAN, dtype=torch.float64)[:, None, None]
    std = torch.tensor(CIFAR10_STD, dtype=torch.float64)[:, None, None]
    return ((x - mean) / std).float()


def test_download_extracts_and_returns_the_written_pixels(tiny_cifar: TinyCifar, tmp_path: Path):
    root = tmp_path / "cache"
    data = load_cifar10(root)

    assert (root / CIFAR10.base_folder / "data_batch_5").is_file()
    assert data.train_x.shape == (10, 3, 32, 32) and data.train_x.dtype == torch.float32
    assert data.test_x.shape == (3, 3, 32, 32)
    assert data.train_y.dtype == torch.int64
    assert data.train_y.tolist() == tiny_cifar.train_y
    assert data.test_y.tolist() == tiny_cifar.test_y
    assert data.n_classes == 10 and data.name == "cifar10"
    torch.testing.assert_close(data.train_x, _expected_float(tiny_cifar.train_x))
    torch.testing.assert_close(data.test_x, _expected_float(tiny_cifar.test_x))


def test_channel_order_follows_the_byte_layout(tiny_cifar: TinyCifar, tmp_path: Path):
    root = tmp_path / "cache"
    load_cifar10(root)
    cached = torch.load(root / CACHE_NAME, weights_only=True)
    rows = tiny_cifar.train_x.reshape(len(tiny_cifar.train_x), 3072)
    x = cached["train_x"]
    assert x.dtype == torch.uint8
    # Byte k of a row is channel k // 1024, pixel (k % 1024) // 32, (k % 1024) % 32.
    for image, byte in [(0, 0), (0, 1023), (0, 1024), (3, 2048 + 32 * 5 + 7), (9, 3071)]:
        channel, pixel = divmod(byte, 1024)
        assert x[image, channel, pixel // 32, pixel % 32] == rows[image, byte]


def test_second_load_uses_the_cache(tiny_cifar: TinyCifar, tmp_path: Path):
    root = tmp_path / "cache"
    first = load_cifar10(root)
    assert (root / CACHE_NAME).is_file()
    shutil.rmtree(root / CIFAR10.base_folder)
    (root / CIFAR10.filename).unlink()

    second = load_cifar10(root, download=False)

    assert torch.equal(first.train_x, second.train_x)
    assert torch.equal(first.test_y, second.test_y)


def test_failed_download_raises_dataset_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Port 9 (discard) has no listener: the connection is refused at once.
    monkeypatch.setattr(CIFAR10, "url", "http://127.0.0.1:9/cifar-10-python.tar.gz")
    root = tmp_path / "empty"
    with pytest.raises(DatasetUnavailable) as info:
        load_cifar10(root)
    message = str(info.value)
    assert str(root) in message
    assert "download" in message
    assert "fednorm download-cifar10" in message
    assert not (root / CACHE_NAME).exists()


def test_missing_data_without_download_raises(tmp_path: Path):
    root = tmp_path / "empty"
    with pytest.raises(DatasetUnavailable, match="download=False") as info:
        load_cifar10(root, download=False)
    assert str(root) in str(info.value)
