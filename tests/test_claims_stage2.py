"""The claims' second stage trains what the design fixes (fednorm.claims.stage2): the tuned
methods' fresh seeds, nothing else (no seed bought, no run at another budget, whatever the
verdicts); how its bundles are cut into jobs of about equal modelled time, that its plan does
not follow the clock, and what one training job trains."""

import dataclasses
import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fednorm.claims.power import check_tuning_seeds, judged_seeds
from fednorm.claims.stage2 import balanced_jobs, job_bundles, stage2_record, write_record
from fednorm.claims.words import parse_words
from fednorm.config import ConfigError, RunConfig, run_config
from fednorm.plan import RUN_FILES, load_plan
from fednorm.plan.stage2 import stage2_runs, with_seed
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
        wall = plan.bundle_sizes.get(run_id, 1) * cfg.steps / 20  # no bundle: alone
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


def test_the_record_asks_nothing_of_a_contradicted_a_thin_or_a_firm_unit(table):
    """The design fixes the seeds and the budget: a thin claim stays thin (no seed is bought),
    a firm one asks for nothing, and a contradicted one neither (no recheck at another
    budget): without tuned values there is nothing to train."""
    _, record = _staged(table)
    assert record["runs"] == [] and record["jobs"] == {}
    assert (record["seconds"], record["first_seconds"]) == (0, 8)
    assert set(record) == {"runs", "jobs", "seconds", "first_seconds"}


def test_the_jobs_do_not_follow_the_order_the_bundles_come_in():
    """Three bundles of equal cost into two jobs: ties go by bundle id, whatever the order of
    ``packed`` (the order requests were granted in)."""
    packed, cost = _packed([[2], [2], [2]])
    jobs = balanced_jobs(packed, cost, 2)
    assert jobs == {"b0+1": ("b0", "b2"), "b1": ("b1",)}
    assert balanced_jobs(dict(reversed(packed.items())), cost, 2) == jobs


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


def _tuned_record(table, paper="fbn", summary=None):
    plan = load_plan({**TUNED, "stage2": {**TUNED["stage2"], "step_costs": table}})
    if summary is None:
        summary = _summary(plan, _tuned_accuracy)
        summary["val_accuracy"] = summary["test_accuracy"]
    words = parse_words({"claims": [_claim("own", "e", "fbn", "bn", paper=paper)]})
    return plan, summary, stage2_record(words, summary, plan)


def test_a_unit_at_tuned_values_gets_its_fresh_seeds_and_nothing_else(table):
    """The chosen values (FBN × 4, BN × 1, chosen on seed 0) on the stage's seeds 100, 101, in
    the tuning experiment; the tuning seed's margin (−20) leans to a contradiction of FBN's own
    claim, and nothing more is asked for it: no run at another budget. A claim of another
    paper's method on the same runs asks the same."""
    for paper in ("fbn", "fixbn"):
        plan, _, record = _tuned_record(table, paper)
        chosen = {n: next(r for r in plan.experiments["tuning"] if plan.runs[r].normalizer == n
                          and plan.runs[r].lr_scale == s) for n, s in (("fbn", 4.0), ("bn", 1.0))}
        fresh = {with_seed(plan.runs[r], s).run_id for r in chosen.values() for s in (100, 101)}
        entries = {e["run_id"]: e for e in record["runs"]}
        assert set(entries) == fresh, paper
        assert all(entries[r]["groups"] == ["tuning"] for r in fresh)
        assert {w for e in entries.values() for w in e["why"]} == {"fresh: own"}
        # four runs of 20 steps at 1 s each, in at most stage2.jobs jobs
        assert record["seconds"] == 4 and 1 <= len(record["jobs"]) <= 2


def test_the_second_stage_plans_no_run_at_another_budget(table):
    """Every run the stage adds is a run of the first stage on another seed: the same config
    but its seed (so the same steps, milestones and budget), whatever the first stage found."""
    plan, _, record = _tuned_record(table)
    assert record["runs"]
    for cfg, _ in stage2_runs(record).values():
        assert cfg.seed in plan.stage2.seeds
        copies = [r for r, c in plan.runs.items() if dataclasses.replace(c, seed=cfg.seed) == cfg]
        assert len(copies) == 1
        source = plan.runs[copies[0]]
        assert (cfg.steps, cfg.lr_milestones, cfg.training_images) == (
            source.steps, source.lr_milestones, source.training_images)


def test_the_plan_is_the_same_whatever_the_clock_measured(table, tmp_path):
    """Two first stages whose results differ only in wall_time_s (one machine 1.3 times slower
    on the tuning's runs, twice as fast on the others, each bundle jittered by up to 5 %) give
    byte-identical records: jobs are balanced by the modelled cost."""
    _, summary, _ = _tuned_record(table)
    slower = summary.copy()
    first = slower["figure_group"].str.split("|").str[0]
    jitter = np.random.default_rng(0).uniform(0.95, 1.05, len(slower))
    slower["wall_time_s"] *= first.map({"tuning": 1.3, "e": 0.5}) * jitter
    pd.testing.assert_frame_equal(slower.drop(columns="wall_time_s"),
                                  summary.drop(columns="wall_time_s"))
    assert not (slower["wall_time_s"] == summary["wall_time_s"]).any()
    files = [write_record(_tuned_record(table, summary=s)[2], tmp_path / f"{i}.json")
             for i, s in enumerate((summary, slower))]
    assert files[0].read_bytes() == files[1].read_bytes()
    record = json.loads(files[0].read_text())
    assert {e["why"][0] for e in record["runs"]} == {"fresh: own"}
    assert record["seconds"] == 4


def test_a_tuning_seed_that_judges_is_a_config_error_before_any_job():
    """The fresh seeds that judge stay disjoint from the tuning seeds: a stage-2 seed that the
    tuning has (0), or a tuning seed that a claim's own experiment judges on, is refused naming
    the tuning experiment and the shared seed; disjoint seeds pass."""
    words = parse_words({"claims": [_claim("own", "e", "fbn", "bn")]})
    check_tuning_seeds(words, load_plan(TUNED))  # fresh 100, 101; tuning 0; e judged fresh
    with pytest.raises(ConfigError, match=r"^experiments.tuning: key 'seed' has the judged "
                                          r"seed\(s\) \[0\]; allowed: "):
        check_tuning_seeds(words, load_plan({**TUNED, "stage2": {"seeds": [0, 101]}}))
    # a claim judged on its own runs (not comparing methods): e's seeds 0, 1 judge it
    within = parse_words({"claims": [{**_claim("seeds", "e", "fbn", "bn"),
                                      "where": {"normalizer": "fbn"}, "a": {"seed": 1},
                                      "b": {"seed": 0}}]})
    with pytest.raises(ConfigError, match=r"judged seed\(s\) \[0\]"):
        check_tuning_seeds(within, load_plan(TUNED))
    assert 0 not in judged_seeds(words, load_plan(TUNED))
