"""Partitions: disjointness, sizes, label skew and determinism of every scheme."""

from __future__ import annotations

import pytest
import torch

from fednorm.data.partition import (
    PARTITIONS,
    dirichlet,
    gamma_similarity,
    iid,
    label_histogram,
    partition,
    shards,
)


def balanced_labels(n_classes: int = 10, per_class: int = 100) -> torch.Tensor:
    return torch.arange(n_classes).repeat_interleave(per_class)


def assert_valid(parts: list[torch.Tensor], n_samples: int, n_clients: int) -> None:
    """Sorted int64 index sets into range(n_samples), pairwise disjoint."""
    assert len(parts) == n_clients
    for part in parts:
        assert part.dtype == torch.int64
        assert torch.equal(part, torch.sort(part).values)
    joined = torch.cat(parts)
    assert joined.min() >= 0 and joined.max() < n_samples
    assert len(torch.unique(joined)) == len(joined)


def presence(labels: torch.Tensor, parts: list[torch.Tensor]) -> torch.Tensor:
    """Number of distinct classes each client holds."""
    return (label_histogram(labels, parts, int(labels.max()) + 1) > 0).sum(dim=1)


# Shuffled labels, so tests do not depend on the data arriving sorted.
SHUFFLED = balanced_labels()[torch.randperm(1000, generator=torch.Generator().manual_seed(7))]

EQUAL_SIZE_SCHEMES = [("iid", None), ("gamma", 0.0), ("gamma", 0.37), ("gamma", 1.0),
                      ("shards", 2.0)]


@pytest.mark.parametrize(("scheme", "heterogeneity"), EQUAL_SIZE_SCHEMES)
def test_equal_size_schemes_are_disjoint_and_equal(scheme: str, heterogeneity: float | None):
    parts = partition(SHUFFLED, scheme, 7, heterogeneity, seed=3)
    assert_valid(parts, 1000, 7)
    sizes = {len(p) for p in parts}
    assert len(sizes) == 1
    # At most n-1 indices are dropped per pool (two pools for gamma).
    assert 1000 - 2 * 6 <= 7 * sizes.pop() <= 1000


def test_iid_keeps_all_when_divisible():
    parts = iid(SHUFFLED, 10, seed=0)
    assert torch.equal(torch.sort(torch.cat(parts)).values, torch.arange(1000))


def test_gamma_zero_gives_one_class_per_client():
    parts = gamma_similarity(SHUFFLED, 10, 0.0, seed=1)
    hist = label_histogram(SHUFFLED, parts, 10)
    # Client i holds the i-th chunk of the label-sorted data: all 100 images of class i.
    assert torch.equal(hist, 100 * torch.eye(10, dtype=torch.int64))


def test_gamma_one_gives_every_class_near_ten_percent():
    parts = gamma_similarity(SHUFFLED, 10, 1.0, seed=1)
    hist = label_histogram(SHUFFLED, parts, 10)
    # Binomial(100, 0.1) per cell has sd 3; [1, 20] is a > 3 sd band around 10.
    assert hist.min() >= 1 and hist.max() <= 20


@pytest.mark.parametrize("gamma", [0.1, 0.3, 0.7])
def test_gamma_own_class_fraction(gamma: float):
    labels = balanced_labels(per_class=1000)
    parts = gamma_similarity(labels, 10, gamma, seed=5)
    hist = label_histogram(labels, parts, 10).double()
    own = hist.diagonal() / hist.sum(dim=1)
    assert torch.equal(hist.argmax(dim=1), torch.arange(10))
    assert abs(own.mean().item() - ((1 - gamma) + gamma / 10)) < 0.05


@pytest.mark.parametrize("gamma", [-0.1, 1.5, float("nan")])
def test_gamma_out_of_range_is_rejected(gamma: float):
    with pytest.raises(ValueError, match=rf"gamma.*{gamma}") as info:
        gamma_similarity(SHUFFLED, 10, gamma, seed=0)
    assert "[0, 1]" in str(info.value)


@pytest.mark.parametrize(("scheme", "heterogeneity"),
                         [("iid", None), ("gamma", 0.2), ("dirichlet", 0.5), ("shards", 2)])
def test_same_seed_same_split_other_seed_other_split(scheme: str, heterogeneity: float | None):
    first = partition(SHUFFLED, scheme, 5, heterogeneity, seed=11)
    again = partition(SHUFFLED, scheme, 5, heterogeneity, seed=11)
    other = partition(SHUFFLED, scheme, 5, heterogeneity, seed=12)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(
        len(a) == len(b) and torch.equal(a, b) for a, b in zip(first, other, strict=True)
    )


def test_partition_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    partition(SHUFFLED, "dirichlet", 5, 0.5, seed=1)
    partition(SHUFFLED, "gamma", 5, 0.5, seed=1)
    assert torch.equal(torch.rand(3), expected)


def test_dirichlet_covers_everything_and_respects_min_size():
    parts = dirichlet(SHUFFLED, 10, 0.1, seed=2, min_size=20)
    assert_valid(parts, 1000, 10)
    assert torch.equal(torch.sort(torch.cat(parts)).values, torch.arange(1000))
    assert min(len(p) for p in parts) >= 20


def mean_max_class_fraction(alpha: float) -> float:
    labels = balanced_labels(per_class=200)
    fractions = []
    for seed in range(5):
        hist = label_histogram(labels, dirichlet(labels, 10, alpha, seed), 10).double()
        fractions.append((hist.max(dim=1).values / hist.sum(dim=1)).mean())
    return torch.stack(fractions).mean().item()


def test_dirichlet_small_alpha_is_more_skewed():
    skewed, mild = mean_max_class_fraction(0.1), mean_max_class_fraction(100.0)
    assert skewed > 0.4
    assert mild < 0.2
    assert skewed > 2 * mild


def test_dirichlet_impossible_min_size_raises():
    with pytest.raises(ValueError, match=r"min_size=30.*alpha=0\.5"):
        dirichlet(balanced_labels(per_class=20), 10, 0.5, seed=0, min_size=30)


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_dirichlet_nonpositive_alpha_is_rejected(alpha: float):
    with pytest.raises(ValueError, match=rf"alpha.*{alpha}"):
        dirichlet(SHUFFLED, 10, alpha, seed=0)


@pytest.mark.parametrize(("n_clients", "classes_per_client"), [(5, 2), (10, 1), (2, 5)])
def test_shards_aligned_gives_exact_class_count(n_clients: int, classes_per_client: int):
    parts = shards(SHUFFLED, n_clients, classes_per_client, seed=4)
    assert_valid(parts, 1000, n_clients)
    assert presence(SHUFFLED, parts).tolist() == [classes_per_client] * n_clients
    # Whole classes move together: every class a client holds is complete.
    hist = label_histogram(SHUFFLED, parts, 10)
    assert set(hist.unique().tolist()) == {0, 100}


@pytest.mark.parametrize("bad", [0, 1.5, True])
def test_shards_bad_classes_per_client_is_rejected(bad: object):
    with pytest.raises(ValueError, match=rf"classes_per_client.*{bad}"):
        shards(SHUFFLED, 5, bad, seed=0)  # type: ignore[arg-type]


def test_partition_converts_integral_float_for_shards():
    assert all(torch.equal(a, b) for a, b in zip(
        partition(SHUFFLED, "shards", 5, 2.0, seed=9), shards(SHUFFLED, 5, 2, seed=9), strict=True
    ))
    with pytest.raises(ValueError, match=r"classes_per_client.*2\.5"):
        partition(SHUFFLED, "shards", 5, 2.5, seed=9)


def test_partition_dispatches_by_name():
    assert PARTITIONS == ("iid", "gamma", "dirichlet", "shards", "domains")
    got = partition(SHUFFLED, "gamma", 4, 0.3, seed=8)
    want = gamma_similarity(SHUFFLED, 4, 0.3, seed=8)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_unknown_scheme_is_rejected():
    with pytest.raises(ValueError, match=r"partition.*'pathological'") as info:
        partition(SHUFFLED, "pathological", 5, 1.0, seed=0)
    assert all(name in str(info.value) for name in PARTITIONS)


def test_label_histogram_counts():
    labels = torch.tensor([0, 2, 2, 1, 2])
    hist = label_histogram(labels, [torch.tensor([0, 1]), torch.tensor([2, 3, 4])], 4)
    assert hist.tolist() == [[1, 0, 1, 0], [0, 1, 2, 0]]
