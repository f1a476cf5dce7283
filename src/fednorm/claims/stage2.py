"""The claims' second stage: the runs that the design fixes but that only the first stage's
results can name (a Snakemake checkpoint, workflow/rules/summarize.smk). Nothing here buys
seeds, trains at another budget or looks again: the seeds and budget of every judged setting
are the profile's, fixed before the runs (docs/claims.md, The design).

A unit at **tuned values** (a claim that compares methods: each method at the rate and keys its
tuning chose on held-out data, fednorm.tuning) gets its sides' chosen values on the stage's
fresh ``seeds``, the only runs that judge it; every claim is then judged once, at α, on both
stages' runs (fednorm.claims.words_ledger).

The added runs are ordinary runs (stable ids from their configs): a run with a new seed joins
the experiments of the run it copies. Its training jobs are balanced by the modelled cost of
each run (fednorm.plan.costs: a function of the configs and a committed table, never a clock).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fednorm.claims.comparisons import Comparison, compare_all
from fednorm.claims.words import Words
from fednorm.config import RunConfig
from fednorm.io import write_text
from fednorm.plan import Plan, balanced_jobs, bundles
from fednorm.plan.costs import run_costs
from fednorm.plan.stage2 import Stage2, stage2_runs, with_seed


@dataclass(frozen=True)
class Added:
    """One run a checkpoint adds: its config, the experiments it joins and the planned run it
    copies (whose modelled cost prices it)."""

    cfg: RunConfig
    groups: tuple[str, ...]
    copies: str


@dataclass(frozen=True)
class Request:
    """The runs one unit (or tuning cell) asks for, and why: 'fresh' (its sides' tuned values
    on the fresh seeds), 'extend' (a tuning grid one value beyond its edge,
    fednorm.claims.extension)."""

    kind: str
    claim: str
    unit: str
    runs: tuple[Added, ...]


def _seeded(unit: Comparison, plan: Plan, spec: Stage2) -> tuple[Added, ...]:
    """The unit's settings on the stage's seeds, in the experiments of the runs they copy (at
    tuned values: a run at the chosen values, the side's ``template``)."""
    out = []
    for side in unit.sides:
        first = side.template or side.run_ids[0]
        groups = tuple(plan.groups(first).split("|"))
        out += [Added(with_seed(plan.runs[first], seed), groups, first) for seed in spec.seeds]
    return tuple(out)


def requests(words: Words, plan: Plan, spec: Stage2,
             compared: dict[str, list[Comparison]]) -> list[Request]:
    """What each claim's units ask of the second stage, in the order of the claims: a unit at
    tuned values without fresh seeds, its sides' chosen values on the stage's seeds; nothing
    else (no verdict is read here)."""
    out = []
    for claim in words.claims:
        for comparison in compared[claim.id]:
            if not comparison.sides or any(r not in plan.runs for s in comparison.sides
                                           for r in s.run_ids):
                continue
            if comparison.chosen is not None and not all(len(s.runs) for s in
                                                          comparison.sides):
                out.append(Request("fresh", claim.id, comparison.label,
                                   _seeded(comparison, plan, spec)))
    return out


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
    return planned_record(requests(words, plan, plan.stage2, compare_all(words, summary)),
                          plan, plan.stage2.jobs)


def planned_record(asked: Iterable[Request], plan: Plan, jobs: int) -> dict[str, Any]:
    """A checkpoint's record of the runs ``asked`` for (config, experiments, why; a run the
    plan has already costs nothing and is not trained again) and their training jobs; a run
    copied from one no first-stage bundle holds (an extension's) is priced as a bundle of one."""
    assert plan.stage2 is not None
    priced = modelled_seconds(plan)
    table = plan.stage2.costs()
    for run_id, cfg in plan.runs.items():
        if run_id not in priced:
            priced[run_id] = table.run_seconds(cfg, 1)
    runs: dict[str, dict[str, Any]] = {}
    cost: dict[str, float] = {}
    configs: dict[str, RunConfig] = {}  # the runs to train: those the plan does not have
    for request in asked:
        for added in request.runs:
            if added.cfg.run_id not in plan.runs:
                configs[added.cfg.run_id] = added.cfg
            entry = runs.setdefault(added.cfg.run_id, {
                "run_id": added.cfg.run_id, "config": added.cfg.identity(), "groups": [],
                "why": [], "planned": added.cfg.run_id in plan.runs})
            entry["groups"] = list(dict.fromkeys([*entry["groups"], *added.groups]))
            entry["why"].append(f"{request.kind}: {request.claim}"
                                + (f" ({request.unit})" if request.unit else ""))
            cost[added.cfg.run_id] = priced[added.copies]
    # bundles from the set of runs alone (sorted: not the order the requests came in)
    packed = bundles(dict(sorted(configs.items())), plan.execution.planned_bundle_size)
    placed = balanced_jobs(packed, cost, jobs)
    return {"runs": list(runs.values()),
            "jobs": {job: {b: list(packed[b]) for b in members} for job, members in placed.items()},
            "seconds": math.fsum(cost[r] for r in sorted(configs)),
            "first_seconds": math.fsum(modelled_seconds(plan).values())}


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
