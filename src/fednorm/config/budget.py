"""Budgets as a user states them (the FixBN paper's "fixed 128 epochs" and "fixed 128 rounds"),
turned into the RunConfig's steps and lr milestones. They are not RunConfig fields: a run is
what it computes, so the fixed-epochs run at E = 500 and the fixed-rounds run at E = 500 (both
64,000 steps) are one run, trained once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from fednorm.checks import INT_MAX, IntIn, ListOf, NumberIn, check, fail
from fednorm.config.run import RunConfig
from fednorm.config.schema import _RULES, IMAGENET_TRAIN, TINYIMAGENET_TRAIN

BUDGET_KEYS = ("epochs", "rounds", "lr_decay_at")
_STEPS_KEYS = ("steps", "epochs", "rounds")  # three ways to say how long a run trains


_BUDGET_RULES: dict[str, Callable[[Any], str | None]] = {
    "epochs": NumberIn(0, math.inf, low_open=True),
    "rounds": IntIn(1),
    "lr_decay_at": ListOf(NumberIn(0, 1, low_open=True, high_open=True),
                          "a non-empty list of increasing fractions in (0, 1)", min_len=1,
                          increasing=True),
}


def train_size(values: Mapping[str, Any]) -> int:
    """|D|: the training images of all clients together (CIFAR-10: 50,000; Digits-Five:
    n_train of each domain)."""
    dataset = values.get("dataset", RunConfig.dataset)
    if dataset == "digits5":
        return (values.get("n_train") or 0) * len(values.get("domains") or ())
    if dataset == "cifar10":
        return 50_000
    if dataset == "tinyimagenet":
        return values.get("n_train") or TINYIMAGENET_TRAIN
    if dataset == "imagenet":
        return IMAGENET_TRAIN
    return values.get("n_train") or 0


def resolve_budget(values: Mapping[str, Any], where: str = "run") -> dict[str, Any]:
    """``values`` with the budget keys replaced by the RunConfig keys they determine.

    - ``rounds: R`` -> ``steps = R * E`` (E = ``local_steps``);
    - ``epochs: P`` -> ``R = round(P * |D| / (M * b * E))`` rounds of E local steps, M clients
      of batch b (each client passes over its |D|/M images P times), so ``steps = R * E``; when
      E does not divide the steps the rounds are rounded to the nearest integer (FixBN's
      E = 2500 at 128 epochs: 25.6 -> 26 rounds), and at least one round is an error otherwise;
    - ``lr_decay_at: [f1, f2, ...]`` -> ``lr_milestones`` at the round boundaries nearest to
      those fractions of the rounds (FixBN: [0.5, 0.75]).
    At most one of ``steps``, ``epochs``, ``rounds``; ``lr_decay_at`` excludes ``lr_milestones``.
    """
    present = [k for k in BUDGET_KEYS if k in values]
    if not present:
        return dict(values)
    for key in present:
        check(where, key, values[key], _BUDGET_RULES[key])
    given = [k for k in _STEPS_KEYS if k in values]
    if len(given) > 1:
        raise fail(where, given[1], values[given[1]],
                   f"only one of {list(_STEPS_KEYS)} (this run also sets '{given[0]}')")
    if "lr_decay_at" in values and "lr_milestones" in values:
        raise fail(where, "lr_decay_at", values["lr_decay_at"],
                   "absent when 'lr_milestones' is set (one lr schedule per run)")
    out = {k: v for k, v in values.items() if k not in BUDGET_KEYS}
    E = out.get("local_steps", RunConfig.local_steps)
    if not (isinstance(E, int) and E >= 1):
        return out  # run_config reports the bad local_steps
    if "epochs" in values:
        M = out.get("n_clients", RunConfig.n_clients)
        b = out.get("batch_size", RunConfig.batch_size)
        size = train_size(out)
        if not size:
            raise fail(where, "n_train", out.get("n_train"), f"an integer >= 1 with dataset "
                       f"'{out.get('dataset', RunConfig.dataset)}' (epochs count its images)")
        rounds = round(values["epochs"] * size / (M * b * E)) if M and b else 0
        if rounds < 1:
            raise fail(where, "epochs", values["epochs"],
                       f"enough epochs for one round of E = {E} local steps ({values['epochs']}"
                       f" x {size} images / ({M} clients x batch {b}) = "
                       f"{values['epochs'] * size / (M * b):g} steps per client)")
    else:
        rounds = values.get("rounds", out.get("steps", RunConfig.steps) // E)
    if "epochs" in values or "rounds" in values:
        out["steps"] = rounds * E
        if _RULES["steps"](out["steps"]) is not None:
            budget = "epochs" if "epochs" in values else "rounds"
            raise fail(where, budget, values[budget], f"a budget of at most {INT_MAX} steps "
                       f"(it gives {rounds} rounds of E = {E} local steps)")
    if "lr_decay_at" in values:
        at = [round(f * rounds) * E for f in values["lr_decay_at"]]
        if any(a < E for a in at) or any(a >= b for a, b in itertools.pairwise(at)) or \
                at[-1] >= rounds * E:
            raise fail(where, "lr_decay_at", values["lr_decay_at"],
                       f"fractions that fall on distinct round boundaries strictly inside the "
                       f"{rounds} rounds (they give steps {at})")
        out["lr_milestones"] = at
    return out
