"""fednorm.rng: a Python integer folded into a key gives the same bits as the same integer
as a tensor, so the engine's device step counter draws exactly what a Python step drew."""

from __future__ import annotations

import pytest
import torch

from fednorm import rng


def tensor_fold(key: torch.Tensor, d: int) -> torch.Tensor:
    """fold as it was written before Python integers were hashed in Python: every integer
    made a tensor first."""
    return rng.mix(key ^ rng.mix((torch.as_tensor(d) + rng._GOLDEN) & rng._MASK))


@pytest.mark.parametrize("d", [0, 1, -1, 7, 2**31 - 1, 2**32 - 1, 2**40 + 3, -(2**33)])
def test_fold_of_an_int_equals_fold_of_its_tensor(d):
    keys = rng.run_key(torch.tensor([0, 1, 12345, 2**31]))
    assert torch.equal(rng.fold(keys, d), tensor_fold(keys, d))
    assert torch.equal(rng.fold(keys, d), rng.fold(keys, torch.tensor(d)))


def test_fold_broadcasts_a_tensor_of_steps_against_the_keys():
    """(R, 1) keys and (n,) clients: (R, n) keys, each its own fold."""
    keys = rng.run_key(torch.tensor([3, 4]))[:, None]
    clients = torch.arange(5)
    folded = rng.fold(keys, torch.tensor(9), clients)
    for r in range(2):
        for i in range(5):
            assert folded[r, i] == rng.fold(rng.fold(keys[r, 0], 9), i)
