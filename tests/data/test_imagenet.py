import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision.transforms import functional as tf

from fednorm import rng
from fednorm.config import ConfigError, run_config, train_size
from fednorm.data import load_dataset
from fednorm.data.arrays import DatasetUnavailable, hold_out
from fednorm.data.augment import resized_crop_boxes
from fednorm.data.imagenet import (
    StreamedImages,
    decode_centre,
    decode_crop_flip,
    load_imagenet,
    normalize,
    read_folder,
    read_imagenet,
    write_sample_tree,
)
from fednorm.data.partition import partition
from fednorm.fl.batches import ClientBatches
from fednorm.fl.streamed import StreamedBatches

WNIDS = ["n02000000", "n01000000", "n03000000"]  # written unsorted: class 0 is n01000000


def write_tree(data: str, train_per_class: int = 4, val_per_class: int = 2) -> None:
    """data/imagenet/{train,val}/<wnid>/*.JPEG: JPEGs of several sizes (not square), one grey,
    each a grey level of its class (60 + 60 c in every channel), and a file that is not an image."""
    gen = np.random.default_rng(0)
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for wnid in WNIDS:
            c = sorted(WNIDS).index(wnid)
            folder = Path(data, "imagenet", split, wnid)
            folder.mkdir(parents=True)
            (folder / "notes.txt").write_text("not an image")
            for k in range(count):
                h, w = 20 + 4 * k, 28 - 2 * k
                pixels = np.clip(gen.normal(0, 8, (h, w, 3)) + 60 + 60 * c, 0, 255)
                image = Image.fromarray(pixels.astype(np.uint8))
                (image.convert("L") if k == 1 else image).save(folder / f"{wnid}_{k}.JPEG")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    write_tree(str(data))
    return data


def test_labels_are_imagefolders_for_train_and_val(tree):
    train, val = read_imagenet(tree)
    assert train.wnids == tuple(sorted(WNIDS))
    for split, files in (("train", train), ("val", val)):
        reference = torchvision.datasets.ImageFolder(str(tree / "imagenet" / split))
        assert list(zip(files.paths, files.labels.tolist(), strict=True)) == reference.samples
    assert train.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_a_val_class_not_in_train_and_a_missing_tree_are_errors(tree, tmp_path):
    with pytest.raises(ValueError, match="'n03000000' is not among the 2 classes"):
        read_folder(tree / "imagenet", "val", WNIDS[:2])
    with pytest.raises(DatasetUnavailable, match="never downloads it") as err:
        read_imagenet(tmp_path)
    assert f"{tmp_path / 'imagenet'}/train/<wnid>/*.JPEG" in str(err.value)


def test_crop_and_flip_against_torchvision(tree):
    path = read_imagenet(tree)[0].paths[0]  # 20 x 28
    u = [0.3, 0.6, 0.2, 0.9, 0.7]  # no flip
    out = decode_crop_flip(path, u, 16)
    assert out.shape == (3, 16, 16) and out.dtype == np.uint8
    flipped = decode_crop_flip(path, [*u[:4], 0.2], 16)
    assert (flipped == out[:, :, ::-1]).all()
    # torchvision's RandomResizedCrop given the same box: crop, then resize (PIL, bilinear);
    # the box-resize reads a pixel beyond the box at its edges, so compare inside
    with Image.open(path) as image:
        top, left, h, w = resized_crop_boxes(image.height, image.width,
                                             torch.tensor([u[:4]])).tolist()[0]
        ref = np.asarray(tf.resized_crop(image.convert("RGB"), top, left, h, w, [16, 16]))
    inner = np.abs(out.transpose(1, 2, 0)[2:-2, 2:-2].astype(int) - ref[2:-2, 2:-2])
    assert inner.max() <= 3


def test_whole_box_is_the_resized_image(tree):
    path = read_imagenet(tree)[0].paths[4]  # 20 x 28
    # u0 = 1: area 100 %; ratio 28/20 = exp(log 3/4 + u1 log 16/9)
    u1 = (np.log(28 / 20) - np.log(3 / 4)) / np.log(16 / 9)
    out = decode_crop_flip(path, [1 - 1e-9, u1, 0.0, 0.0, 0.9], 16)
    with Image.open(path) as image:
        ref = np.asarray(image.convert("RGB").resize((16, 16), Image.Resampling.BILINEAR))
    assert (out.transpose(1, 2, 0) == ref).all()


def sampler(files, seeds, workers=0, n=3):
    parts = [partition(files.labels, "shards", n, 1, s) for s in seeds]
    return StreamedBatches(files, parts, 2, seeds, 16, workers=workers), parts


def test_batches_come_from_the_clients_parts_with_their_labels(tree):
    files = read_imagenet(tree)[0]
    batches, parts = sampler(files, [3, 4])
    for step in range(3):
        x, y = batches.sample(step)
        assert x.shape == (2, 6, 3, 16, 16) and x.dtype == torch.float32
        idx = batches.indices(step).view(2, 3, 2)
        for r in range(2):
            for i in range(3):
                assert set(idx[r, i].tolist()) <= set(parts[r][i].tolist())
        assert torch.equal(y, files.labels[idx.flatten(1)])
        # each image shows its class's grey level 60 + 60 c, normalized
        level = (60 + 60 * y).to(torch.uint8)[..., None, None, None].expand(-1, -1, 3, 1, 1)
        assert torch.allclose(x.mean((3, 4)), normalize(level)[..., 0, 0], atol=0.2)


def test_draws_are_those_of_the_in_memory_sampler(tree):
    files = read_imagenet(tree)[0]
    batches, parts = sampler(files, [5])
    memory = ClientBatches(torch.zeros(len(files.labels), 1), files.labels, parts, 2, [5])
    for step in range(2):
        _, y = batches.sample(step)
        assert torch.equal(y, memory.sample(step)[1])


def test_same_seed_same_batches_whatever_the_workers_and_order(tree):
    files = read_imagenet(tree)[0]
    alone = sampler(files, [1])[0]
    first = [alone.sample(t)[0][0] for t in range(3)]
    bundled = sampler(files, [0, 1], workers=2)[0]
    for t in (0, 1, 2, 1):  # in order through the workers, then a step asked again
        assert torch.equal(bundled.sample(t)[0][1], first[t])
    assert not torch.equal(bundled.sample(0)[0][0], first[0])  # another seed draws otherwise
    kept = bundled.select(torch.tensor([1]))
    assert torch.equal(kept.sample(2)[0][0], first[2])


def test_config_takes_all_of_imagenet_and_loads_it_streamed(tree, tmp_path):
    values = {"dataset": "imagenet", "model": "resnet18", "image_size": 16, "steps": 2,
              "eval_every": 2, "lr_milestones": [], "lr": [0.1], "augment": "resized_crop_flip"}
    with pytest.raises(ConfigError, match="key 'n_train' has value 10; allowed: null"):
        run_config({**values, "n_train": 10})
    assert train_size({"dataset": "imagenet"}) == 1_281_167
    cfg = run_config(values)
    with pytest.raises(DatasetUnavailable, match="never downloads it"):
        load_dataset(cfg, tmp_path)
    data = load_dataset(cfg, tree, workers=3)
    assert isinstance(data, StreamedImages)
    assert (data.n_classes, data.image_size, data.workers, data.dtype) == (3, 16, 3,
                                                                          torch.float32)
    assert torch.equal(data.train_y, read_imagenet(tree)[0].labels)
    assert data.test_y.tolist() == [0, 0, 1, 1, 2, 2] and data.val_y is None
    with pytest.raises(ValueError, match="data workers has value -1; allowed: an integer >= 0"):
        load_dataset(cfg, tree, workers=-1)


def test_centre_decode_is_torchvisions_resize_and_centre_crop(tree):
    """The evaluation transform: shorter side to round(s * 256 / 224), centre s x s, as
    torchvision's Resize + CenterCrop on the PIL image (bit for bit), at several sizes."""
    for path in read_imagenet(tree)[0].paths[:3]:  # 20 x 28, 24 x 26 (grey), 28 x 24
        with Image.open(path) as image:
            rgb = image.convert("RGB")
        for size in (8, 16, 20):
            ref = tf.center_crop(tf.resize(rgb, round(size * 256 / 224)), [size, size])
            out = decode_centre(path, size)
            assert out.shape == (3, size, size) and out.dtype == np.uint8
            assert (out.transpose(1, 2, 0) == np.asarray(ref)).all(), (path, size)


def test_streamed_chunks_are_the_test_files_in_order_whatever_the_workers(tree):
    data = load_imagenet(tree, 8, workers=0)
    chunks = list(data.chunks("test", 4))
    assert [len(y) for _, y in chunks] == [4, 2]
    x, y = (torch.cat(t) for t in zip(*chunks, strict=True))
    assert torch.equal(y, data.test_y)
    ref = torch.stack([normalize(torch.from_numpy(decode_centre(p, 8).copy()))
                       for p in data.test.paths])
    assert torch.equal(x, ref)
    again = torch.cat([xb for xb, _ in dataclasses.replace(data, workers=2).chunks("test", 4)])
    assert torch.equal(again, x)
    with pytest.raises(ValueError, match="split 'val' has no images"):
        next(data.chunks("val", 4))


def test_hold_out_splits_the_file_lists(tree):
    data = load_imagenet(tree, 8, workers=0)
    held = hold_out(data, 0.25)  # one of 4 training images of each class
    assert held.val_y.tolist() == [0, 1, 2] and len(held.train.paths) == 9
    assert set(held.train.paths) | set(held.val.paths) == set(data.train.paths)
    for files in (held.train, held.val):
        assert [data.train.paths.index(p) for p in files.paths] == sorted(
            data.train.paths.index(p) for p in files.paths)
    assert len(next(held.chunks("val", 8))[1]) == 3


def test_the_sample_tree_is_an_imagenet_tree_of_varied_jpegs(tmp_path):
    write_sample_tree(tmp_path, n_classes=3, train_per_class=4, val_per_class=2)
    train, val = read_imagenet(tmp_path)
    assert len(train.wnids) == 3 and train.wnids == tuple(sorted(train.wnids))
    assert train.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert val.labels.tolist() == [0, 0, 1, 1, 2, 2]
    sizes = set()
    for path in train.paths:
        with Image.open(path) as image:
            sizes.add(image.size)
    assert len(sizes) > 6  # of every size


def test_the_probe_draws_its_own_crops(tree):
    """A sampler on the PROBE stream takes other images and other crops than the training
    sampler (same seed, same step), and decodes the step asked without reading ahead."""
    files = read_imagenet(tree)[0]
    parts = [partition(files.labels, "shards", 3, 1, 0)]
    train = StreamedBatches(files, parts, 2, [0], 16, workers=0)
    probe = StreamedBatches(files, parts, 2, [0], 16, workers=2, stream=rng.PROBE,
                            read_ahead=False)
    assert not torch.equal(train.augment_draws(1, 5), probe.augment_draws(1, 5))
    x, y = probe.sample(1)
    assert x.shape == (1, 6, 3, 16, 16) and torch.equal(y, files.labels[probe.indices(1)])
    alone = StreamedBatches(files, parts, 2, [0], 16, workers=0, stream=rng.PROBE,
                            read_ahead=False)
    assert torch.equal(alone.sample(1)[0], x)
