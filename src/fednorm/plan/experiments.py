"""Experiments: each a grid of run configs, the product of its axes over the run defaults.

Two keys beside ``set`` and ``grid`` let a method be run as its paper and official code run it:

- ``recipes: own``: each run takes its method's official recipe (fednorm.methods.Method.
  recipe: Hybrid BN's code averages by data size and clips gradients at 10) over the run
  defaults, under what ``set`` and the grid name;
- ``tune: true`` (or a mapping key -> values that replaces those keys' grids): each run is
  swept, jointly with the grid's ``lr_scale``, over the grids of the keys its method tunes
  (fednorm.methods.Tune: FedWon's clipping lambda, Hybrid BN's smoothing, FedFN's scale);
  a key the grid or ``set`` names keeps that value.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from fednorm import methods
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
    spec = checked_section(spec, where, ("set", "grid", "tune", "recipes"))
    fixed = dict(checked_section(spec.get("set"), f"{where}.set", RUN_KEYS))
    tune = _tune_spec(spec.get("tune", False), where)
    recipes = spec.get("recipes", "common")
    if recipes not in ("common", "own"):
        raise ConfigError(f"{where}: key 'recipes' has value {recipes!r}; allowed: 'common' "
                          f"(the experiment's keys for every method) or 'own' (each method's "
                          f"official recipe under them, fednorm.methods)")
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
        named = {**together, **dict(axes)}
        values = _layered(defaults, fixed, named)
        if recipes == "own":
            normalizer = values.get("normalizer", RunConfig.normalizer)
            values = _layered(defaults, dict(methods.method(normalizer).recipe), fixed, named)
        label = ", ".join(f"{k}={v!r}" for k, v in [*together.items(), *axes])
        for swept in _swept(values, tune, {*fixed, *named}):
            both = ", ".join(t for t in (label, ", ".join(f"{k}={v!r}" for k, v in swept.items()))
                             if t)
            runs.append(run_config({**values, **swept},
                                   where=f"{where} ({both})" if both else where))
    return runs


def _tune_spec(value: Any, where: str) -> dict[str, list[Any]] | None:
    """``tune``: false (None: no sweep), true (the records' grids) or key -> values (those
    keys' grids replaced; each a key some method tunes)."""
    if value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: key 'tune' has value {value!r}; allowed: true, false, or "
                          f"a mapping of tuned keys {list(methods.TUNED_KEYS[1:])} to values")
    out = {}
    for key, values in value.items():
        if key not in methods.TUNED_KEYS[1:]:
            raise ConfigError(f"{where}.tune: unknown key '{key}'; allowed keys: "
                              f"{list(methods.TUNED_KEYS[1:])} (the rate: the grid's lr_scale)")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.tune: key '{key}' has value {values!r}; allowed: a "
                              f"non-empty list")
        out[key] = values
    return out


def _swept(values: Mapping[str, Any], tune: Mapping[str, list[Any]] | None,
           named: set[str]) -> list[dict[str, Any]]:
    """The sweep of one run over its method's tuned keys (``tune``'s grids first, then the
    records'): one mapping per combination; [{}] without ``tune``."""
    if tune is None:
        return [{}]
    keys = [t for t in methods.tunes_of(values.get("normalizer", RunConfig.normalizer),
                                        bool(values.get("feature_norm", False)))
            if t.key not in named]
    grids = [tune.get(t.key, list(t.grid)) for t in keys]
    return [dict(zip((t.key for t in keys), combo, strict=True))
            for combo in itertools.product(*grids)]


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
