"""Experiments: each a grid of run configs, the product of its axes over the run defaults."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from fednorm.config import (
    BUDGET_KEYS,
    FIELDS,
    ConfigError,
    RunConfig,
    checked_section,
    run_config,
)

RUN_KEYS = FIELDS + BUDGET_KEYS  # what `run`, `set` and `grid` may set
SETTINGS = "settings"  # a grid axis whose values set several keys together


def expand(name: str, spec: Any, defaults: Mapping[str, Any]) -> list[RunConfig]:
    """The runs of experiment ``name`` (``{set: {key: value}, grid: {key: [values]}}``), in grid
    order: the product of the grid's axes over ``defaults`` updated by ``set``."""
    where = f"experiments.{name}"
    spec = checked_section(spec, where, ("set", "grid"))
    fixed = dict(checked_section(spec.get("set"), f"{where}.set", RUN_KEYS))
    grid = checked_section(spec.get("grid"), f"{where}.grid", (*RUN_KEYS, SETTINGS))
    # an axis set to null is left out: a profile merged over another removes that axis of it
    # (e.g. to set the key per entry of ``settings`` instead)
    grid = {axis: values for axis, values in grid.items() if values is not None}
    for axis, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(
                f"{where}.grid: key '{axis}' has value {values!r}; allowed: a non-empty list"
            )
    for i, case in enumerate(grid.get(SETTINGS, ())):
        checked_section(case, f"{where}.grid.{SETTINGS}[{i}]", RUN_KEYS)
        if not case:
            raise ConfigError(f"{where}.grid: key '{SETTINGS}' has an empty entry {i}; allowed:"
                              " mappings of run keys to values")
    runs = []
    for combo in itertools.product(*grid.values()):
        axes = [(k, v) for k, v in zip(grid, combo, strict=True) if k != SETTINGS]
        together = dict(combo[list(grid).index(SETTINGS)]) if SETTINGS in grid else {}
        values = _layered(defaults, fixed, {**together, **dict(axes)})
        label = ", ".join(f"{k}={v!r}" for k, v in [*together.items(), *axes])
        runs.append(run_config(values, where=f"{where} ({label})" if label else where))
    return runs


# Keys that say the same thing in different words: a layer (run defaults, an experiment's
# `set`, its grid) that sets one of a family replaces what a lower layer set of that family.
_FAMILIES = (("steps", "epochs", "rounds"), ("lr_milestones", "lr_decay_at"))


def _layered(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The layers merged, later ones winning; an experiment's ``rounds`` replaces the defaults'
    ``steps`` (and ``lr_decay_at`` their ``lr_milestones``) instead of clashing with them."""
    out: dict[str, Any] = {}
    for layer in layers:
        for family in _FAMILIES:
            if any(k in layer for k in family):
                for k in family:
                    out.pop(k, None)
        out.update(layer)
    return out
