"""Seeded splits of a labelled training set into per-client index sets.

Every function maps ``labels`` (int64, shape ``(N,)``) to a list of ``n_clients`` int64 tensors of
indices into ``labels``, each sorted ascending and pairwise disjoint. Randomness comes only from
generators seeded with ``seed`` (never the global RNG), so equal inputs give bit-identical output.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fednorm.data.domains import feature_shift

PARTITIONS = ("iid", "gamma", "dirichlet", "shards", "domains")

# Hsu et al. (2019) redraw the Dirichlet proportions until no client is too small; this bounds
# the retries so an impossible request fails instead of looping forever.
_DIRICHLET_ATTEMPTS = 1000


def _check_clients(labels: Tensor, n_clients: int) -> None:
    if labels.dim() != 1:
        raise ValueError(f"labels must be 1-D, got shape {tuple(labels.shape)}")
    if not 1 <= n_clients <= len(labels):
        raise ValueError(f"n_clients must be in [1, {len(labels)}] (the number of labels), "
                         f"got {n_clients}")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _equal_parts(indices: Tensor, n_parts: int) -> Tensor:
    """Rows of ``indices`` cut into ``n_parts`` equal contiguous parts, dropping the tail.

    Row i is ``indices[i*s:(i+1)*s]`` with ``s = len(indices) // n_parts``; the last
    ``len(indices) mod n_parts`` entries are dropped so every part has the same size.
    """
    size = len(indices) // n_parts
    return indices[: size * n_parts].view(n_parts, size)


def _sorted_rows(rows: list[Tensor] | Tensor) -> list[Tensor]:
    return [torch.sort(row).values for row in rows]


def iid(labels: Tensor, n_clients: int, seed: int) -> list[Tensor]:
    """IID split: a uniformly random permutation of ``range(N)`` cut into ``n_clients`` equal parts.

    Each client gets ``N // n_clients`` indices; the ``N mod n_clients`` left over are dropped.
    """
    _check_clients(labels, n_clients)
    permutation = torch.randperm(len(labels), generator=_generator(seed))
    return _sorted_rows(_equal_parts(permutation, n_clients))


def gamma_similarity(labels: Tensor, n_clients: int, gamma: float, seed: int) -> list[Tensor]:
    """γ-similarity split of the FBN paper (section 4, "Modeling heterogeneity").

    The indices are shuffled; the first ``round(γ·N)`` form the homogeneous pool D_Ho, split IID
    into ``n`` equal parts; the rest, D_He, is stably sorted by label (ties keep the shuffled order)
    and cut sequentially into ``n`` contiguous chunks C_1..C_n. Client i gets part i of D_Ho plus
    C_i. At most ``n-1`` indices of each of D_Ho and D_He are dropped so all clients are equal in
    size. γ = 1 is IID; γ = 0 is the extreme non-IID case (balanced labels: one class per client
    when ``n`` equals the number of classes); in between, client i's dominant class makes up about
    ``(1-γ) + γ/K`` of its data for K balanced classes.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got gamma={gamma}")
    _check_clients(labels, n_clients)
    shuffled = torch.randperm(len(labels), generator=_generator(seed))
    n_homogeneous = round(gamma * len(labels))
    homogeneous = _equal_parts(shuffled[:n_homogeneous], n_clients)
    rest = shuffled[n_homogeneous:]
    by_label = rest[torch.sort(labels[rest], stable=True).indices]
    heterogeneous = _equal_parts(by_label, n_clients)
    return _sorted_rows(torch.cat([homogeneous, heterogeneous], dim=1))


def _dirichlet_draw(
    labels: Tensor, n_clients: int, alpha: float, rng: np.random.Generator, gen: torch.Generator
) -> list[Tensor]:
    """One Hsu et al. draw: each class's shuffled indices cut by proportions p ~ Dir(α·1_n).

    For a class with m samples the cut points are ``floor(m · cumsum(p))[:-1]``, so client j gets
    about ``p_j · m`` of that class; every index goes to exactly one client.
    """
    pieces: list[list[Tensor]] = [[] for _ in range(n_clients)]
    for cls in torch.unique(labels):
        members = torch.nonzero(labels == cls).flatten()
        members = members[torch.randperm(len(members), generator=gen)]
        proportions = rng.dirichlet(np.full(n_clients, alpha))
        cuts = (np.cumsum(proportions) * len(members)).astype(np.int64)[:-1]
        for client, piece in enumerate(torch.tensor_split(members, cuts.tolist())):
            pieces[client].append(piece)
    return _sorted_rows([torch.cat(client_pieces) for client_pieces in pieces])


def dirichlet(
    labels: Tensor, n_clients: int, alpha: float, seed: int, min_size: int = 10
) -> list[Tensor]:
    """Dirichlet label-skew split of Hsu et al. (2019), as used by FixBN and FBN (appendix C.2).

    For each class, proportions p ~ Dir(α·1_n) are drawn and the class's shuffled indices are
    split among the clients by the cumulative sums of p. The whole draw is repeated (up to 1000
    times) until every client holds at least ``min_size`` samples. Nothing is dropped, so client
    sizes differ. Small α gives clients few dominant classes; large α approaches IID.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got alpha={alpha}")
    _check_clients(labels, n_clients)
    # numpy samples the Dirichlet (torch.distributions takes no generator); torch shuffles.
    rng = np.random.default_rng(seed)
    gen = _generator(seed)
    for _ in range(_DIRICHLET_ATTEMPTS):
        parts = _dirichlet_draw(labels, n_clients, alpha, rng, gen)
        if min(len(part) for part in parts) >= min_size:
            return parts
    raise ValueError(
        f"dirichlet: no split gave every one of {n_clients} clients at least min_size={min_size} "
        f"of the {len(labels)} samples in {_DIRICHLET_ATTEMPTS} attempts with alpha={alpha}; "
        "alpha/min_size are incompatible with the data: raise alpha or lower min_size"
    )


def shards(labels: Tensor, n_clients: int, classes_per_client: int, seed: int) -> list[Tensor]:
    """Label-sorted shards (McMahan et al. 2017; FixBN's "Shards" setting).

    The indices are sorted by label (ties by index) and cut into ``n·k`` equal contiguous shards
    (k = ``classes_per_client``; the ``N mod n·k`` last indices are dropped); a seeded random
    permutation deals k shards to each client. Each client then sees about k classes: exactly k
    when each shard is one whole class (balanced labels, ``n·k`` = number of classes); with
    several shards per class a client may draw two shards of the same class.
    """
    is_int = isinstance(classes_per_client, int) and not isinstance(classes_per_client, bool)
    if not is_int or classes_per_client < 1:
        raise ValueError(f"classes_per_client must be an int >= 1, got {classes_per_client!r}")
    _check_clients(labels, n_clients)
    n_shards = n_clients * classes_per_client
    if n_shards > len(labels):
        raise ValueError(f"shards: n_clients*classes_per_client={n_shards} exceeds the "
                         f"{len(labels)} samples")
    by_label = torch.sort(labels, stable=True).indices
    pieces = _equal_parts(by_label, n_shards)
    dealt = torch.randperm(n_shards, generator=_generator(seed)).view(n_clients, -1)
    return _sorted_rows(pieces[dealt].flatten(1))


def _integer(value: float, name: str) -> int:
    """``value`` as an int when it is integral (2.0 -> 2), else ValueError naming ``name``."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (is_number and float(value).is_integer()):
        raise ValueError(f"{name} must be an integer, got {name}={value!r}")
    return int(value)


def partition(
    labels: Tensor, scheme: str, n_clients: int, heterogeneity: float | None, seed: int,
    domains: Tensor | None = None,
) -> list[Tensor]:
    """Split ``labels`` with the named ``scheme`` (one of :data:`PARTITIONS`).

    ``heterogeneity`` is γ for "gamma", α for "dirichlet", the classes per client (an integral
    number, 2.0 is accepted) for "shards", and is ignored (may be None) for "iid" and
    "domains" (feature shift: each client the images of one of ``domains``' domains, each
    image's domain id, n_clients / D clients a domain; fednorm.data.domains.feature_shift).
    """
    if scheme not in PARTITIONS:
        raise ValueError(f"unknown partition={scheme!r}; allowed: {', '.join(PARTITIONS)}")
    if scheme == "iid":
        return iid(labels, n_clients, seed)
    if scheme == "domains":
        if domains is None:
            raise ValueError("partition='domains' needs each image's domain (a dataset with "
                             "domains)")
        n_domains = int(domains.max()) + 1
        if n_clients % n_domains:
            raise ValueError(f"n_clients={n_clients} must be a multiple of the {n_domains} "
                             f"domains with partition='domains'")
        return feature_shift(domains, n_clients // n_domains, seed)
    if heterogeneity is None:
        raise ValueError(f"partition={scheme!r} needs a heterogeneity value, got None")
    if scheme == "gamma":
        return gamma_similarity(labels, n_clients, heterogeneity, seed)
    if scheme == "dirichlet":
        return dirichlet(labels, n_clients, heterogeneity, seed)
    return shards(labels, n_clients, _integer(heterogeneity, "classes_per_client"), seed)


def label_histogram(labels: Tensor, parts: list[Tensor], n_classes: int) -> Tensor:
    """Counts ``H[i, c] = |{j in parts[i] : labels[j] = c}|``, shape ``(n_clients, n_classes)``."""
    return torch.stack([torch.bincount(labels[part], minlength=n_classes) for part in parts])
