"""Tiny-ImageNet from an archive in the official layout that the test writes: labels of train
and val (val through its annotations file), the cache round trip, subsets, resizing, the
message when the archive is missing, and the partitions the FixBN study uses on it."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch

from fednorm.config import ConfigError, run_config, train_size
from fednorm.data import DatasetUnavailable, load_dataset, write_cache
from fednorm.data.partition import label_histogram, partition
from fednorm.data.tinyimagenet import (
    ARCHIVE_NAME,
    IMAGENET_MEAN,
    IMAGENET_STD,
    TOP,
    load_tinyimagenet,
    read_tinyimagenet_uint8,
    write_sample_archive,
)

CLASSES, TRAIN, VAL = 5, 6, 3


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    colours = write_sample_archive(root / ARCHIVE_NAME, CLASSES, TRAIN, VAL)
    return root, colours


def _check_labels(x, y, wnids, colours):
    """Each colour image's mean colour is nearest the colour of the wnid its label names; grey
    images (every third written) have three equal channels."""
    table = torch.tensor(np.stack([colours[w] for w in wnids]), dtype=torch.float32)  # by label
    grey = (x[:, 0] == x[:, 1]).all(dim=(1, 2)) & (x[:, 1] == x[:, 2]).all(dim=(1, 2))
    means = x[~grey].float().mean(dim=(2, 3))
    nearest = torch.cdist(means, table).argmin(dim=1)
    assert torch.equal(nearest, y[~grey])
    return int(grey.sum())


def test_train_and_val_labels_follow_the_folders_and_the_annotations_file(archive):
    root, colours = archive
    train_x, train_y, test_x, test_y, wnids = read_tinyimagenet_uint8(root / ARCHIVE_NAME)
    assert wnids == sorted(colours) and list(colours) != wnids  # label c is the c-th sorted wnid
    assert train_x.shape == (CLASSES * TRAIN, 3, 64, 64) and train_x.dtype == torch.uint8
    assert test_x.shape == (CLASSES * VAL, 3, 64, 64)
    assert torch.equal(torch.bincount(train_y), torch.full((CLASSES,), TRAIN))
    assert torch.equal(torch.bincount(test_y), torch.full((CLASSES,), VAL))
    assert _check_labels(train_x, train_y, wnids, colours) == CLASSES * 2  # k = 2, 5 of 6
    assert _check_labels(test_x, test_y, wnids, colours) == CLASSES * VAL // 3


def test_a_val_label_outside_wnids_is_an_error_naming_the_file(tmp_path):
    good = tmp_path / "good.zip"
    write_sample_archive(good, 2, 1, 1)
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("val_annotations.txt"):
                data = data.replace(b"\tn", b"\tx", 1)
            dst.writestr(item, data)
    with pytest.raises(ValueError, match=r"labels val_\d\.JPEG with 'x"):
        read_tinyimagenet_uint8(bad)


def test_the_cache_round_trip_and_the_floats_a_run_sees(archive):
    root, _ = archive
    cache = write_cache("tinyimagenet", root)
    assert cache.name == "tinyimagenet_uint8.pt"
    train_x, train_y, test_x, test_y, wnids = read_tinyimagenet_uint8(root / ARCHIVE_NAME)
    saved = torch.load(cache, weights_only=True)
    for key, value in dict(train_x=train_x, train_y=train_y, test_x=test_x,
                           test_y=test_y).items():
        assert torch.equal(saved[key], value)
    assert saved["wnids"] == wnids
    data = load_tinyimagenet(root)
    mean = torch.tensor(IMAGENET_MEAN)[:, None, None]
    std = torch.tensor(IMAGENET_STD)[:, None, None]
    torch.testing.assert_close(data.train_x, (train_x / 255.0 - mean) / std)
    assert data.n_classes == CLASSES and torch.equal(data.test_y, test_y)
    small = load_tinyimagenet(root, image_size=16)
    area = torch.nn.functional.avg_pool2d(train_x.float() / 255, 4)  # area resize 64 -> 16
    torch.testing.assert_close(small.train_x, (area - mean) / std)


def test_a_run_config_takes_a_balanced_subset_and_counts_its_epochs_on_it(archive):
    root, _ = archive
    cfg = run_config({"dataset": "tinyimagenet", "n_train": 10, "n_test": 5, "image_size": 8,
                      "model": "resnet18", "partition": "iid", "heterogeneity": None})
    data = load_dataset(cfg, root)
    assert torch.equal(torch.bincount(data.train_y), torch.full((CLASSES,), 2))
    assert torch.equal(torch.bincount(data.test_y), torch.ones(CLASSES, dtype=torch.long))
    assert data.train_x.shape == (10, 3, 8, 8)
    assert train_size(cfg.identity()) == 10
    assert train_size({"dataset": "tinyimagenet"}) == 100_000
    too_many = cfg.identity() | {"n_train": 1000}
    with pytest.raises(ValueError, match=r"key 'n_train' has value 1000.*30 images"):
        load_dataset(run_config(too_many), root)


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("image_size", 96, "<= 64"), ("n_train", 100_001, "at most 100000"),
    ("n_test", 10_001, "at most 10000")])
def test_what_tiny_imagenet_cannot_give_is_a_config_error(key, value, allowed):
    with pytest.raises(ConfigError, match=f"key '{key}' has value {value}; allowed: .*{allowed}"):
        run_config({"dataset": "tinyimagenet", key: value, "partition": "iid",
                    "heterogeneity": None})


def test_offline_without_the_archive_one_message_says_where_to_put_it(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr("urllib.request.urlopen", refuse)
    with pytest.raises(DatasetUnavailable, match=f"copy {ARCHIVE_NAME} .* into {tmp_path}"):
        write_cache("tinyimagenet", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_shards_of_20_percent_of_the_classes_per_client():
    # the FixBN setting: 10 clients, 40 of the 200 classes each (two shards of 250 per class)
    labels = torch.arange(200).repeat_interleave(500)
    parts = partition(labels, "shards", 10, 40, seed=0)
    hist = label_histogram(labels, parts, 200)
    assert all(len(p) == 10_000 for p in parts)
    assert int((hist > 0).sum(1).max()) <= 40 and int((hist > 0).sum(1).min()) >= 20
    assert bool((hist.sum(0) == 500).all())  # every image dealt once
    assert TOP == "tiny-imagenet-200"
