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

Requests are granted rechecks and waits on budget first (a claim's waits together, where its
doubled runs can make its verdict firm), cheapest first; then more seeds (with
their recheck or not), a claim's units together, by **conditional power per second**: the
chance that the claim is firm at the second look (:func:`firm_chances`, the predictive power of
each unit from its first-look estimate, standard error and degrees of freedom;
:func:`claim_power`) over the modelled seconds of its runs, a claim under MIN_POWER not bought
(two more seeds cannot decide it), one-seed claims of a paper's own method before the others;
all while the stage's training time stays within ``share`` of the first stage's. Both are
modelled, never measured (fednorm.plan.costs: a run's steps times the committed table's
seconds per step of its shape in its bundle), so that the stage's plan is a function of the
configs, the first stage's results and the table alone: the same commit plans the same runs
in the same bundles on any machine at any load (a clock would not: issue 50). Each added run
is priced as the run it copies in the first stage (twice that at twice the budget);
``wall_time_s`` is only reported.
The added runs are ordinary runs (stable ids from their configs): a run with a new seed joins
the experiments of the run it copies, so every claim, figure and the results API sees it; a
run at a multiple of the budget joins those experiments' names with the suffix ``@x2``
(fednorm.plan.stage2.DOUBLED), which no claim or figure selects, and is judged only by the
recheck.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.claims.stats import sign_count
from fednorm.claims.verdicts import (
    Comparison,
    Judged,
    Unit,
    compare_all,
    compares_methods,
    judge_compared,
    margins,
)
from fednorm.claims.words import CONTRADICTED, HOLDS, INCONCLUSIVE, Relation, Rule, Words
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
    """The runs one unit asks for, and why; a request for seeds also carries the chances that
    its unit is firm at the second look (:func:`firm_chances`) and what its claim needs besides
    (``others``; ``first``: a one-seed claim of a paper's own method)."""

    kind: str  # 'recheck' (a contradiction), 'budget' (still climbing), 'seeds', 'seeds+recheck'
    claim: str
    unit: str
    runs: tuple[Added, ...]
    holds: float = 0.0  # P(the unit holds at the second look)
    against: float = 0.0  # P(it is contradicted there, a contradiction that would stand)
    others: float = 0.0  # 1: every other unit of its claim holds already; 0: not
    first: bool = False  # its claim is about a paper's own method and has a one-seed unit

    def seconds(self, have: Iterable[str], priced: Mapping[str, float]) -> float:
        """What its runs not in ``have`` cost: each its copied run's seconds (``priced``) times
        its budget factor."""
        known = set(have)
        return sum(priced[a.copies] * a.factor for a in self.runs if a.cfg.run_id not in known)


# what is granted first: a contradiction's recheck and a wait on a climbing side that can make
# its claim firm (each a verdict that the first stage nearly made), cheapest first; then more
# seeds, a claim's units together, by the chance of a firm verdict per modelled second. A unit
# at tuned values is judged on fresh seeds alone: those ('fresh', with their recheck where the
# tuning seeds lean to a contradiction) are part of the design, granted outside the share.
SEEDS = ("seeds", "seeds+recheck")
FRESH = ("fresh", "fresh+recheck")
# a claim whose chance of a firm verdict at the second look is under this is not bought. In
# benchmarks/stage2_power.py's simulated ledger (docs/claims.md, The second stage) the units
# predicted under 0.2 came out firm 5.4 % of the time (those at or above: 37 %); buying only
# those at or above 0.2 bought half the units and kept 87 % of the firm verdicts (86-88 % with
# true margins twice or half as spread)
MIN_POWER = 0.2


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


def firm_chances(estimate: float, se: float, n: int, df: float, k: int, alpha: float, *,
                 slack: float = 0.0, sesoi: float = 0.0, delta: float | None = None,
                 units: int = 1) -> tuple[float, float]:
    """(P holds, P contradicted) of a unit at the second look, after ``k`` more seeds: its
    predictive power (Spiegelhalter et al. 1986), the chance of each firm verdict averaged over
    what the first look leaves uncertain about the true margin μ (a flat prior: μ ~
    N(``estimate``, ``se``²)), not the conditional power at μ = ``estimate``, which takes a
    one-seed estimate at its word.

    The design: the first look's ``n`` margins have mean ``estimate`` and standard error ``se``
    on ``df`` degrees of freedom (a seed's margin sd σ = se √n, taken as known); ``k`` new
    margins ~ N(μ, σ²). The second look's mean is then normal about ``estimate`` with variance
    σ² k / (n (n + k)) = se² k / (n + k), its standard error se' = σ / √(n + k) on df + k
    degrees of freedom, and its tests those of fednorm.claims.stats at ``alpha`` (one look's):

    - a sign (``delta`` None): holds when mean + slack > t_{1−α} se'; contradicted when mean +
      slack + sesoi < −t_{1−α/units} se' (Holm's first step over the claim's ``units``);
    - a near-equality (|margin| ≤ δ): holds when |mean| < δ − t_{1−α} se' (never where
      t_{1−α} se' ≥ δ: the interval cannot fit in ±δ); contradicted when |mean| > δ +
      t_{1−α/(2 units)} se'."""
    if not (se > 0 and math.isfinite(se)) or k < 1:
        return 0.0, 0.0
    spread = se * math.sqrt(k / (n + k))  # the predictive sd of the second look's mean
    se2 = se * math.sqrt(n / (n + k))
    df2 = df + k
    held = float(stats.t.ppf(1 - alpha, df2)) * se2
    if delta is None:
        against = float(stats.t.ppf(1 - alpha / units, df2)) * se2
        return (float(stats.norm.sf((held - slack - estimate) / spread)),
                float(stats.norm.cdf((-against - slack - sesoi - estimate) / spread)))
    outside = float(stats.t.ppf(1 - alpha / (2 * units), df2)) * se2
    inside = 0.0
    if held < delta:
        inside = float(stats.norm.cdf((delta - held - estimate) / spread)
                       - stats.norm.cdf((-delta + held - estimate) / spread))
    return inside, float(stats.norm.sf((delta + outside - estimate) / spread)
                         + stats.norm.cdf((-delta - outside - estimate) / spread))


def unit_chances(unit: Unit, claim: Relation, rule: Rule, k: int, units: int, scale: float,
                 recheck: bool, tuned: bool = False) -> tuple[float, float]:
    """(P holds, P contradicted) of an undecided unit after ``k`` more seeds
    (:func:`firm_chances` at α / LOOKS), 0 for a verdict it cannot reach: holds with a seed
    against it (a diverged run), contradicted with one for it, under ``min_seeds`` seeds with a
    margin, a contradiction of a paper's own method against another at values not ``tuned``
    (fednorm.claims.verdicts) or one without its ``recheck`` at twice the budget
    (fednorm.claims.words_ledger.budget_checked). A unit whose experiment has no variance to
    lend (a one-seed grid: no standard error) takes ``scale``, the ledger's median per-seed
    margin sd, on n + k − 2 degrees of freedom; one of diverged runs alone (no margin) cannot
    be decided by the sign test on ``k`` more seeds unless every seed points one way at p ≤ α,
    and then only that way."""
    test = unit.test
    if test is None or math.isnan(test.estimate):
        holds, against = _counted(unit, claim, rule, k)
    elif test.n + k < rule.min_seeds:
        return 0.0, 0.0
    else:
        se, df = test.se, test.df
        if not (se > 0 and math.isfinite(se)):
            se, df = scale / math.sqrt(test.n), float(test.n + k - 2)
        within = claim.kind == "within"
        holds, against = firm_chances(test.estimate, se, test.n, df, k, rule.alpha / LOOKS,
                                      slack=claim.slack, sesoi=rule.sesoi_of(claim),
                                      delta=claim.delta if within else None, units=units)
    untuned = claim.own_method and compares_methods(claim) and not tuned
    if unit.n_against:
        holds = 0.0
    if unit.n_for or untuned or (claim.own_method and not recheck):
        against = 0.0
    return holds, against


def _counted(unit: Unit, claim: Relation, rule: Rule, k: int) -> tuple[float, float]:
    """(P holds, P contradicted) of a unit of diverged runs alone (seeds for and against, no
    margin) after ``k`` more: the exact sign test decides only where every seed points one way
    at p ≤ α / LOOKS, so a record that already points both ways never does, and a unanimous one
    of n seeds stays so with Laplace's chance (n + 1) / (n + k + 1) (a flat prior on the chance
    that a seed points that way); in ``within`` a diverged run only counts against."""
    n = unit.n_for + unit.n_against
    if sign_count(n + k, 0)[0] > rule.alpha / LOOKS:
        return 0.0, 0.0
    stays = (n + 1) / (n + k + 1)
    return (stays if not unit.n_against and claim.kind != "within" else 0.0,
            stays if not unit.n_for else 0.0)


def requests(judged: Iterable[Judged], plan: Plan, spec: Stage2,
             compared: dict[str, list[Comparison]], words: Words) -> list[Request]:
    """What each claim's units ask of the second stage (the module's docstring), in the
    order of the claims; a request for seeds with its unit's chances (:func:`unit_chances`)."""
    judged = list(judged)
    sds = [u.test.se * math.sqrt(u.test.n) for j in judged for u in j.units
           if u.test and u.test.se > 0 and math.isfinite(u.test.se)]
    scale = float(np.median(sds)) if sds else math.nan
    out = []
    for j in judged:
        sesoi = words.rule.sesoi_of(j.claim)
        mine, waits = [], []
        for unit, comparison in zip(j.units, compared[j.claim.id], strict=True):
            if not comparison.sides or any(r not in plan.runs for s in comparison.sides
                                           for r in s.run_ids):
                continue
            if comparison.chosen is not None and not all(len(s.runs) for s in
                                                          comparison.sides):
                out.append(_fresh(comparison, j.claim, unit.label, plan, spec, sesoi))
                continue
            if j.verdict == CONTRADICTED and unit.verdict == CONTRADICTED:
                out.append(Request("recheck", j.claim.id, unit.label,
                                   _doubled(comparison, plan, spec)))
            elif j.verdict == INCONCLUSIVE and unit.needs == "budget":
                holds, against = _waiting(unit, words.rule, j.claim, comparison.tuned)
                waits.append(Request("budget", j.claim.id, unit.label,
                                     _doubled(comparison, plan, spec), holds, against))
            elif j.verdict == INCONCLUSIVE and unit.needs == "seeds":
                kind, runs = "seeds", _seeded(comparison, plan, spec)
                if _leaning(unit, j.claim, sesoi):
                    kind = "seeds+recheck"
                    runs += _doubled(comparison, plan, spec) + _seeded(
                        comparison, plan, spec, spec.budget)
                holds, against = unit_chances(unit, j.claim, words.rule, len(spec.seeds),
                                              len(j.units), scale, kind == "seeds+recheck",
                                              comparison.tuned)
                mine.append((unit, Request(kind, j.claim.id, unit.label, runs, holds,
                                           against)))
        asked = {id(u) for u, _ in mine}
        others = float(all(u.verdict == HOLDS for u in j.units if id(u) not in asked))
        first = j.claim.own_method and any(u.n_seeds <= 1 for u, _ in mine)
        out += [replace(r, others=others, first=first) for _, r in mine]
        # the doubled runs judge the claim alone (words_ledger.budget_checked): a unit without
        # them is 'not run' there, so the claim holds at twice the budget only where every unit
        # of it waited on the budget
        every = float(len(waits) == len(j.units))
        out += [replace(r, others=every) for r in waits]
    return out


def _waiting(unit: Unit, rule: Rule, claim: Relation, tuned: bool) -> tuple[float, float]:
    """(holds, contradicted) of a unit that waits on a side still climbing: 1 for the verdict
    it would have had had that side settled (its p at α / LOOKS; a contradiction of a paper's
    own method against another only at tuned values), 0 otherwise: the chance that twice the
    budget keeps it is not modelled."""
    alpha = rule.alpha / LOOKS
    untuned = claim.own_method and compares_methods(claim) and not tuned
    return (float(unit.p_for <= alpha and not unit.n_against),
            float(unit.p_against <= alpha and not unit.n_for and not untuned))


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


@dataclass(frozen=True)
class Purchase:
    """One claim's requests for seeds, bought together (a claim holds only when every unit
    does), and its chance of a firm verdict at the second look (:func:`claim_power`)."""

    claim: str
    requests: tuple[Request, ...]
    power: float
    first: bool  # a one-seed claim of a paper's own method: bought before the others

    @property
    def runs(self) -> tuple[Added, ...]:
        return tuple(a for r in self.requests for a in r.runs)

    def seconds(self, have: Iterable[str], priced: Mapping[str, float]) -> float:
        """What its runs not in ``have`` cost, a run two of its units share paid once."""
        known, total = set(have), 0.0
        for request in self.requests:
            total += request.seconds(known, priced)
            known |= {a.cfg.run_id for a in request.runs}
        return total


def claim_power(requests: Sequence[Request]) -> float:
    """The chance that a claim whose undecided units are ``requests`` (one claim's, each with
    its unit's chances and the same ``others``) is firm at the second look: contradicted when
    any unit is, or holds when every unit does, its other units already holding (``others``),
    units taken as independent (they share runs: an approximation): 1 − Π(1 − P_against) +
    others · Π P_holds, the two events disjoint (a unit that holds is not contradicted)."""
    if not requests:
        return 0.0
    holds = requests[0].others * math.prod(r.holds for r in requests)
    return min(1.0, 1.0 - math.prod(1.0 - r.against for r in requests) + holds)


def purchases(wanted: Iterable[Request], kinds: tuple[str, ...] = SEEDS) -> list[Purchase]:
    """The requests of ``kinds`` (for seeds; ('budget',): waits on a side still climbing) of
    ``wanted`` grouped by claim, in the order of their claims."""
    by_claim: dict[str, list[Request]] = {}
    for request in wanted:
        if request.kind in kinds:
            by_claim.setdefault(request.claim, []).append(request)
    return [Purchase(claim, tuple(found), claim_power(found), any(r.first for r in found))
            for claim, found in by_claim.items()]


def _spend(options: list[Any], cap: float, spent: float, known: set[str],
           priced: Mapping[str, float], key: Any) -> tuple[list[Any], float]:
    """Options taken by ``key`` (smallest first, over their seconds not yet in ``known``), each
    while it fits within ``cap``; ``known`` grows by what is taken."""
    out, left = [], list(options)
    while left:
        option = min(left, key=lambda o: key(o, o.seconds(known, priced)))
        left.remove(option)
        cost = option.seconds(known, priced)
        if spent + cost > cap:
            continue
        spent += cost
        known |= {a.cfg.run_id for a in option.runs}
        out.append(option)
    return out, spent


def granted(wanted: list[Request], cap: float, have: Iterable[str],
            priced: Mapping[str, float]) -> list[Request]:
    """Every ``fresh`` request (a unit at tuned values: its fresh seeds, outside the cap),
    then what ``cap`` seconds afford (each run priced by ``priced``, :meth:`Request.seconds`;
    a run two requests share is paid once, a run in ``have`` not at all): rechecks and each
    claim's waits on budget together (those that can make its verdict firm,
    :func:`_waiting`) first, cheapest first; then each claim's requests for seeds together
    (:func:`purchases`), those whose chance of a firm verdict at the second look is at least
    MIN_POWER alone: one-seed claims of a paper's own method first, then by that chance per
    modelled second (ties by claim id). One that does not fit is skipped."""
    out = [r for r in wanted if r.kind in FRESH]
    known = set(have) | {a.cfg.run_id for r in out for a in r.runs}
    waits = [p for p in purchases(wanted, ("budget",)) if p.power >= MIN_POWER]
    rechecks, spent = _spend([*(r for r in wanted if r.kind == "recheck"), *waits], cap, 0.0,
                             known, priced, lambda r, cost: cost)
    bought, _ = _spend([p for p in purchases(wanted) if p.power >= MIN_POWER], cap, spent,
                       known, priced, lambda p, cost: (not p.first, -p.power / max(cost, 1e-9),
                                                       p.claim))
    return out + [r for option in (*rechecks, *bought)
                  for r in (option.requests if isinstance(option, Purchase) else (option,))]


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
