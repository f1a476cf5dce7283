"""The claims' second stage as a plan sees it: its settings (the config's ``stage2`` section),
the runs it may add (fresh seeds of a setting), and the plan extended by them. Which runs it
adds is the claims' business (fednorm.claims.stage2); here are only the runs' configs and where
they go. It trains at the budget the design fixed, never at another: one look on the
pre-registered design.

``stage2`` (null or absent: one stage, the ledger judges its runs at α)::

    stage2:
      seeds: [102, 103]     # the fresh seeds that judge each method at its tuned values (plus
                            # the config's seed_offset, so that disjoint seed sets stay disjoint)
      step_costs: null      # the cost table that balances its jobs, a CSV that
                            # benchmarks/step_costs.py writes (null: the committed
                            # fednorm/plan/step_costs.csv; a model of the configs, never a clock)
      jobs: 4               # training jobs it is cut into, of about equal modelled time (a
                            # multiple of the cores or GPUs that run them side by side)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fednorm.config import (
    IntIn,
    ListOf,
    Nullable,
    RunConfig,
    check,
    checked_section,
    fail,
    int_at_least,
    run_config,
)
from fednorm.plan.costs import StepCosts, load_step_costs

STAGE2_KEYS = ("seeds", "jobs", "step_costs")
# Keys the section once had: named in their error, with why they went
REMOVED = {"budget": "no value: the key was removed (the second stage trains no run at another "
                     "budget: one look on the design fixed before the runs)"}


@dataclass(frozen=True)
class Stage2:
    """The second stage's settings (see the module's docstring)."""

    seeds: tuple[int, ...] = (100, 101)
    jobs: int = 4
    step_costs: str | None = None  # the cost table's path (None: fednorm.plan.costs.TABLE)

    def costs(self) -> StepCosts:
        return load_step_costs(self.step_costs)


def load_stage2(spec: Any, offset: int = 0) -> Stage2 | None:
    """The ``stage2`` section checked (None: no second stage), its seeds moved by the config's
    ``seed_offset``."""
    if spec is None:
        return None
    for key, allowed in REMOVED.items():
        if isinstance(spec, Mapping) and key in spec:
            raise fail("stage2", key, spec[key], allowed)
    spec = checked_section(spec, "stage2", STAGE2_KEYS)
    default = Stage2()
    seeds = check("stage2", "seeds", spec.get("seeds", list(default.seeds)),
                  ListOf(int_at_least(0), "a non-empty list of seeds (integers >= 0)", 1))
    table = check("stage2", "step_costs", spec.get("step_costs"), Nullable(_path))
    stage2 = Stage2(tuple(s + offset for s in seeds),
                    check("stage2", "jobs", spec.get("jobs", default.jobs), IntIn(1, 4096)),
                    None if table is None else str(table))
    stage2.costs()  # the table read and checked: a bad one fails before any job starts
    return stage2


def _path(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return None
    return "a path to a CSV file (benchmarks/step_costs.py writes one)"


def with_seed(cfg: RunConfig, seed: int) -> RunConfig:
    return dataclasses.replace(cfg, seed=seed)


def stage2_runs(record: Mapping[str, Any]) -> dict[str, tuple[RunConfig, tuple[str, ...]]]:
    """The runs of a second stage's record (fednorm.claims.stage2's plan.json): run id ->
    (config, the experiments it joins)."""
    out = {}
    for entry in record.get("runs", []):
        cfg = run_config(entry["config"], where="stage2 plan")
        out[cfg.run_id] = (cfg, tuple(entry["groups"]))
    return out
