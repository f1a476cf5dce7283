"""The configuration of the FBN paper's 2-D normalization toy (fednorm.toy)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fednorm.checks import int_at_least, number_in


@dataclass(frozen=True)
class ToyConfig:
    """The FBN paper's 2-D normalization toy (fednorm.toy); defaults are the paper's (n = 10,
    m = 30, T = 100, β = 0.1). A bad value is a ValueError naming the key, the value and what
    is allowed."""

    n_clients: int = 10  # n: clients, and classes (one class per client at γ = 0)
    points_per_client: int = 30  # m: points drawn per class per round (N = n·m)
    rounds: int = 100  # T
    beta: float = 0.1  # running-statistics momentum: weight of the new batch
    spread: float = 1.0  # s²: variance of each class around its mean
    radius: float = 10.0  # r: distance of every class mean from the origin
    fixbn_freeze: float = 0.5  # FixBN's T*: freeze after round(T*·T) rounds
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            problem = _TOY_RULES[f.name](value)
            if problem:
                raise ValueError(f"ToyConfig: key '{f.name}' has value {value!r}; "
                                 f"allowed: {problem}")


_TOY_RULES: dict[str, Callable[[Any], str | None]] = {
    "n_clients": int_at_least(2),
    "points_per_client": int_at_least(2),
    "rounds": int_at_least(1),
    "beta": number_in(0, 1, low_open=True),
    "spread": number_in(0, math.inf, low_open=True),
    "radius": number_in(0, math.inf, low_open=False),
    "fixbn_freeze": number_in(0, 1, low_open=False),
    "eps": number_in(0, 1, low_open=True),
}
