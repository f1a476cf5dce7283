"""The claims' second stage: more evidence where the first stage's is thin, chosen by the data
(a Snakemake checkpoint, workflow/rules/claims.smk).

After the first stage's runs, the ledger is judged at α / 2 (the first of two looks:
Bonferroni's alpha spending, so that a verdict's error rate over both looks stays at most α),
and each unit of a claim without a firm verdict, or with a contradiction, asks for runs:

- a ``contradicted`` unit: its sides' runs again at ``budget`` times their budget, same seeds
  (a contradiction must survive the budget: :func:`fednorm.claims.words_ledger.budget_checked`);
- an ``inconclusive`` unit with a side behind still climbing (``needs`` budget): the same;
- any other ``inconclusive`` unit (``needs`` seeds: its interval straddles the decision, or it
  has fewer seeds than a verdict needs): its sides' settings on the ``seeds`` of ``stage2``.

Requests are granted rechecks and waits on budget first, cheapest first, then more seeds (with
their recheck or not) by cost over (1 + |t|) at the first look (a clear effect on one seed
decides with fewer seeds than a margin inside the noise), while the stage's training time stays
within ``share`` of the first stage's. Both are modelled, never measured
(fednorm.plan.costs: a run's steps times the committed table's seconds per step of its shape
in its bundle), so that the stage's plan is a function of the configs, the first stage's
results and the table alone: the same commit plans the same runs in the same bundles on any
machine at any load (a clock would not: issue 50). Each added run is priced as the run it
copies in the first stage (twice that at twice the budget); ``wall_time_s`` is only reported.
The added runs are ordinary runs (stable ids from their configs): a run with a new seed joins
the experiments of the run it copies, so every claim, figure and the results API sees it; a
run at a multiple of the budget joins those experiments' names with the suffix ``@x2``
(fednorm.plan.stage2.DOUBLED), which no claim or figure selects, and is judged only by the
recheck.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fednorm.claims.verdicts import (
    Comparison,
    Judged,
    Unit,
    compare_all,
    judge_compared,
    margins,
)
from fednorm.claims.words import CONTRADICTED, INCONCLUSIVE, Relation, Words
from fednorm.config import RunConfig
from fednorm.io import write_text
from fednorm.plan import Plan, balanced_jobs, bundles
from fednorm.plan.costs import run_costs
from fednorm.plan.stage2 import Stage2, stage2_runs, with_budget, with_seed

LOOKS = 2


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
    """The runs one unit asks for, and why."""

    kind: str  # 'recheck' (a contradiction), 'budget' (still climbing), 'seeds', 'seeds+recheck'
    claim: str
    unit: str
    runs: tuple[Added, ...]
    strength: float = 0.0  # |estimate| / se of the unit at the first look (0: none)

    def seconds(self, have: Iterable[str], priced: Mapping[str, float]) -> float:
        """What its runs not in ``have`` cost: each its copied run's seconds (``priced``) times
        its budget factor."""
        known = set(have)
        return sum(priced[a.copies] * a.factor for a in self.runs if a.cfg.run_id not in known)


# what is granted first: a contradiction's recheck and a wait on a climbing side (each a verdict
# that the first stage nearly made), then more seeds, with or without a recheck, by cost alone.
# A unit at tuned values is judged on fresh seeds alone: those ('fresh', with their recheck
# where the tuning seeds lean to a contradiction) are part of the design, granted outside the
# share.
ORDER = {"recheck": 0, "budget": 0, "seeds+recheck": 1, "seeds": 1}
FRESH = ("fresh", "fresh+recheck")


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


def _leaning(unit: Unit, claim: Relation, sesoi: float) -> bool:
    """Whether an undecided unit's estimate points to a contradiction (beyond −sesoi; a
    near-equality: beyond ±δ): its recheck at twice the budget is then bought with its seeds,
    so that a contradiction at the last look is never left unchecked."""
    if unit.test is None:  # diverged runs alone: more of them against than for
        return unit.n_against > unit.n_for
    return _leans_against(unit.estimate, claim, sesoi)


def _leans_against(estimate: float, claim: Relation, sesoi: float) -> bool:
    if claim.kind == "within":
        assert claim.delta is not None
        return abs(estimate) > claim.delta
    return estimate + claim.slack < -sesoi


def _strength(unit: Unit, scale: float) -> float:
    """|estimate| / se of the unit's test at the first look (its pool's se where it has one
    seed; ``scale``, the ledger's median se, where its experiment has no pool: a one-seed
    grid); 0 where it has no estimate."""
    test = unit.test
    if test is None or math.isnan(test.estimate):
        return 0.0
    se = test.se if test.se > 0 else scale
    return abs(test.estimate) / se if se > 0 else 0.0


def requests(judged: Iterable[Judged], plan: Plan, spec: Stage2,
             compared: dict[str, list[Comparison]], words: Words) -> list[Request]:
    """What each claim's units ask of the second stage (the module's docstring), in the
    order of the claims."""
    judged = list(judged)
    ses = [u.test.se for j in judged for u in j.units if u.test and u.test.se > 0]
    scale = float(np.median(ses)) if ses else 0.0
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
                continue
            if j.verdict == CONTRADICTED and unit.verdict == CONTRADICTED:
                kind, runs = "recheck", _doubled(comparison, plan, spec)
            elif j.verdict == INCONCLUSIVE and unit.needs == "budget":
                kind, runs = "budget", _doubled(comparison, plan, spec)
            elif j.verdict == INCONCLUSIVE and unit.needs == "seeds":
                kind, runs = "seeds", _seeded(comparison, plan, spec)
                if _leaning(unit, j.claim, sesoi):
                    kind = "seeds+recheck"
                    runs += _doubled(comparison, plan, spec) + _seeded(
                        comparison, plan, spec, spec.budget)
            else:
                continue
            out.append(Request(kind, j.claim.id, unit.label, runs, _strength(unit, scale)))
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


def _priority(request: Request, cost: float, turns: Mapping[str, int]
              ) -> tuple[int, int, float]:
    """Rechecks and waits on budget by cost; then seeds by turn of their claim, then by cost
    over (1 + |t|)."""
    if not ORDER[request.kind]:
        return 0, 0, cost
    return 1, turns[request.claim], cost / (1 + request.strength)


def granted(wanted: list[Request], cap: float, have: Iterable[str],
            priced: Mapping[str, float]) -> list[Request]:
    """Every ``fresh`` request (a unit at tuned values: its fresh seeds, outside the cap),
    then the requests that ``cap`` seconds afford (each run priced by ``priced``,
    :meth:`Request.seconds`; a run two requests share is paid once, a run in ``have`` not at
    all): rechecks and waits on budget first, cheapest first; then seeds, claim by claim in
    turns (each claim's next unit before any claim's second: a claim of many cheap units does
    not take the stage from the others), within a turn by cost over (1 + the unit's |t| at the
    first look): a clear effect on one seed decides with fewer seeds than a margin inside the
    noise. A request that does not fit is skipped."""
    out = [r for r in wanted if r.kind in FRESH]
    known = set(have) | {a.cfg.run_id for r in out for a in r.runs}
    spent, turns = 0.0, dict.fromkeys((r.claim for r in wanted), 0)
    left = [r for r in wanted if r.kind not in FRESH]
    while left:
        request = min(left, key=lambda r: _priority(r, r.seconds(known, priced), turns))
        left.remove(request)
        cost = request.seconds(known, priced)
        if spent + cost > cap:
            continue
        spent += cost
        turns[request.claim] += 1
        known |= {a.cfg.run_id for a in request.runs}
        out.append(request)
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
    """The second stage's plan (plan.json): its runs (config, experiments, why), their
    training jobs (bundles as the plan's execution packs them, jobs of about equal time), what
    they cost and what the first stage costs, both by the cost model (:func:`modelled_seconds`):
    nothing in it depends on a clock, a dict's order or the summary's row order beyond its
    values."""
    assert plan.stage2 is not None
    compared = compare_all(words, summary)
    judged = judge_compared(words, compared, LOOKS)
    priced = modelled_seconds(plan)
    first = math.fsum(priced.values())
    chosen = granted(requests(judged, plan, plan.stage2, compared, words),
                     plan.stage2.share * first, plan.runs, priced)
    runs: dict[str, dict[str, Any]] = {}
    cost: dict[str, float] = {}
    configs: dict[str, RunConfig] = {}  # the runs to train: those the plan does not have
    for request in chosen:
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
    # bundles from the set of runs alone (sorted: not the order the requests were granted in)
    packed = bundles(dict(sorted(configs.items())), plan.execution.planned_bundle_size)
    jobs = balanced_jobs(packed, cost, plan.stage2.jobs)
    return {"looks": LOOKS, "budget": plan.stage2.budget, "runs": list(runs.values()),
            "jobs": {job: {b: list(packed[b]) for b in members} for job, members in jobs.items()},
            "seconds": math.fsum(cost[r] for r in sorted(configs)), "first_seconds": first}


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
