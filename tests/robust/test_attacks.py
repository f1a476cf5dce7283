"""Attacks against their formulas on hand-made vectors."""

from __future__ import annotations

import math

import pytest
import torch

from fednorm.robust.attacks import (
    ATTACKS,
    a_little_is_enough,
    alie_z,
    attack,
    fall_of_empires,
    keep_variance_valid,
    no_attack,
    sign_flip,
)

HONEST = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])  # mean [3, 4], sample std [2, 2]

# ALIE, n = 10, f = 3: s = floor(10/2 + 1) - 3 = 3, so z = Φ⁻¹((10 - 3)/10) = Φ⁻¹(0.7).
# Φ⁻¹(0.7) = √2·erf⁻¹(2·0.7 - 1) = √2·erf⁻¹(0.4) = 0.5244005127080407 (standard normal table).
PHI_INV_0_7 = 0.5244005127


def test_sign_flip_sends_minus_the_honest_mean() -> None:
    out = sign_flip(HONEST, 2)
    assert out.shape == (2, 2)
    torch.testing.assert_close(out, torch.tensor([[-3.0, -4.0], [-3.0, -4.0]]))


def test_fall_of_empires_sends_minus_eps_times_the_mean() -> None:
    torch.testing.assert_close(fall_of_empires(HONEST, 1), torch.tensor([[-3.3, -4.4]]))
    torch.testing.assert_close(fall_of_empires(HONEST, 1, eps=2.0), torch.tensor([[-6.0, -8.0]]))


def test_alie_with_given_z_is_mean_plus_z_sample_std() -> None:
    out = a_little_is_enough(HONEST, 2, z=1.5)
    torch.testing.assert_close(out, torch.tensor([[6.0, 7.0], [6.0, 7.0]]))


def test_alie_z_matches_the_normal_quantile() -> None:
    assert alie_z(10, 3) == pytest.approx(PHI_INV_0_7, abs=1e-9)


def test_alie_without_z_uses_n_and_f() -> None:
    honest = torch.arange(14.0).reshape(7, 2)
    expected = honest.mean(0) + PHI_INV_0_7 * honest.std(0, correction=1)
    out = a_little_is_enough(honest, 3, n=10)
    assert out.shape == (3, 2)
    torch.testing.assert_close(out, expected.expand(3, -1))
    torch.testing.assert_close(a_little_is_enough(honest, 3), out)  # n defaults to 7 + 3


def test_no_attack_sends_nothing() -> None:
    assert no_attack(HONEST, 0).shape == (0, 2)


def test_dispatcher_runs_each_attack_with_its_params() -> None:
    assert set(ATTACKS) == {"none", "sf", "foe", "alie"}
    torch.testing.assert_close(attack("sf", HONEST, 1), sign_flip(HONEST, 1))
    torch.testing.assert_close(attack("foe", HONEST, 1, eps=3.0), torch.tensor([[-9.0, -12.0]]))
    torch.testing.assert_close(attack("alie", HONEST, 1, z=1.0), torch.tensor([[5.0, 6.0]]))


def test_unknown_attack_name_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"name.*'alie'.*'bogus'"):
        attack("bogus", HONEST, 1)


@pytest.mark.parametrize("f", [-1, 3, 5])
def test_attacks_reject_f_outside_the_byzantine_minority(f: int) -> None:
    # honest has 3 rows, so n = 3 + f; f = 3 gives n = 6 and f >= n/2.
    for fn in (sign_flip, fall_of_empires, a_little_is_enough):
        with pytest.raises(ValueError, match=rf"f must satisfy 0 <= f < n/2, got f={f}"):
            fn(HONEST, f)


def test_alie_rejects_inconsistent_n_and_non_finite_z() -> None:
    with pytest.raises(ValueError, match="n=11"):
        a_little_is_enough(HONEST, 1, n=11)
    with pytest.raises(ValueError, match="z=nan"):
        a_little_is_enough(HONEST, 1, z=math.nan)


def test_alie_z_rejects_invalid_f() -> None:
    with pytest.raises(ValueError, match="f=5"):
        alie_z(10, 5)


def test_keep_variance_valid_clamps_negatives_and_keeps_valid_values() -> None:
    var = torch.tensor([-2.0, 0.0, 1e-6, 0.5, 3.0])
    out = keep_variance_valid(var)
    torch.testing.assert_close(out, torch.tensor([1e-5, 1e-5, 1e-5, 0.5, 3.0]))
    assert torch.isfinite(1 / torch.sqrt(out + 1e-5)).all()
    torch.testing.assert_close(keep_variance_valid(var, floor=0.1)[3:], var[3:])
    with pytest.raises(ValueError, match="floor=0"):
        keep_variance_valid(var, floor=0.0)
