"""The claims' second stage trains what the design fixes (fednorm.claims.stage2): the tuned
methods' fresh seeds and each contradicted unit at twice the budget, nothing else; how its
bundles are cut into jobs of about equal modelled time, that its plan does not follow the
clock, and what one training job trains."""

import dataclasses
import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fednorm.claims.stage2 import balanced_jobs, job_bundles, stage2_record, write_record
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
          "stage2": {"seeds": [100, 101], "jobs": 2},
          "experiments": {
              "one": {"grid": {"normalizer": ["bn", "fbn"], "heterogeneity": [0], "seed": [0]}},
              "many": {"grid": {"normalizer": ["bn", "fbn"], "heterogeneity": [1],
                                "seed": [0, 1, 2]}}}}
WORDS = parse_words({"tuning": None, "claims": [
    _claim("thin", "one", "fbn", "bn"),  # +5 on one seed: inconclusive, and no seed is bought
    _claim("against", "many", "fbn", "bn"),  # −11.5 ± 1.5 on three seeds: contradicted
    _claim("firm", "many", "bn", "fbn")]})  # its reverse: holds, asks for nothing


def _accuracy(experiment, cfg):
    if experiment == "one":
        return {"fbn": 60.0, "bn": 55.0}[cfg.normalizer]
    return {"fbn": 50.0 - cfg.seed, "bn": 60.0 + cfg.seed / 2}[cfg.normalizer]


def _staged(table, **stage2):
    plan = load_plan({**STAGED, "stage2": {**STAGED["stage2"], "step_costs": table, **stage2}})
    return plan, stage2_record(WORDS, _summary(plan, _accuracy), plan)


def test_the_record_doubles_a_contradicted_unit_and_buys_no_seeds(table):
    """The design fixes the seeds: a thin claim stays thin (no seed is bought), a firm one asks
    for nothing, a contradicted one gets its runs at twice the budget."""
    plan, record = _staged(table)
    entries = {e["run_id"]: e for e in record["runs"]}
    first = {(g, c.normalizer, c.seed): r for r, c in plan.runs.items()
             for g in plan.groups(r).split("|")}
    doubled = {with_budget(plan.runs[first["many", n, s]], 2).run_id: first["many", n, s]
               for n in ("bn", "fbn") for s in (0, 1, 2)}
    assert set(entries) == set(doubled)  # 'thin' and 'firm' ask for nothing
    for run_id, source in doubled.items():
        assert entries[run_id]["groups"] == ["many@x2"] and entries[run_id]["source"] == source
        assert entries[run_id]["why"] == ["recheck: against"]
        assert entries[run_id]["config"] == with_budget(plan.runs[source], 2).identity()
    # six doubled runs at 2 s; the first stage's 8 runs at 1 s (by the table: 'many''s
    # bundles of 3 runs at 3 / 20 s a step, 'one''s of 1 at 1 / 20 s)
    assert (record["seconds"], record["first_seconds"]) == (6 * 2, 8)
    assert record["budget"] == 2 and "looks" not in record
    # the jobs: at most stage2.jobs, bundles of at most execution.bundle_size, every run once
    assert 1 <= len(record["jobs"]) <= 2
    bundles = [ids for job in record["jobs"].values() for ids in job.values()]
    assert all(len(ids) <= 4 for ids in bundles)
    trained = [r for ids in bundles for r in ids]
    assert sorted(trained) == sorted(entries)
    # the doubled runs join their experiments' twins, which no claim selects
    more = plan.with_runs(stage2_runs(record))
    assert len(more.experiments["one"]) == 2 and len(more.experiments["many@x2"]) == 6


def test_the_plan_is_the_same_whatever_the_clock_measured(table, tmp_path):
    """Two first stages whose results differ only in wall_time_s (one machine 1.3 times slower
    on the contradicted claim's runs, twice as fast on the thin one's, each bundle jittered by
    up to 5 %) give byte-identical records: jobs are balanced by the modelled cost."""
    plan = load_plan({**STAGED, "stage2": {**STAGED["stage2"], "step_costs": table}})
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


TWINNED = {"run": {**RUN, "lr": [0.1, 0.01]}, "stage2": {},
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
         "stage2": {"seeds": [100, 101], "jobs": 2},
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


def test_a_unit_at_tuned_values_gets_its_fresh_seeds_and_its_recheck(table):
    """The chosen values (FBN × 4, BN × 1, chosen on seed 0) on the stage's seeds 100, 101,
    in the tuning experiment; the tuning seed's margin
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
