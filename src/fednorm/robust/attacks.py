"""Byzantine attacks on the clients' statistics (FBN paper, §5 and Appendix C.3).

Each attack is a pure, vectorized function of the honest clients' vectors ``honest`` (n - f, d)
and the number f of Byzantine clients; it returns the f Byzantine vectors (f, d). All Byzantine
clients send the same vector, so the rows of the result are equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from fednorm.robust.aggregators import check_byzantine

__all__ = [
    "ATTACKS",
    "a_little_is_enough",
    "alie_z",
    "attack",
    "fall_of_empires",
    "keep_variance_valid",
    "no_attack",
    "sign_flip",
]


def _check_honest(honest: Tensor, f: int) -> int:
    """Return n = (n - f) + f after checking the shape of ``honest`` and 0 <= f < n/2."""
    if honest.dim() != 2 or honest.shape[0] < 1:
        raise ValueError(
            f"honest must be a 2-D (n - f, d) tensor with at least one row, "
            f"got shape {tuple(honest.shape)}"
        )
    n = honest.shape[0] + f
    check_byzantine(n, f)
    return n


def _repeat(vector: Tensor, f: int) -> Tensor:
    """(d,) -> (f, d): every Byzantine client sends the same vector."""
    return vector.unsqueeze(0).expand(f, -1).clone()


def no_attack(honest: Tensor, f: int) -> Tensor:
    """No attack: the Byzantine clients send nothing, the result is empty (0, d).

    This is the paper's 'No attack' scenario, where all clients are honest (f = 0); with f > 0
    the server simply aggregates the honest vectors.
    """
    _check_honest(honest, f)
    return honest.new_empty(0, honest.shape[1])


def sign_flip(honest: Tensor, f: int) -> Tensor:
    """Sign flipping (SF, Allen-Zhu et al. 2020): each Byzantine client sends -mean(honest)."""
    _check_honest(honest, f)
    return _repeat(-honest.mean(dim=0), f)


def fall_of_empires(honest: Tensor, f: int, eps: float = 1.1) -> Tensor:
    """Fall of Empires (FOE, inner-product manipulation, Xie et al. 2020): sends -eps·mean(honest).

    The FBN paper does not state eps; the default 1.1 is the value used in the FOE paper
    (ByzFL's implementation defaults to τ = 2 instead). eps must be finite.
    """
    _check_honest(honest, f)
    if not math.isfinite(eps):
        raise ValueError(f"eps must be a finite float, got eps={eps}")
    return _repeat(-eps * honest.mean(dim=0), f)


def alie_z(n: int, f: int) -> float:
    """ALIE's z from n and f (Baruch et al. 2019): s = ⌊n/2 + 1⌋ - f; z = Φ⁻¹((n - s)/n).

    Φ⁻¹ is the standard normal quantile function. Requires 0 <= f < n/2 and 0 < (n - s)/n < 1.
    """
    check_byzantine(n, f)
    s = math.floor(n / 2 + 1) - f
    p = (n - s) / n
    if not 0.0 < p < 1.0:
        raise ValueError(f"n must give 0 < (n - s)/n < 1 for ALIE's z, got n={n}, f={f}, s={s}")
    normal = torch.distributions.Normal(0.0, 1.0)
    return float(normal.icdf(torch.tensor(p, dtype=torch.float64)))


def a_little_is_enough(
    honest: Tensor, f: int, z: float | None = None, n: int | None = None
) -> Tensor:
    """A Little Is Enough (ALIE, Baruch et al. 2019): sends mean(honest) + z·std(honest).

    mean and std are coordinate-wise over the honest clients; std is the sample standard
    deviation (correction=1, divisor n - f - 1), so at least two honest rows are needed. When z
    is None it comes from n and f as in the ALIE paper: s = ⌊n/2 + 1⌋ - f, z = Φ⁻¹((n - s)/n)
    (see :func:`alie_z`). n defaults to the total count (n - f) + f and, if given, must equal it.
    """
    total = _check_honest(honest, f)
    if n is not None and n != total:
        raise ValueError(f"n must equal the honest rows plus f ({total}), got n={n}")
    if honest.shape[0] < 2:
        raise ValueError(
            f"honest must have at least 2 rows for ALIE's sample std, got {honest.shape[0]}"
        )
    if z is None:
        z = alie_z(total, f)
    elif not math.isfinite(z):
        raise ValueError(f"z must be a finite float or None, got z={z}")
    vector = honest.mean(dim=0) + z * honest.std(dim=0, correction=1)
    return _repeat(vector, f)


ATTACKS: dict[str, Callable[..., Tensor]] = {
    "none": no_attack,
    "sf": sign_flip,
    "foe": fall_of_empires,
    "alie": a_little_is_enough,
}


def attack(name: str, honest: Tensor, f: int, **params: Any) -> Tensor:
    """Run the attack ``name`` (one of ``ATTACKS``) with its keyword parameters: (f, d)."""
    if name not in ATTACKS:
        raise ValueError(f"name must be one of {sorted(ATTACKS)}, got {name!r}")
    return ATTACKS[name](honest, f, **params)


def keep_variance_valid(var: Tensor, floor: float = 1e-5) -> Tensor:
    """Clamp an attacked variance at a small positive floor: max(var, floor).

    An attack (SF, FOE, ALIE) applied to a variance can make it negative; BatchNorm then
    computes 1/sqrt(var + eps), which is NaN when var + eps < 0. Values >= floor are unchanged.
    """
    if not floor > 0 or not math.isfinite(floor):
        raise ValueError(f"floor must be a finite positive float, got floor={floor}")
    return var.clamp(min=floor)
