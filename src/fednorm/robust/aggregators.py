"""Robust aggregation rules for the clients' statistics (FBN paper, §5 and Appendix C.3).

Every rule is a pure, vectorized function of an (n, d) tensor whose rows are the n clients'
vectors; it returns the aggregate (d,), except :func:`nnm`, a pre-processing step that returns
the mixed (n, d) tensor. f is the number of Byzantine clients the rule must tolerate.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "AGGREGATORS",
    "aggregate",
    "check_byzantine",
    "coordinate_median",
    "mean",
    "nearest_neighbour_mixing",
    "nnm",
    "trimmed_mean",
]


def check_byzantine(n: int, f: int) -> None:
    """Raise ValueError unless 0 <= f < n/2 (a Byzantine minority among n clients)."""
    if f < 0 or 2 * f >= n:
        raise ValueError(f"f must satisfy 0 <= f < n/2, got f={f} with n={n}")


def _check_matrix(x: Tensor) -> int:
    """Return n after checking that x is an (n, d) tensor with n >= 1."""
    if x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(
            f"x must be a 2-D (n, d) tensor with n >= 1 rows, got shape {tuple(x.shape)}"
        )
    return x.shape[0]


def mean(x: Tensor) -> Tensor:
    """Plain average: mean(x)_j = (1/n) Σ_i x_ij."""
    _check_matrix(x)
    return x.mean(dim=0)


def coordinate_median(x: Tensor) -> Tensor:
    """Coordinate-wise median: median(x)_j = (s_(⌊(n-1)/2⌋),j + s_(⌊n/2⌋),j) / 2.

    s is x sorted along the client axis (0-based). For odd n both indices are the middle one;
    for even n this is the average of the two middle values, not ``torch.median``'s lower
    median.
    """
    n = _check_matrix(x)
    s = x.sort(dim=0).values
    return (s[(n - 1) // 2] + s[n // 2]) / 2


def trimmed_mean(x: Tensor, f: int) -> Tensor:
    """Coordinate-wise trimmed mean: TM(x)_j = (1/(n-2f)) Σ_{k=f}^{n-f-1} s_kj.

    s is x sorted along the client axis, so per coordinate the f largest and f smallest values
    are dropped and the remaining n - 2f averaged. Ties are handled by the sort: values, not
    client identities, are dropped. Requires 0 <= f and n > 2f.
    """
    n = _check_matrix(x)
    if f < 0 or n <= 2 * f:
        raise ValueError(f"f must satisfy 0 <= f and n > 2f for trimmed_mean, got f={f} with n={n}")
    s = x.sort(dim=0).values
    return s[f : n - f].mean(dim=0)


def nearest_neighbour_mixing(x: Tensor, f: int) -> Tensor:
    """Nearest-neighbour mixing (NNM, Allouah et al. 2023): (n, d) -> (n, d).

    NNM(x)_i = (1/(n-f)) Σ_{k ∈ N_i} x_k, where N_i holds the n - f vectors nearest to x_i in
    Euclidean distance, x_i itself included (distance 0). Distances come from ``torch.cdist``
    (exact, no matrix-product shortcut); equal distances are broken by client index, lowest
    first, through a stable sort. Requires 0 <= f < n/2.
    """
    n = _check_matrix(x)
    check_byzantine(n, f)
    dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")
    # rank[i, k]: the place of client k in client i's neighbours, nearest first (stable sort);
    # computed out of place (no scatter into a fresh tensor) so that it vmaps over runs.
    rank = dist.sort(dim=1, stable=True).indices.argsort(dim=1)
    weights = (rank < n - f).to(x.dtype) / (n - f)
    return weights @ x


nnm = nearest_neighbour_mixing

AGGREGATORS: dict[str, Callable[[Tensor, int], Tensor]] = {
    "mean": lambda x, f: mean(x),
    "median": lambda x, f: coordinate_median(x),
    "trimmed_mean": trimmed_mean,
}


def aggregate(x: Tensor, name: str, f: int, nnm: bool = False) -> Tensor:
    """Aggregate (n, d) -> (d,) with the rule ``name``, after NNM when ``nnm`` is true.

    ``name`` is one of ``AGGREGATORS`` ("mean", "median", "trimmed_mean"); f must satisfy
    0 <= f < n/2 whatever the rule.
    """
    if name not in AGGREGATORS:
        raise ValueError(f"name must be one of {sorted(AGGREGATORS)}, got {name!r}")
    n = _check_matrix(x)
    check_byzantine(n, f)
    if nnm:
        x = nearest_neighbour_mixing(x, f)
    return AGGREGATORS[name](x, f)
