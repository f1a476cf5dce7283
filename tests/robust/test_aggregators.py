"""Robust aggregators: formulas, agreement, robustness to outliers, input errors."""

from __future__ import annotations

import pytest
import torch

from fednorm.robust.aggregators import (
    AGGREGATORS,
    aggregate,
    check_byzantine,
    coordinate_median,
    mean,
    nnm,
    trimmed_mean,
)

ROBUST = ["median", "trimmed_mean"]


def _col(values: list[float]) -> torch.Tensor:
    return torch.tensor(values).unsqueeze(1)


def test_mean() -> None:
    torch.testing.assert_close(
        mean(torch.tensor([[1.0, 2.0], [3.0, 6.0]])), torch.tensor([2.0, 4.0])
    )


def test_median_of_an_even_count_averages_the_two_middle_values() -> None:
    torch.testing.assert_close(coordinate_median(_col([20.0, 1.0, 10.0, 2.0])), torch.tensor([6.0]))


def test_median_of_an_odd_count_is_the_middle_value() -> None:
    x = torch.tensor([[5.0, -1.0], [1.0, 7.0], [3.0, 0.0]])
    torch.testing.assert_close(coordinate_median(x), torch.tensor([3.0, 0.0]))


def test_trimmed_mean_drops_values_not_identities() -> None:
    out = trimmed_mean(_col([1.0, 9.0, 1.0, 5.0, 1.0]), 1)
    torch.testing.assert_close(out, torch.tensor([7.0 / 3.0]))


def test_trimmed_mean_with_f_zero_is_the_mean() -> None:
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(trimmed_mean(x, 0), x.mean(0))


def test_nnm_maps_each_vector_to_its_cluster_mean() -> None:
    # n = 7, f = 3: cluster a has n - f = 4 vectors, so each becomes a's mean. Cluster b has 3,
    # so each b vector mixes all of b with the a vector nearest to b, a[3] = (0.1, 0.1).
    a = torch.tensor([[0.0, 0.0], [0.1, 0.0], [0.0, 0.05], [0.1, 0.1]])
    b = torch.tensor([[100.0, 100.0], [100.3, 100.0], [100.0, 99.8]])
    x = torch.cat([b[:2], a, b[2:]])  # interleave so clusters are not contiguous
    out = nnm(x, 3)
    a_mix = a.mean(0)
    b_mix = (b.sum(0) + a[3]) / 4
    expected = torch.stack([b_mix, b_mix, a_mix, a_mix, a_mix, a_mix, b_mix])
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected)


def test_nnm_breaks_distance_ties_by_index() -> None:
    # Around x = 0, the points -1 and +1 tie; with n - f = 2 the lower index (-1, row 1) wins.
    x = _col([0.0, -1.0, 1.0])
    torch.testing.assert_close(nnm(x, 1), _col([-0.5, -0.5, 0.5]))


def test_nnm_with_f_zero_averages_everything() -> None:
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(nnm(x, 0), x.mean(0).expand(5, -1))


def test_aggregate_dispatches_by_name() -> None:
    assert set(AGGREGATORS) == {"mean", "median", "trimmed_mean"}
    x = _col([1.0, 2.0, 10.0, 20.0, 30.0])
    torch.testing.assert_close(aggregate(x, "mean", 1), torch.tensor([12.6]))
    torch.testing.assert_close(aggregate(x, "median", 1), torch.tensor([10.0]))
    torch.testing.assert_close(aggregate(x, "trimmed_mean", 1), torch.tensor([32.0 / 3.0]))


@pytest.mark.parametrize("name", ROBUST)
@pytest.mark.parametrize("use_nnm", [False, True])
def test_robust_aggregators_return_the_common_value(name: str, use_nnm: bool) -> None:
    value = torch.tensor([0.5, -2.0, 3.25])
    x = value.expand(10, -1).clone()
    torch.testing.assert_close(aggregate(x, name, 3, nnm=use_nnm), value)


@pytest.mark.parametrize("name", ROBUST)
@pytest.mark.parametrize("use_nnm", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_robust_aggregators_stay_within_the_honest_range(
    name: str, use_nnm: bool, seed: int
) -> None:
    n, f, d = 10, 3, 5
    honest = torch.randn(n - f, d, generator=torch.Generator().manual_seed(seed))
    x = torch.cat([honest, torch.full((f, d), 1e6)])
    x = x[torch.randperm(n, generator=torch.Generator().manual_seed(seed + 100))]
    out = aggregate(x, name, f, nnm=use_nnm)
    lo, hi = honest.min(0).values, honest.max(0).values
    assert torch.all(out >= lo - 1e-5) and torch.all(out <= hi + 1e-5)


def test_mean_is_not_robust() -> None:
    x = torch.cat([torch.zeros(7, 2), torch.full((3, 2), 1e6)])
    assert torch.all(aggregate(x, "mean", 3) > 1e5)


@pytest.mark.parametrize(("n", "f"), [(10, 5), (10, 6), (7, 4), (4, -1)])
def test_check_byzantine_rejects_f_outside_the_minority(n: int, f: int) -> None:
    with pytest.raises(ValueError, match=rf"f must satisfy 0 <= f < n/2, got f={f} with n={n}"):
        check_byzantine(n, f)


def test_check_byzantine_accepts_a_minority() -> None:
    check_byzantine(10, 0)
    check_byzantine(10, 4)
    check_byzantine(7, 3)


@pytest.mark.parametrize("name", ["mean", "median", "trimmed_mean"])
@pytest.mark.parametrize("f", [-1, 5])
def test_aggregate_rejects_invalid_f(name: str, f: int) -> None:
    with pytest.raises(ValueError, match=rf"f=.?{f}"):
        aggregate(torch.zeros(10, 2), name, f)


def test_nnm_rejects_invalid_f() -> None:
    with pytest.raises(ValueError, match="f=5"):
        nnm(torch.zeros(10, 2), 5)


def test_unknown_aggregator_name_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"name.*'median'.*'krum'"):
        aggregate(torch.zeros(4, 2), "krum", 1)


@pytest.mark.parametrize(("n", "f"), [(4, 2), (5, 3), (3, -1)])
def test_trimmed_mean_needs_n_above_2f(n: int, f: int) -> None:
    with pytest.raises(ValueError, match=rf"f.*f={f} with n={n}"):
        trimmed_mean(torch.zeros(n, 2), f)


def test_aggregators_reject_non_matrix_input() -> None:
    with pytest.raises(ValueError, match=r"x must be a 2-D .*shape \(3,\)"):
        coordinate_median(torch.zeros(3))
