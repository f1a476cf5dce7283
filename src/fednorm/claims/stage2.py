"""The claims' second stage: the runs that the design fixes but that only the first stage's
results can name (a Snakemake checkpoint, workflow/rules/summarize.smk). Nothing here buys
seeds or looks again: the seeds of every judged setting are the profile's, fixed before the
runs (docs/claims.md, The design).

After the first stage's runs, each claim's units are judged once, at α:

- a unit at **tuned values** (a claim that compares methods: each method at the rate and keys
  its tuning chose on held-out data, fednorm.tuning) gets its sides' chosen values on the
  stage's fresh ``seeds``, the only runs that judge it; where the tuning seeds' own margin
  already points to a contradiction, the same runs at ``budget`` times their budget too, so
  that a contradiction found on the fresh seeds has its recheck;
- a **contradicted** unit gets its sides' runs again at ``budget`` times their budget, same
  seeds: a contradiction stands only where twice the budget confirms it
  (:func:`fednorm.claims.words_ledger.rechecked`), which can only turn it into
  ``budget-limited``, never add a verdict.

The added runs are ordinary runs (stable ids from their configs): a run with a new seed joins
the experiments of the run it copies; a run at a multiple of the budget joins those
experiments' names with the suffix ``@x2`` (fednorm.plan.stage2.DOUBLED), which no claim or
figure selects. Its training jobs are balanced by the modelled cost of each run
(fednorm.plan.costs: a function of the configs and a committed table, never a clock).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fednorm.claims.comparisons import Comparison, compare_all, margins
from fednorm.claims.verdicts import judge_compared
from fednorm.claims.words import CONTRADICTED, Relation, Words
from fednorm.config import RunConfig
from fednorm.io import write_text
from fednorm.plan import Plan, balanced_jobs, bundles
from fednorm.plan.costs import run_costs
from fednorm.plan.stage2 import Stage2, stage2_runs, with_budget, with_seed


@dataclass(frozen=True)
class Added:
    """One run the second stage adds: its config, the experiments it joins, the first-stage
    run it copies (whose modelled cost prices it), its budget over that run's, and the run it
    is a twin of at a multiple of the budget (a recheck; None: a new seed)."""

    cfg: RunConfig
    groups: tuple[str, ...]
    copies: str
    factor: int = 1
    twin_of: str | None = None


@dataclass(frozen=True)
class Request:
    """The runs one unit asks for, and why: 'recheck' (a contradiction at twice the budget),
    'fresh' (its sides' tuned values on the fresh seeds), 'fresh+recheck' (those and their
    twins at twice the budget)."""

    kind: str
    claim: str
    unit: str
    runs: tuple[Added, ...]


def _doubled(unit: Comparison, plan: Plan, spec: Stage2) -> tuple[Added, ...]:
    """The unit's runs at ``spec.budget`` times their budget, in their experiments' '@x'
    twins."""
    return tuple(Added(with_budget(plan.runs[r], spec.budget),
                       tuple(g + spec.suffix() for g in plan.groups(r).split("|")), r,
                       spec.budget, r)
                 for side in unit.sides for r in side.run_ids)


def _seeded(unit: Comparison, plan: Plan, spec: Stage2, factor: int = 1) -> tuple[Added, ...]:
    """The unit's settings on the stage's seeds, in the experiments of the runs they copy (at
    tuned values: a run at the chosen values, the side's ``template``); with ``factor``, at
    that many times the budget, in the experiments' '@x' twins."""
    out = []
    for side in unit.sides:
        first = side.template or side.run_ids[0]
        groups = tuple(plan.groups(first).split("|"))
        for seed in spec.seeds:
            cfg = with_seed(plan.runs[first], seed)
            if factor == 1:
                out.append(Added(cfg, groups, first))
            else:
                out.append(Added(with_budget(cfg, factor),
                                 tuple(g + spec.suffix() for g in groups), first, factor,
                                 cfg.run_id))
    return tuple(out)


def _leans_against(estimate: float, claim: Relation, sesoi: float) -> bool:
    if claim.kind == "within":
        assert claim.delta is not None
        return abs(estimate) > claim.delta
    return estimate + claim.slack < -sesoi


def requests(words: Words, plan: Plan, spec: Stage2,
             compared: dict[str, list[Comparison]]) -> list[Request]:
    """What each claim's units ask of the second stage (the module's docstring), in the order
    of the claims."""
    judged = judge_compared(words, compared)
    out = []
    for j in judged:
        sesoi = words.rule.sesoi_of(j.claim)
        for unit, comparison in zip(j.units, compared[j.claim.id], strict=True):
            if not comparison.sides or any(r not in plan.runs for s in comparison.sides
                                           for r in s.run_ids):
                continue
            if comparison.chosen is not None and not all(len(s.runs) for s in
                                                          comparison.sides):
                out.append(_fresh(comparison, j.claim, unit.label, plan, spec, sesoi))
            elif unit.verdict == CONTRADICTED:
                out.append(Request("recheck", j.claim.id, unit.label,
                                   _doubled(comparison, plan, spec)))
    return out


def _fresh(comparison: Comparison, claim: Relation, label: str, plan: Plan, spec: Stage2,
           sesoi: float) -> Request:
    """A unit at tuned values without fresh seeds: its sides' chosen values on the stage's
    seeds, the only runs that judge it (fednorm.tuning); with their recheck at the stage's
    budget where the tuning seeds' margin (the choice's own, biased for the tuned side)
    already points to a contradiction."""
    assert comparison.chosen is not None
    runs = _seeded(comparison, plan, spec)
    seen = margins(comparison.chosen, claim.kind == "within")
    if seen.values and _leans_against(float(np.mean(seen.values)), claim, sesoi):
        return Request("fresh+recheck", claim.id, label,
                       runs + _seeded(comparison, plan, spec, spec.budget))
    return Request("fresh", claim.id, label, runs)


def modelled_seconds(plan: Plan) -> dict[str, float]:
    """Run id -> the seconds the cost model gives its training in the first stage
    (fednorm.plan.costs: its steps x the table's seconds per step of its shape, in its bundle
    of the plan): a function of the configs and the table alone."""
    assert plan.stage2 is not None
    return run_costs(plan.runs, plan.bundles, plan.stage2.costs())


def measured_seconds(summary: pd.DataFrame, plan: Plan) -> dict[str, float]:
    """Run id -> the seconds it took to train in the first stage: its bundle's wall time
    (``wall_time_s``: runs of a bundle train in lock-step) over its bundle's size. Reported
    next to the model's (workflow/scripts/stage2_plan.py), never a price."""
    wall = summary.groupby("run_id")["wall_time_s"].first()
    sizes = plan.bundle_sizes
    return {r: float(w) / sizes.get(r, 1) for r, w in wall.items() if pd.notna(w)}


def stage2_record(words: Words, summary: pd.DataFrame, plan: Plan) -> dict[str, Any]:
    """The second stage's plan (plan.json): its runs (config, experiments, why) and their
    training jobs (bundles as the plan's execution packs them, jobs of about equal modelled
    time): nothing in it depends on a clock, a dict's order or the summary's row order beyond
    its values."""
    assert plan.stage2 is not None
    compared = compare_all(words, summary)
    priced = modelled_seconds(plan)
    runs: dict[str, dict[str, Any]] = {}
    cost: dict[str, float] = {}
    configs: dict[str, RunConfig] = {}  # the runs to train: those the plan does not have
    for request in requests(words, plan, plan.stage2, compared):
        for added in request.runs:
            if added.cfg.run_id not in plan.runs:
                configs[added.cfg.run_id] = added.cfg
            entry = runs.setdefault(added.cfg.run_id, {
                "run_id": added.cfg.run_id, "config": added.cfg.identity(), "groups": [],
                "why": [], "source": added.twin_of, "planned": added.cfg.run_id in plan.runs})
            entry["groups"] = list(dict.fromkeys([*entry["groups"], *added.groups]))
            entry["why"].append(f"{request.kind}: {request.claim}"
                                + (f" ({request.unit})" if request.unit else ""))
            cost[added.cfg.run_id] = priced[added.copies] * added.factor
    # bundles from the set of runs alone (sorted: not the order the requests came in)
    packed = bundles(dict(sorted(configs.items())), plan.execution.planned_bundle_size)
    jobs = balanced_jobs(packed, cost, plan.stage2.jobs)
    return {"budget": plan.stage2.budget, "runs": list(runs.values()),
            "jobs": {job: {b: list(packed[b]) for b in members} for job, members in jobs.items()},
            "seconds": math.fsum(cost[r] for r in sorted(configs)),
            "first_seconds": math.fsum(priced.values())}


def write_record(record: dict[str, Any], path: str | Path) -> Path:
    write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return Path(path)


def read_record(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def job_bundles(record: dict[str, Any], job: str, plan: Plan
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The bundles of one training job of ``record`` as fednorm.run.train_job takes them (their
    runs that are not complete, :meth:`fednorm.plan.Plan.is_complete`: a finished run is never
    trained again), and every run id of the job."""
    plan = plan.with_runs(stage2_runs(record))
    out, every = [], []
    for bundle_id, members in record["jobs"][job].items():
        every += members
        pending = [r for r in members if not plan.is_complete(r)]
        if pending:
            out.append({"bundle_id": bundle_id,
                        "runs": [plan.runs[r].identity() for r in pending],
                        "out_dirs": [plan.paths.run_dir(r) for r in pending],
                        "resume": plan.paths.resume_point(bundle_id)})
    return out, every
