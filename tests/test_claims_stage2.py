"""The claims' second stage chooses its runs (fednorm.claims.stage2): which units ask for what,
which requests the stage's time affords (each run priced at what the run it copies costs by the
cost model), how its bundles are cut into jobs of about equal time, that its plan does not
follow the clock, and what one training job trains."""

import dataclasses
import itertools
import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from fednorm.claims.stage2 import (
    Added,
    Request,
    balanced_jobs,
    claim_power,
    firm_chances,
    granted,
    job_bundles,
    purchases,
    stage2_record,
    unit_chances,
    write_record,
)
from fednorm.claims.stats import equivalence_test, sign_test
from fednorm.claims.verdicts import Unit
from fednorm.claims.words import HOLDS, parse_words
from fednorm.claims.words_ledger import staged_ledger
from fednorm.config import RunConfig, run_config
from fednorm.plan import RUN_FILES, load_plan
from fednorm.plan.stage2 import stage2_runs, with_budget, with_seed
from fednorm.summarize import config_columns

RUN = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
       "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
       "eval_every": 10}
BASE = run_config(RUN)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A cost table (fednorm.plan.costs) for RUN's shapes: a bundle step of R runs takes R / 20
    s (at R = 1 and 4, linear between), so a run of 20 steps costs 1 s in any bundle."""
    path = tmp_path_factory.mktemp("costs") / "step_costs.csv"
    rows = [f"synthetic,fbn_cnn,8,4,80,dsgd,{n},{r},{r / 20}"
            for n in ("bn", "fbn") for r in (1, 4)]
    path.write_text("\n".join(["dataset,model,image_size,width,images,local,normalizer,runs,"
                               "seconds", *rows]) + "\n")
    return str(path)


def _cfg(**keys) -> RunConfig:
    """A run of the tiny recipe (replace: no validation needed for a bookkeeping test)."""
    return dataclasses.replace(BASE, **keys)


# ---------------------------------------------------------------------------------------------
# Jobs of about equal time.


def _packed(bundle_seconds):
    """Bundles 'b0', 'b1', ... whose runs cost the given seconds each."""
    cost, packed = {}, {}
    for i, seconds in enumerate(bundle_seconds):
        ids = [f"r{i}.{k}" for k in range(len(seconds))]
        cost.update(zip(ids, map(float, seconds), strict=True))
        packed[f"b{i}"] = tuple(ids)
    return packed, cost


def _seconds(bundle, packed, cost):
    return sum(cost[r] for r in packed[bundle])


def test_jobs_take_the_largest_bundle_first_into_the_lightest_job():
    """Bundles of 5, 4, 3, 3, 3 s into 2 jobs: 5 | 4; 3 to the 4 (7); 3 to the 5 (8); 3 to
    the 7 (10). The ids are each job's first bundle, '+k' for k more."""
    packed, cost = _packed([[5], [4], [3], [3], [3]])
    assert balanced_jobs(packed, cost, 2) == {"b0+1": ("b0", "b3"),
                                                 "b1+2": ("b1", "b2", "b4")}
    assert balanced_jobs(packed, cost, 9) == {f"b{i}": (f"b{i}",) for i in range(5)}
    assert balanced_jobs(packed, cost, 1) == {"b0+4": ("b0", "b1", "b2", "b3", "b4")}
    assert balanced_jobs({}, {}, 3) == {}


@given(st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=3), min_size=1, max_size=12),
       st.integers(1, 6))
def test_jobs_cover_every_bundle_once_and_differ_by_at_most_the_largest_bundle(steps, jobs):
    """List scheduling's bound: when the heaviest job took its last bundle it was the lightest,
    so it exceeds the final lightest job by at most that bundle."""
    packed, cost = _packed(steps)
    out = balanced_jobs(packed, cost, jobs)
    members = [b for ids in out.values() for b in ids]
    assert sorted(members) == sorted(packed)  # each bundle in exactly one job
    assert len(out) == min(jobs, len(packed))  # at most `jobs`, none empty
    loads = [sum(_seconds(b, packed, cost) for b in ids) for ids in out.values()]
    largest = max(_seconds(b, packed, cost) for b in packed)
    assert max(loads) - min(loads) <= largest
    for job, ids in out.items():
        assert job == ids[0] + (f"+{len(ids) - 1}" if len(ids) > 1 else "")


# ---------------------------------------------------------------------------------------------
# Requests granted within the stage's time: each run here copies itself, priced at 1 s.


def _request(kind, *seeds, claim="c", holds=0.0, against=0.0, others=1.0, first=False):
    return Request(kind, claim, "", tuple(Added(c, ("e",), c.run_id)
                                          for c in (_cfg(seed=s) for s in seeds)),
                   holds, against, others, first)


def _measured(*requests):
    return {a.copies: 1.0 for r in requests for a in r.runs}


def test_rechecks_first_then_claims_by_their_chance_per_second_own_one_seed_claims_first():
    """Rechecks and waits on budget first, cheapest first; then claims: 'own' (a one-seed claim
    of a paper's own method, 0.3 over 3 s) before the others; then 'cheap' (0.5 over 1 s)
    before 'sure' (0.9 over 2 s: 0.45 a second) before 'both' (0.6 over 3 s, its recheck
    included); 'hopeless' (0.1: two more seeds cannot decide it) never, whatever the time."""
    cheap = _request("seeds", 1, claim="cheap", holds=0.5)
    sure = _request("seeds", 2, 3, claim="sure", holds=0.9)
    both = _request("seeds+recheck", 4, 5, 6, claim="both", against=0.6)
    hopeless = _request("seeds", 13, claim="hopeless", holds=0.05, against=0.05)
    own = _request("seeds", 14, 15, 16, claim="own", holds=0.3, first=True)
    budget, recheck = _request("budget", 7, 8, holds=1.0), _request("recheck", 9, 10, 11, 12)
    every = [sure, hopeless, cheap, both, budget, recheck, own]
    out = granted(every, 1e9, (), _measured(*every))
    assert out == [budget, recheck, own, cheap, sure, both]


def test_a_wait_on_budget_is_bought_only_where_the_doubled_runs_can_make_its_claim_firm():
    """'alone' (every unit of its claim waits: the doubled runs judge all of it) and 'leaning'
    (its unit would be contradicted) are bought; 'among' (a unit that would hold, beside units
    that have no doubled runs: 'not run' at twice the budget) is not, whatever the time."""
    alone = _request("budget", 1, claim="alone", holds=1.0)
    among = _request("budget", 2, claim="among", holds=1.0, others=0.0)
    leaning = _request("budget", 3, claim="leaning", against=1.0, others=0.0)
    assert granted([alone, among, leaning], 1e9, (), _measured(alone, among, leaning)) == [
        alone, leaning]


def test_a_request_that_does_not_fit_is_skipped_and_a_cheaper_one_still_granted():
    """3 s: the budget's 2, then the recheck's 3 would exceed it; a 1-s claim fits, then the
    stage is full: a second 1-s claim would not fit."""
    recheck, budget = _request("recheck", 1, 2, 3), _request("budget", 4, 5, holds=1.0)
    one = _request("seeds", 6, claim="one", holds=0.9)
    other = _request("seeds", 7, claim="other", holds=0.8)
    measured = _measured(recheck, budget, one, other)
    out = granted([one, other, budget, recheck], 3.0, (), measured)
    assert out == [budget, one]
    assert sum(r.seconds((), measured) for r in out) == 3.0


def test_a_run_two_requests_share_is_paid_once_and_a_planned_run_not_at_all():
    a = _request("seeds", 1, 2, claim="a", holds=0.9)
    b = _request("seeds", 1, 3, claim="b", holds=0.8)
    planned = _cfg(seed=9).run_id
    free = _request("seeds", 9, claim="planned", holds=0.3)
    measured = _measured(a, b, free)
    assert a.seconds((), measured) == b.seconds((), measured) == 2.0
    assert granted([a, b], 3.0, (), measured) == [a, b]
    assert granted([a, b], 2.9, (), measured) == [a]
    assert free.seconds([planned], measured) == 0
    assert granted([a, b, free], 3.0, [planned], measured) == [free, a, b]
    # a doubled run costs its copy's time twice
    twice = Request("recheck", "c", "", (Added(_cfg(seed=1, steps=40), ("e@x2",),
                                               _cfg(seed=1).run_id, 2),))
    assert twice.seconds((), measured) == 2.0


def test_a_claims_units_are_bought_together_and_its_chance_is_that_of_its_verdict():
    """Two units of one claim (4 s) go together or not at all: 3 s buy neither; the claim's
    chance against an enumeration of its units' outcomes (each holds, is contradicted or
    neither, independently): firm when any is contradicted, or when every one holds and the
    claim's other units hold already."""
    units = [_request("seeds", 1, 2, claim="two", holds=0.7, against=0.1),
             _request("seeds", 3, 4, claim="two", holds=0.6, against=0.2)]
    assert granted(units, 3.0, (), _measured(*units)) == []
    assert granted(units, 4.0, (), _measured(*units)) == units
    for others in (0.0, 1.0):
        found = [dataclasses.replace(u, others=others) for u in units]
        expected = 0.0
        for outcome in itertools.product(("holds", "against", "neither"), repeat=2):
            p = np.prod([{"holds": u.holds, "against": u.against,
                          "neither": 1 - u.holds - u.against}[o]
                         for u, o in zip(found, outcome, strict=True)])
            firm = "against" in outcome or (others and set(outcome) == {"holds"})
            expected += p * firm
        [purchase] = purchases(found)
        assert purchase.power == pytest.approx(claim_power(found)) == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------
# The chance of a firm verdict at the second look, against a Monte Carlo of the same design.

DRAWS = 4000


def _simulated(estimate, se, n, df, k, alpha, delta=None, slack=0.0, sesoi=0.0, seed=0):
    """The design of firm_chances drawn: μ from N(estimate, se²), k new margins of sd σ = se √n
    about it, the second look's mean over n + k seeds against t_{df + k} bounds at se'."""
    rng = np.random.default_rng(seed)
    sigma = se * np.sqrt(n)
    mu = rng.normal(estimate, se, DRAWS)
    new = rng.normal(mu[:, None], sigma, (DRAWS, k)).sum(axis=1)
    mean = (n * estimate + new) / (n + k)
    se2 = sigma / np.sqrt(n + k)
    t1, t2 = (stats.t.ppf(1 - a, df + k) for a in (alpha, alpha / (1 if delta is None else 2)))
    if delta is None:
        return (mean + slack > t1 * se2).mean(), (mean + slack + sesoi < -t2 * se2).mean()
    return ((np.abs(mean) < delta - t1 * se2).mean(), (np.abs(mean) > delta + t2 * se2).mean())


@pytest.mark.parametrize(("estimate", "se", "n", "df", "delta"), [
    (3.0, 2.0, 2, 8, None), (-4.0, 2.0, 1, 3, None), (0.5, 1.0, 3, 2, None),
    (1.0, 0.6, 2, 8, 3.0), (4.0, 1.5, 2, 8, 3.0), (0.0, 4.0, 1, 3, 3.0)])
def test_the_chances_match_a_monte_carlo_of_the_same_design(estimate, se, n, df, delta):
    """Within 4 Monte Carlo standard errors (4,000 seeded draws), holds and contradicted."""
    got = firm_chances(estimate, se, n, df, 2, 0.025, slack=0.5 * (delta is None),
                       sesoi=2.0, delta=delta)
    want = _simulated(estimate, se, n, df, 2, 0.025, delta, slack=0.5 * (delta is None),
                      sesoi=2.0)
    for g, w in zip(got, want, strict=True):
        assert abs(g - w) <= 4 * np.sqrt(max(w * (1 - w), 1 / DRAWS) / DRAWS), (got, want)


@pytest.mark.parametrize("kind", ["greater", "within"])
def test_the_chances_match_the_verdicts_own_tests_on_simulated_seeds(kind):
    """The same design judged by fednorm.claims.stats's own tests: the first look's two
    margins and two new ones, the variance a pool of known σ² (df 10⁷: the plug-in), a unit
    firm where its p ≤ α; within 4 Monte Carlo standard errors."""
    rng = np.random.default_rng(1)
    first, sigma, alpha, delta = np.array([2.0, 4.0]), 3.0, 0.025, 4.0
    se = sigma / np.sqrt(2)
    within = kind == "within"
    hits = np.zeros(2)
    for _ in range(DRAWS):
        mu = rng.normal(first.mean(), se)
        margins = [*first, *rng.normal(mu, sigma, 2)]
        mean, known = float(np.mean(margins)), sigma / np.sqrt(len(margins))
        test = (equivalence_test(mean, known, 1e7, len(margins), delta=delta, alpha=alpha)
                if within else sign_test(mean, known, 1e7, len(margins), slack=0.0, sesoi=2.0,
                                         alpha=alpha))
        hits += (test.p_for <= alpha, test.p_against <= alpha)
    got = firm_chances(first.mean(), se, 2, 1e7, 2, alpha, sesoi=2.0,
                       delta=delta if within else None)
    for g, w in zip(got, hits / DRAWS, strict=True):
        assert abs(g - w) <= 4 * np.sqrt(max(w * (1 - w), 1 / DRAWS) / DRAWS), (got, w)


def test_a_unit_of_diverged_runs_alone_is_decided_only_by_a_unanimous_record():
    """A seed against (its better side diverged) and no margin: k more seeds decide it only
    where all n + k pointing one way give p ≤ α / 2 (k = 5: 1/64; k = 2: 1/8, never), with the
    chance that all k new ones point that way too, under a flat prior on that chance (the
    beta-binomial's); a paper's own method against another contradicted only at its tuned
    values and with its recheck."""
    words = parse_words({"claims": [_claim("c", "e", "fbn", "bn", paper="fixbn")]})
    claim = words.claims[0]
    own = parse_words({"claims": [_claim("c", "e", "fbn", "bn", paper="fbn")]}).claims[0]
    unit = Unit("", "inconclusive", n_against=1, needs="seeds")
    laplace = stats.betabinom.pmf(5, 5, 1 + 1, 1)  # 5 of 5 after 1 of 1
    assert unit_chances(unit, claim, words.rule, 5, 1, np.nan, False) == (
        0.0, pytest.approx(laplace))
    assert unit_chances(unit, claim, words.rule, 2, 1, np.nan, True) == (0.0, 0.0)
    assert unit_chances(unit, own, words.rule, 5, 1, np.nan, True) == (0.0, 0.0)  # untuned
    assert unit_chances(unit, own, words.rule, 5, 1, np.nan, False, tuned=True) == (0.0, 0.0)
    assert unit_chances(unit, own, words.rule, 5, 1, np.nan, True, tuned=True) == (
        0.0, pytest.approx(laplace))
    for_it = Unit("", "inconclusive", n_for=2, needs="seeds")
    assert unit_chances(for_it, claim, words.rule, 5, 1, np.nan, False) == (
        pytest.approx(stats.betabinom.pmf(5, 5, 2 + 1, 1)), 0.0)


def test_a_near_equality_whose_interval_cannot_fit_in_its_band_has_no_chance_to_hold():
    """t_{1−α} se' ≥ δ: no mean holds, whatever the estimate."""
    assert firm_chances(0.0, 4.0, 1, 3, 2, 0.025, delta=3.0)[0] == 0.0
    assert firm_chances(0.0, 0.5, 1, 3, 2, 0.025, delta=3.0)[0] > 0.5


# ---------------------------------------------------------------------------------------------
# One training job.


def test_a_job_trains_the_runs_of_its_bundles_that_are_not_complete(tmp_path):
    """r0 complete, r1 without its run.json (killed before the end), r2 never started, r3
    complete (its bundle is left out); job K's run is not this job's."""
    cfgs = [_cfg(seed=s) for s in range(5)]
    r = [c.run_id for c in cfgs]
    record = {"runs": [{"run_id": c.run_id, "config": c.identity(), "groups": ["e"],
                        "why": [], "source": None} for c in cfgs],
              "jobs": {"J": {"B1": [r[0], r[1]], "B2": [r[2]], "B3": [r[3]]},
                       "K": {"B4": [r[4]]}}}
    plan = load_plan({"paths": {"results": str(tmp_path / "results")}, "run": RUN,
                      "experiments": {"e": {"grid": {"seed": [9]}}}})
    paths = plan.paths
    for run_id, files in ((r[0], RUN_FILES), (r[1], RUN_FILES[:-1]), (r[3], RUN_FILES)):
        os.makedirs(paths.run_dir(run_id))
        for name in files:
            open(f"{paths.run_dir(run_id)}/{name}", "w").close()
    bundles, every = job_bundles(record, "J", plan)
    assert bundles == [
        {"bundle_id": "B1", "runs": [cfgs[1].identity()], "out_dirs": [paths.run_dir(r[1])],
         "resume": paths.resume_point("B1")},
        {"bundle_id": "B2", "runs": [cfgs[2].identity()], "out_dirs": [paths.run_dir(r[2])],
         "resume": paths.resume_point("B2")}]
    assert every == r[:4]
    assert job_bundles(record, "K", plan) == (
        [{"bundle_id": "B4", "runs": [cfgs[4].identity()], "out_dirs": [paths.run_dir(r[4])],
          "resume": paths.resume_point("B4")}], [r[4]])


# ---------------------------------------------------------------------------------------------
# The record, end to end on a synthetic first stage.


def _summary(plan, accuracy):
    """Every run of ``plan`` settled: two evaluation points at ``accuracy(experiment, cfg)``
    (points), its first experiment read from its figure_group; a bundle's wall time its size
    times a run's steps / 20 (each run of 20 steps measured at 1 s, as the table prices it:
    the plan must not read it)."""
    rows = []
    for run_id, cfg in plan.runs.items():
        group = plan.groups(run_id)
        value = accuracy(group.split("|")[0], cfg)
        wall = plan.bundle_sizes[run_id] * cfg.steps / 20
        for step in (cfg.steps // 2, cfg.steps):
            rows.append({**config_columns(cfg), "run_id": run_id, "figure_group": group,
                         "step": step, "test_accuracy": value / 100, "status": "ok",
                         "wall_time_s": wall})
    return pd.DataFrame(rows)


def _claim(cid, experiment, a, b, paper="fixbn"):
    """A claim of ``a`` over ``b`` (FixBN's: not about its own method, so a contradiction
    needs no tuned values: fednorm.claims.verdicts)."""
    return {"id": cid, "paper": paper, "source": "§4", "words": f"{a} beats {b}",
            "experiment": experiment, "relation": "greater", "a": {"normalizer": a},
            "b": {"normalizer": b}}


# 'one': a single seed; 'many': three seeds
STAGED = {"run": RUN, "execution": {"bundle_size": 4}, "claims": "config/claims.yaml",
          "stage2": {"seeds": [100, 101], "jobs": 2, "share": 2.5},  # 20 of the first 8 s
          "experiments": {
              "one": {"grid": {"normalizer": ["bn", "fbn"], "heterogeneity": [0], "seed": [0]}},
              "many": {"grid": {"normalizer": ["bn", "fbn"], "heterogeneity": [1],
                                "seed": [0, 1, 2]}}}}
WORDS = parse_words({"tuning": None, "claims": [
    _claim("thin", "one", "fbn", "bn"),  # +5 on one seed: inconclusive, needs seeds
    _claim("against", "many", "fbn", "bn"),  # −11.5 ± 1.5 on three seeds: contradicted
    _claim("firm", "many", "bn", "fbn")]})  # its reverse: holds, asks for nothing


def _accuracy(experiment, cfg):
    if experiment == "one":
        return {"fbn": 60.0, "bn": 55.0}[cfg.normalizer]
    return {"fbn": 50.0 - cfg.seed, "bn": 60.0 + cfg.seed / 2}[cfg.normalizer]


def _staged(table, **stage2):
    plan = load_plan({**STAGED, "stage2": {**STAGED["stage2"], "step_costs": table, **stage2}})
    return plan, stage2_record(WORDS, _summary(plan, _accuracy), plan)


def test_the_record_adds_seeds_to_a_thin_claim_and_doubles_a_contradicted_one(table):
    plan, record = _staged(table)
    entries = {e["run_id"]: e for e in record["runs"]}
    first = {(g, c.normalizer, c.seed): r for r, c in plan.runs.items()
             for g in plan.groups(r).split("|")}
    seeded = {with_seed(plan.runs[first["one", n, 0]], s).run_id
              for n in ("bn", "fbn") for s in (100, 101)}
    doubled = {with_budget(plan.runs[first["many", n, s]], 2).run_id: first["many", n, s]
               for n in ("bn", "fbn") for s in (0, 1, 2)}
    assert set(entries) == seeded | set(doubled)  # 'firm' asks for nothing
    for run_id in seeded:
        assert entries[run_id]["groups"] == ["one"] and entries[run_id]["source"] is None
        assert entries[run_id]["why"] == ["seeds: thin"]
    for run_id, source in doubled.items():
        assert entries[run_id]["groups"] == ["many@x2"] and entries[run_id]["source"] == source
        assert entries[run_id]["why"] == ["recheck: against"]
        assert entries[run_id]["config"] == with_budget(plan.runs[source], 2).identity()
    # four seeds at 1 s, six doubled runs at 2 s; the first stage's 8 runs at 1 s (by the
    # table: 'many''s bundles of 3 runs at 3 / 20 s a step, 'one''s of 1 at 1 / 20 s)
    assert (record["seconds"], record["first_seconds"]) == (4 * 1 + 6 * 2, 8)
    assert (record["looks"], record["budget"]) == (2, 2)
    # the jobs: at most stage2.jobs, bundles of at most execution.bundle_size, every run once
    assert 1 <= len(record["jobs"]) <= 2
    bundles = [ids for job in record["jobs"].values() for ids in job.values()]
    assert all(len(ids) <= 4 for ids in bundles)
    trained = [r for ids in bundles for r in ids]
    assert sorted(trained) == sorted(entries)
    # the seeded runs join their experiment: the claim is judged on three seeds next time
    more = plan.with_runs(stage2_runs(record))
    assert len(more.experiments["one"]) == 6 and more.experiments["many@x2"]


def test_the_recheck_comes_before_the_seeds_when_the_time_runs_short(table):
    """12 s of doubled runs fit in 13 (a share of 13/8 of the first stage's 8 s); the seeds'
    4 more do not."""
    _, record = _staged(table, share=13 / 8)
    assert {e["why"][0] for e in record["runs"]} == {"recheck: against"}
    assert record["seconds"] == 12


def test_the_plan_is_the_same_whatever_the_clock_measured(table, tmp_path):
    """Issue 50: two first stages whose results differ only in wall_time_s (here one machine
    1.3 times slower on the contradicted claim's runs, twice as fast on the thin one's, each
    bundle jittered by up to 5 %) give byte-identical records. Priced by wall time, as before,
    the recheck's 12 s would have grown to 15.6 s, past 13/8 of a first stage of 8.8 s, and the
    seeds would have taken its place."""
    plan = load_plan({**STAGED, "stage2": {**STAGED["stage2"], "step_costs": table,
                                           "share": 13 / 8}})
    summary = _summary(plan, _accuracy)
    slower = summary.copy()
    first = slower["figure_group"].str.split("|").str[0]
    jitter = np.random.default_rng(0).uniform(0.95, 1.05, len(slower))
    slower["wall_time_s"] *= first.map({"many": 1.3, "one": 0.5}) * jitter
    pd.testing.assert_frame_equal(slower.drop(columns="wall_time_s"),
                                  summary.drop(columns="wall_time_s"))
    assert not (slower["wall_time_s"] == summary["wall_time_s"]).any()
    files = [write_record(stage2_record(WORDS, s, plan), tmp_path / f"{i}.json")
             for i, s in enumerate((summary, slower))]
    assert files[0].read_bytes() == files[1].read_bytes()
    record = json.loads(files[0].read_text())
    assert {e["why"][0] for e in record["runs"]} == {"recheck: against"}
    assert (record["seconds"], record["first_seconds"]) == (12, 8)


def test_a_claim_two_more_seeds_cannot_decide_is_not_bought(table):
    """'edge': |FBN − BN| ≤ 5 on the one-seed grid, whose margin is +5 exactly (the ledger's
    median seed sd 1.5): its chances after two more seeds are under MIN_POWER (holds needs the
    mean inside ±(5 − 2.8), contradicted outside ±(5 + 3.6)), so with all the time in the world
    the stage buys the contradiction's recheck alone; 'thin' on the same runs (+5 against 0:
    holds with 0.97) buys them."""
    edge = {"id": "edge", "paper": "fixbn", "source": "§4", "words": "about equal",
            "experiment": "one", "relation": "within", "delta": 5.0,
            "a": {"normalizer": "fbn"}, "b": {"normalizer": "bn"}}
    plan = load_plan({**STAGED, "stage2": {**STAGED["stage2"], "step_costs": table,
                                           "share": 16.0}})
    summary = _summary(plan, _accuracy)
    for claims, seeded in (([edge], False), ([edge, _claim("thin", "one", "fbn", "bn")], True)):
        words = parse_words({"tuning": None, "claims": [
            *claims, _claim("against", "many", "fbn", "bn")]})
        record = stage2_record(words, summary, plan)
        why = {w for e in record["runs"] for w in e["why"]}
        assert why == {"recheck: against"} | ({"seeds: thin"} if seeded else set())


def test_the_jobs_do_not_follow_the_order_the_bundles_come_in():
    """Three bundles of equal cost into two jobs: ties go by bundle id, whatever the order of
    ``packed`` (the order requests were granted in)."""
    packed, cost = _packed([[2], [2], [2]])
    jobs = balanced_jobs(packed, cost, 2)
    assert jobs == {"b0+1": ("b0", "b2"), "b1": ("b1",)}
    assert balanced_jobs(dict(reversed(packed.items())), cost, 2) == jobs


# ---------------------------------------------------------------------------------------------
# A run at twice the budget that the first stage already trains: in config/config.yaml, the
# 30 runs of fixbn_tiny_rounds at E = 500 (64,000 steps) doubled are fixbn_tiny_epochs' runs
# at E = 500 (128,000 steps, the same milestones' fractions).


TWINNED = {"run": {**RUN, "lr": [0.1, 0.01]}, "stage2": {"share": 0.01},
           "claims": "config/claims.yaml",
           "experiments": {
               "rounds": {"set": {"steps": 20, "lr_milestones": [10]},
                          "grid": {"normalizer": ["bn", "fbn"], "seed": [0, 1, 2]}},
               "epochs": {"set": {"steps": 40, "lr_milestones": [20]},
                          "grid": {"normalizer": ["bn", "fbn"], "seed": [0, 1, 2]}}}}
TWIN_WORDS = parse_words({"tuning": None, "claims": [
    _claim("rounds", "rounds", "fbn", "bn"),  # contradicted: its runs doubled are 'epochs''
    _claim("epochs", "epochs", "fbn", "bn")]})  # holds on its own runs


def _twin_accuracy(experiment, cfg):
    better = {"rounds": -10.0, "epochs": 10.0}[experiment] - cfg.seed / 2
    return 60.0 + (better if cfg.normalizer == "fbn" else 0.0)


def _twinned(table):
    plan = load_plan({**TWINNED, "stage2": {**TWINNED["stage2"], "step_costs": table}})
    record = stage2_record(TWIN_WORDS, _summary(plan, _twin_accuracy), plan)
    assert {e["run_id"] for e in record["runs"]} == set(plan.experiments["epochs"])
    return plan, record


def test_a_planned_run_the_stage_asks_for_costs_nothing_and_is_not_trained_again(table):
    _, record = _twinned(table)
    assert record["seconds"] == 0 and record["jobs"] == {}
    assert all(e["planned"] for e in record["runs"])


def test_a_first_stage_run_that_is_a_twin_stays_in_the_first_look(table):
    plan, record = _twinned(table)
    both = plan.with_runs(stage2_runs(record))
    ledger = staged_ledger(TWIN_WORDS, _summary(both, _twin_accuracy), record).set_index("id")
    assert ledger.loc["epochs", "verdict"] == HOLDS


# ---------------------------------------------------------------------------------------------
# A claim that compares methods, judged at each method's tuned values: its fresh seeds.

TUNED = {"run": RUN, "execution": {"bundle_size": 4}, "claims": "config/claims.yaml",
         "stage2": {"seeds": [100, 101], "jobs": 2, "share": 0.01},  # no time for seeds
         "experiments": {
             "e": {"grid": {"normalizer": ["bn", "fbn"], "seed": [0, 1]}},
             "tuning": {"set": {"val_fraction": 0.1},
                        "grid": {"normalizer": ["bn", "fbn"], "lr_scale": [1, 4],
                                 "seed": [0]}}}}


def _tuned_accuracy(experiment, cfg):
    """FBN best at lr × 4 on held-out data (its test accuracy 20 points under BN's there:
    leaning to a contradiction), BN at × 1."""
    if experiment == "e":
        return {"fbn": 50.0, "bn": 60.0}[cfg.normalizer] + cfg.seed
    return {("fbn", 4.0): 40.0, ("fbn", 1.0): 30.0, ("bn", 1.0): 60.0,
            ("bn", 4.0): 55.0}[cfg.normalizer, cfg.lr_scale]


def test_a_unit_at_tuned_values_gets_its_fresh_seeds_whatever_the_share_and_its_recheck(table):
    """The chosen values (FBN × 4, BN × 1, chosen on seed 0) on the stage's seeds 100, 101,
    in the tuning experiment, although the share affords nothing; the tuning seed's margin
    (−20) leans to a contradiction of FBN's own claim, so its recheck at twice the budget
    comes too. A claim of another paper's method on the same runs asks the same."""
    plan = load_plan({**TUNED, "stage2": {**TUNED["stage2"], "step_costs": table}})
    summary = _summary(plan, _tuned_accuracy)
    summary["val_accuracy"] = summary["test_accuracy"]
    for paper in ("fbn", "fixbn"):
        words = parse_words({"claims": [_claim("own", "e", "fbn", "bn", paper=paper)]})
        record = stage2_record(words, summary, plan)
        chosen = {n: next(r for r in plan.experiments["tuning"] if plan.runs[r].normalizer == n
                          and plan.runs[r].lr_scale == s) for n, s in (("fbn", 4.0), ("bn", 1.0))}
        fresh = {with_seed(plan.runs[r], s).run_id for r in chosen.values() for s in (100, 101)}
        doubled = {with_budget(with_seed(plan.runs[r], s), 2).run_id
                   for r in chosen.values() for s in (100, 101)}
        entries = {e["run_id"]: e for e in record["runs"]}
        assert set(entries) == fresh | doubled, paper
        assert all(entries[r]["groups"] == ["tuning"] for r in fresh)
        assert {w for e in entries.values() for w in e["why"]} == {"fresh+recheck: own"}
