"""fednorm.data.arrays.hold_out: a stratified validation split of fixed seed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fednorm.data.arrays import hold_out
from fednorm.data.synthetic import colour_classes

DATA = colour_classes(n_train=200, n_test=20, image_size=4, seed=0)


def test_hold_out_moves_a_stratified_fraction_of_each_class_and_keeps_the_rest_in_order():
    held = hold_out(DATA, 0.2)
    train_counts = torch.bincount(DATA.train_y, minlength=10)
    val_counts = torch.bincount(held.val_y, minlength=10)
    assert val_counts.tolist() == [round(0.2 * int(c)) for c in train_counts]
    assert len(held.train_y) + len(held.val_y) == len(DATA.train_y)
    # every image lands in exactly one part; the kept ones in their original order
    rows = {tuple(x.flatten().tolist()): i for i, x in enumerate(DATA.train_x)}
    kept = [rows[tuple(x.flatten().tolist())] for x in held.train_x]
    held_out = [rows[tuple(x.flatten().tolist())] for x in held.val_x]
    assert kept == sorted(kept) and not set(kept) & set(held_out)
    assert torch.equal(held.test_x, DATA.test_x)


def test_hold_out_is_the_same_for_every_call_and_nothing_at_zero():
    a, b = hold_out(DATA, 0.1), hold_out(DATA, 0.1)
    assert torch.equal(a.val_x, b.val_x) and torch.equal(a.train_y, b.train_y)
    assert hold_out(DATA, 0.0) is DATA


def test_hold_out_twice_is_an_error():
    with pytest.raises(ValueError, match="already held out"):
        hold_out(hold_out(DATA, 0.1), 0.1)


def test_under_feature_shift_hold_out_is_stratified_by_class_and_domain():
    """Each (class, domain) cell gives round(fraction x its size) images, so every domain is
    in the validation set in its training share; without domains the same images as ever."""
    domain = torch.arange(len(DATA.train_y)) % 3
    shifted = dataclasses.replace(DATA, domains=("a", "b", "c"), train_domain=domain,
                                  test_domain=torch.zeros(len(DATA.test_y), dtype=torch.int64))
    held = hold_out(shifted, 0.2)
    for c in range(10):
        for d in range(3):
            size = int(((DATA.train_y == c) & (domain == d)).sum())
            got = int(((held.val_y == c) & (held.val_domain == d)).sum())
            assert got == round(0.2 * size), (c, d)
    assert len(held.train_domain) == len(held.train_y)
    assert torch.equal(hold_out(DATA, 0.2).val_x, hold_out(DATA, 0.2).val_x)
