"""Digits-Five from tiny copies in each domain's published format that the tests write: every
reader gives back the pixels and digits written, each file's label convention, the message of
a missing file, resizing and normalization, and the stratified subsets."""

from __future__ import annotations

import bz2
import gzip
import shutil
import struct

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.io import loadmat, savemat

from fednorm.data.arrays import DatasetUnavailable
from fednorm.data.digits5 import (
    DOMAINS,
    FILES,
    SPLITS,
    load_digits5,
    proportional_counts,
    read_domain,
    stratified_subset,
    to_float,
    write_sample_archives,
)
from fednorm.inputs import InputError

PER_CLASS = 3


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits5")
    return root, write_sample_archives(root, PER_CLASS)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("domain", DOMAINS)
def test_each_reader_gives_back_the_images_and_digits_written(sample, domain, split):
    root, written = sample
    x, y = read_domain(root, domain, split)
    images, digits = written[domain][split]
    # as published: MNIST-M's PNGs are 32×32 (Ganin's mnist_m.tar.gz), MNIST's 28×28
    side = {"mnist": 28, "svhn": 32, "usps": 16, "synthdigits": 32, "mnistm": 32}[domain]
    assert x.shape == (10 * PER_CLASS, 3, side, side) and x.dtype == torch.uint8
    assert y.dtype == torch.int64 and torch.equal(y, torch.from_numpy(digits))
    assert digits.tolist() != sorted(digits.tolist())  # file order kept, not sorted by label
    if domain == "usps":  # floats in [-1, 1]: torchvision truncates (v + 1)/2 · 255
        gap = torch.from_numpy(images) - x.double()
        assert bool((gap.abs() <= 1).all()) and gap.abs().max() > 0
    else:
        assert torch.equal(x, torch.from_numpy(images))
    if domain in ("mnist", "usps"):  # grey in all three channels
        assert torch.equal(x[:, 0], x[:, 1]) and torch.equal(x[:, 1], x[:, 2])


def test_each_file_keeps_its_own_label_convention(sample):
    root, _ = sample
    svhn = loadmat(root / FILES["svhn"]["train"][0])["y"].ravel()
    assert 10 in svhn and 0 not in svhn  # SVHN writes the digit 0 as 10
    assert torch.equal(read_domain(root, "svhn", "train")[1], torch.from_numpy(svhn % 10).long())
    synth = loadmat(root / FILES["synthdigits"]["train"][0])["y"].ravel()
    assert 0 in synth and 10 not in synth  # SynthDigits writes the digits themselves
    lines = bz2.decompress((root / FILES["usps"]["test"][0]).read_bytes()).decode().splitlines()
    stored = torch.tensor([int(line.split()[0]) for line in lines])
    assert sorted(set(stored.tolist())) == list(range(1, 11))  # USPS: 1..10 for the digits 0..9
    assert torch.equal(read_domain(root, "usps", "test")[1], stored - 1)
    assert all(len(line.split()) == 257 for line in lines)  # the label, then 256 idx:value


def test_mnist_files_are_big_endian_idx_and_a_swapped_file_is_refused(sample, tmp_path):
    root, _ = sample
    images, labels = (root / name for name in FILES["mnist"]["train"])
    assert struct.unpack(">IIII", gzip.decompress(images.read_bytes())[:16]) == (2051, 30, 28, 28)
    assert struct.unpack(">II", gzip.decompress(labels.read_bytes())[:8]) == (2049, 30)
    swapped = tmp_path / FILES["mnist"]["train"][0]
    swapped.parent.mkdir(parents=True)
    shutil.copy(labels, swapped)  # a label file where the images belong
    shutil.copy(labels, tmp_path / FILES["mnist"]["train"][1])
    with pytest.raises(ValueError, match="3 dimension"):
        read_domain(tmp_path, "mnist", "train")


def test_the_sample_images_carry_their_digit(sample):
    root, _ = sample
    x, y = read_domain(root, "svhn", "test")
    means = x.double().mean(dim=(1, 2, 3))  # noise around a grey level rising with the digit
    assert torch.equal(y[torch.argsort(means)], torch.sort(y).values)


@pytest.mark.parametrize(("domain", "stored", "allowed"), [
    ("svhn", 0, r"allowed: 1\.\.10"), ("synthdigits", 10, r"allowed: 0\.\.9")])
def test_a_label_outside_the_files_convention_is_an_error_naming_it(tmp_path, domain, stored,
                                                                    allowed):
    path = tmp_path / FILES[domain]["test"][0]
    path.parent.mkdir(parents=True)
    savemat(path, {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[1], [stored]])})
    with pytest.raises(ValueError, match=f"{path}: labels range over .*; {allowed}"):
        read_domain(tmp_path, domain, "test")


@pytest.mark.parametrize(("domain", "split", "index"), [
    (d, s, i) for d in DOMAINS for s in SPLITS for i in range(len(FILES[d][s]))])
def test_a_missing_file_is_one_line_naming_its_path_and_its_source(tmp_path, domain, split,
                                                                   index):
    write_sample_archives(tmp_path, per_class=1)
    gone = tmp_path / FILES[domain][split][index]
    if gone.is_dir():
        for png in gone.iterdir():
            png.unlink()
        gone.rmdir()
    else:
        gone.unlink()
    with pytest.raises(DatasetUnavailable) as info:
        load_digits5(tmp_path, (domain,))
    message = str(info.value)
    assert f"needs {gone}, which is missing" in message and "\n" not in message
    assert f"domain '{domain}' ({split})" in message and "http" in message


def test_the_floats_a_run_sees_are_fedbn_s_normalization_of_the_resized_images(sample):
    root, _ = sample
    data = load_digits5(root, image_size=28)
    assert list(data) == list(DOMAINS)
    mnist = data["mnist"]
    assert mnist.name == "digits5/mnist" and mnist.n_classes == 10
    x, _ = read_domain(root, "mnist", "train")  # 28 already: no resize
    assert torch.equal(mnist.train_x, (x.float() / 255 - 0.5) / 0.5)
    for domain, arrays in data.items():
        assert arrays.train_x.shape == (30, 3, 28, 28) and arrays.train_x.dtype == torch.float32
        assert arrays.test_x.shape == (30, 3, 28, 28)
        assert float(arrays.train_x.min()) >= -1 and float(arrays.train_x.max()) <= 1, domain


@pytest.mark.parametrize(("domain", "size"), [("svhn", 28), ("usps", 28), ("mnistm", 12)])
def test_resizing_is_within_one_grey_level_of_pil_s_bilinear_resize(sample, domain, size):
    # FedBN resizes with torchvision's Resize([28, 28]) on PIL images: PIL's bilinear filter
    root, _ = sample
    x, _ = read_domain(root, domain, "test")
    ours = (to_float(x, size).double() * 0.5 + 0.5) * 255
    assert ours.shape == (len(x), 3, size, size)
    pil = torch.tensor(np.stack([
        np.asarray(Image.fromarray(image.permute(1, 2, 0).numpy()).resize(
            (size, size), Image.Resampling.BILINEAR)).transpose(2, 0, 1) for image in x]))
    # PIL sums with fixed-point weights, then rounds to uint8: up to a grey level apart (1.0003
    # seen over 200 random 32 -> 28 images); area, nearest or, when shrinking, bilinear
    # without antialiasing are over ten levels off on these images
    assert float((ours - pil.double()).abs().max()) <= 1.01


def test_proportional_counts_are_each_share_s_floor_or_ceiling():
    sizes = torch.tensor([500, 300, 120, 50, 30, 0, 7, 1, 1000, 13])
    for n in (0, 1, 9, 10, 97, 743, 2021):
        counts = proportional_counts(sizes, n)
        share = sizes.double() * n / sizes.sum()
        assert int(counts.sum()) == n
        assert bool(((counts == share.floor()) | (counts == share.ceil())).all())
        assert bool((counts <= sizes).all())


def test_a_subset_is_stratified_seeded_and_the_same_each_time():
    labels = torch.arange(10).repeat_interleave(torch.tensor([40, 5, 20, 20, 10, 10, 10, 30,
                                                              25, 30]))
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(3))]
    keep = stratified_subset(labels, 50)
    assert len(set(keep.tolist())) == 50 and torch.equal(keep, keep.sort().values)
    expected = proportional_counts(torch.bincount(labels), 50)
    assert torch.equal(torch.bincount(labels[keep], minlength=10), expected)
    assert torch.equal(keep, stratified_subset(labels, 50))
    assert not torch.equal(keep, stratified_subset(labels, 50, seed=1))


def test_load_digits5_takes_the_subset_of_each_split(sample):
    root, _ = sample
    first = load_digits5(root, ("usps", "svhn"), image_size=16, n_train=20, n_test=10)
    again = load_digits5(root, ("usps", "svhn"), image_size=16, n_train=20, n_test=10)
    assert list(first) == ["usps", "svhn"]
    for domain, arrays in first.items():
        assert torch.bincount(arrays.train_y).tolist() == [2] * 10
        assert torch.bincount(arrays.test_y).tolist() == [1] * 10
        assert arrays.train_x.shape == (20, 3, 16, 16)
        assert torch.equal(arrays.train_x, again[domain].train_x)
        x, y = read_domain(root, domain, "train")
        keep = stratified_subset(y, 20)
        assert torch.equal(arrays.train_x, to_float(x[keep], 16))


def test_what_a_copy_cannot_give_is_an_error_naming_the_key(sample):
    root, _ = sample
    with pytest.raises(ValueError, match=r"key 'n_train' has value 31; allowed: at most the 30"):
        load_digits5(root, ("mnist",), n_train=31)
    with pytest.raises(ValueError, match=r"key 'domains' .*\['mnist_m'\] are not"):
        load_digits5(root, ("mnist", "mnist_m"))


def _truncated_gzip(root):
    path = root / FILES["mnist"]["train"][0]
    path.write_bytes(path.read_bytes()[:100])
    return "mnist", path, "EOFError"


def _idx_count_wrong(root):
    path = root / FILES["mnist"]["train"][0]
    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(data[:4] + struct.pack(">I", 99) + data[8:]))
    return "mnist", path, "99"


def _idx_counts_differ(root):
    path = root / FILES["mnist"]["train"][1]
    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(struct.pack(">II", 2049, 9) + data[8:17]))
    return "mnist", path, "30 images and"


def _html_as_mat(root):
    path = root / FILES["svhn"]["train"][0]
    path.write_text("<!DOCTYPE html><html><body>Not Found</body></html>\n")
    return "svhn", path, "cannot be read"


def _mat_without_x(root):
    path = root / FILES["synthdigits"]["train"][0]
    savemat(path, {"images": np.zeros((2, 2), np.uint8), "y": np.zeros((1, 1), np.uint8)})
    return "synthdigits", path, "KeyError"


def _short_usps_line(root):
    path = root / FILES["usps"]["train"][0]
    lines = bz2.decompress(path.read_bytes()).decode().splitlines()
    lines[3] = " ".join(lines[3].split()[:100])
    path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))
    return "usps", path, "cannot be read"


def _label_without_digit(root):
    path = root / FILES["mnistm"]["train"][0]
    lines = path.read_text().splitlines()
    lines[2] = lines[2].split()[0]
    path.write_text("\n".join(lines) + "\n")
    return "mnistm", path, "line 3"


def _png_not_an_image(root):
    folder = root / FILES["mnistm"]["train"][1]
    path = sorted(folder.iterdir())[1]
    path.write_text("<html>moved</html>")
    return "mnistm", path, "UnidentifiedImageError"


@pytest.mark.parametrize("damage", [
    _truncated_gzip, _idx_count_wrong, _idx_counts_differ, _html_as_mat, _mat_without_x,
    _short_usps_line, _label_without_digit, _png_not_an_image])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, damage):
    """A damaged copy of a published file (each as a download cut short, a page saved in its
    place or a hand edit leaves it) is one line: the domain, the file, what is wrong, and
    where to get the published one."""
    write_sample_archives(tmp_path, per_class=3)
    domain, path, problem = damage(tmp_path)
    with pytest.raises(InputError) as info:
        read_domain(tmp_path, domain, "train")
    message = str(info.value)
    assert "\n" not in message and str(path) in message and problem in message
    assert f"Digits-Five domain '{domain}'" in message and "to fix" in message


def test_a_damaged_dataset_cache_is_one_line_naming_it(tmp_path):
    """A decoded cache cut short (a full disk) is one line naming it and saying to delete it."""
    from fednorm.data.cifar import CACHE_NAME, load_cifar10

    (tmp_path / CACHE_NAME).write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(InputError, match=f"dataset cache {tmp_path / CACHE_NAME} cannot be "
                       "read .*; to fix: delete it") as info:
        load_cifar10(tmp_path, download=False)
    assert "\n" not in str(info.value)
