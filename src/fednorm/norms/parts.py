"""Which of a model's tensors each client keeps (fednorm.fl.parts takes them from here): parts
named by what they are, resolved to parameter and statistic names by module type, never by a
substring of a name.

- ``stats``: every federated BN layer's running mean and variance;
- ``affine``: its weight (gamma) and bias (beta);
- ``mixing``: the parameters that mix its statistics (Hybrid BN's d);
- ``rest``: every parameter of the model outside its federated BN layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from fednorm.norms.layer import FedBatchNorm2d


class PartNames(NamedTuple):
    """The tensors (parameter or statistic names) each client keeps, by how the server treats
    them (fednorm.fl.parts): ``own`` never averaged, ``shared`` averaged too, ``served`` averaged
    too and each client served its own mix."""

    own: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    served: tuple[str, ...] = ()


def _bn(model: nn.Module) -> list[tuple[str, FedBatchNorm2d]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, FedBatchNorm2d)]


def _stats(model: nn.Module) -> list[str]:
    return [f"{name}.{s}" for name, _ in _bn(model) for s in ("running_mean", "running_var")]


def _affine(model: nn.Module) -> list[str]:
    return [f"{name}.{p}" for name, _ in _bn(model) for p in ("weight", "bias")]


def _mixing(model: nn.Module) -> list[str]:
    return [f"{name}.{p}" for name, m in _bn(model) for p in m.mixing]


def _rest(model: nn.Module) -> list[str]:
    inside = {f"{name}.{p}" for name, m in _bn(model) for p, _ in m.named_parameters()}
    return [name for name, _ in model.named_parameters() if name not in inside]


PARTS: dict[str, Callable[[nn.Module], list[str]]] = {
    "stats": _stats, "affine": _affine, "mixing": _mixing, "rest": _rest}

PartSpec = Callable[[nn.Module], PartNames]


def client_parts(own: tuple[str, ...] = (), shared: tuple[str, ...] = (),
                 served: tuple[str, ...] = ()) -> PartSpec | None:
    """The clients' parts of a model, each kind a tuple of the parts above (None: none)."""
    if not (own or shared or served):
        return None

    def names(model: nn.Module) -> PartNames:
        return PartNames(*(tuple(k for part in kind for k in PARTS[part](model))
                           for kind in (own, shared, served)))

    return names
