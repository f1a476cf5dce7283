"""The claims' second stage chooses its runs (fednorm.claims.stage2): which units ask for what,
which requests the stage's images afford, how its bundles are cut into jobs of about equal
images, and what one training job trains."""

import dataclasses
import os

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from fednorm.claims.stage2 import (
    Request,
    balanced_jobs,
    granted,
    job_bundles,
    stage2_record,
)
from fednorm.claims.words import HOLDS, parse_words
from fednorm.claims.words_ledger import staged_ledger
from fednorm.config import Paths, RunConfig, run_config
from fednorm.plan import RUN_FILES, load_plan
from fednorm.plan.stage2 import Stage2, stage2_runs, with_budget, with_seed
from fednorm.summarize import config_columns

RUN = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
       "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
       "eval_every": 10}
BASE = run_config(RUN)
UNIT = BASE.training_images  # 20 steps x 10 clients x batch 8 = 1,600 images a run
assert UNIT == 1600


def _cfg(**keys) -> RunConfig:
    """A run of the tiny recipe (replace: no validation needed for a bookkeeping test)."""
    return dataclasses.replace(BASE, **keys)


# ---------------------------------------------------------------------------------------------
# Jobs of about equal images.


def _packed(bundle_steps):
    """Bundles 'b0', 'b1', ... whose runs train the given steps each (80 images a step)."""
    configs, packed = {}, {}
    for i, steps in enumerate(bundle_steps):
        cfgs = [_cfg(steps=s, seed=100 * i + k) for k, s in enumerate(steps)]
        configs.update((c.run_id, c) for c in cfgs)
        packed[f"b{i}"] = tuple(c.run_id for c in cfgs)
    return packed, configs


def _images(bundle, packed, configs):
    return sum(configs[r].training_images for r in packed[bundle])


def test_jobs_take_the_largest_bundle_first_into_the_lightest_job():
    """Bundles of 5, 4, 3, 3, 3 units into 2 jobs: 5 | 4; 3 to the 4 (7); 3 to the 5 (8); 3 to
    the 7 (10). The ids are each job's first bundle, '+k' for k more."""
    packed, configs = _packed([[5], [4], [3], [3], [3]])
    assert balanced_jobs(packed, configs, 2) == {"b0+1": ("b0", "b3"),
                                                 "b1+2": ("b1", "b2", "b4")}
    assert balanced_jobs(packed, configs, 9) == {f"b{i}": (f"b{i}",) for i in range(5)}
    assert balanced_jobs(packed, configs, 1) == {"b0+4": ("b0", "b1", "b2", "b3", "b4")}
    assert balanced_jobs({}, {}, 3) == {}


@given(st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=3), min_size=1, max_size=12),
       st.integers(1, 6))
def test_jobs_cover_every_bundle_once_and_differ_by_at_most_the_largest_bundle(steps, jobs):
    """List scheduling's bound: when the heaviest job took its last bundle it was the lightest,
    so it exceeds the final lightest job by at most that bundle."""
    packed, configs = _packed(steps)
    out = balanced_jobs(packed, configs, jobs)
    members = [b for ids in out.values() for b in ids]
    assert sorted(members) == sorted(packed)  # each bundle in exactly one job
    assert len(out) == min(jobs, len(packed))  # at most `jobs`, none empty
    loads = [sum(_images(b, packed, configs) for b in ids) for ids in out.values()]
    largest = max(_images(b, packed, configs) for b in packed)
    assert max(loads) - min(loads) <= largest
    for job, ids in out.items():
        assert job == ids[0] + (f"+{len(ids) - 1}" if len(ids) > 1 else "")


# ---------------------------------------------------------------------------------------------
# Requests granted within the stage's images.


def _request(kind, *seeds, claim="c"):
    runs = tuple((_cfg(seed=s), ("e",)) for s in seeds)
    return Request(kind, claim, "", runs, (None,) * len(runs))


def test_requests_are_granted_by_kind_then_cheapest_first():
    """Rechecks and waits on budget first, cheapest first; then seeds, with their recheck or
    not, cheapest first: a cheap seed request is not starved by a dear one with a recheck."""
    cheap, dear = _request("seeds", 1), _request("seeds", 2, 3)
    both = _request("seeds+recheck", 4, 5, 6)
    budget, recheck = _request("budget", 7, 8), _request("recheck", 9, 10, 11, 12)
    out = granted([dear, cheap, both, budget, recheck], Stage2(max_images=1e9), ())
    assert out == [budget, recheck, cheap, dear, both]


def test_a_request_that_does_not_fit_is_skipped_and_a_cheaper_one_still_granted():
    """4 units: the budget's 2, then the recheck's 3 would exceed it; a 1-unit request fits,
    then the stage is full: a second 1-unit request would not fit."""
    recheck, budget = _request("recheck", 1, 2, 3), _request("budget", 4, 5)
    one, other = _request("seeds", 6, claim="one"), _request("seeds", 7, claim="other")
    out = granted([one, other, budget, recheck], Stage2(max_images=3 * UNIT), ())
    assert out == [budget, one]
    assert sum(r.images(()) for r in out) == 3 * UNIT


def test_a_run_two_requests_share_is_paid_once_and_a_planned_run_not_at_all():
    a, b = _request("seeds", 1, 2, claim="a"), _request("seeds", 1, 3, claim="b")
    assert a.images(()) == b.images(()) == 2 * UNIT
    assert granted([a, b], Stage2(max_images=3 * UNIT), ()) == [a, b]
    assert granted([a, b], Stage2(max_images=3 * UNIT - 1), ()) == [a]
    planned = _cfg(seed=9).run_id
    free = _request("seeds", 9, claim="planned")
    assert free.images([planned]) == 0
    assert granted([a, b, free], Stage2(max_images=3 * UNIT), [planned]) == [free, a, b]


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
    paths = Paths(results=str(tmp_path / "results"))
    for run_id, files in ((r[0], RUN_FILES), (r[1], RUN_FILES[:-1]), (r[3], RUN_FILES)):
        os.makedirs(paths.run_dir(run_id))
        for name in files:
            open(f"{paths.run_dir(run_id)}/{name}", "w").close()
    bundles, every = job_bundles(record, "J", paths)
    assert bundles == [
        {"bundle_id": "B1", "runs": [cfgs[1].identity()], "out_dirs": [paths.run_dir(r[1])],
         "resume": paths.resume_point("B1")},
        {"bundle_id": "B2", "runs": [cfgs[2].identity()], "out_dirs": [paths.run_dir(r[2])],
         "resume": paths.resume_point("B2")}]
    assert every == r[:4]
    assert job_bundles(record, "K", paths) == (
        [{"bundle_id": "B4", "runs": [cfgs[4].identity()], "out_dirs": [paths.run_dir(r[4])],
          "resume": paths.resume_point("B4")}], [r[4]])


# ---------------------------------------------------------------------------------------------
# The record, end to end on a synthetic first stage.


def _summary(plan, accuracy):
    """Every run of ``plan`` settled: two evaluation points at ``accuracy(experiment, cfg)``
    (points), its first experiment read from its figure_group."""
    rows = []
    for run_id, cfg in plan.runs.items():
        group = plan.groups(run_id)
        value = accuracy(group.split("|")[0], cfg)
        for step in (cfg.steps // 2, cfg.steps):
            rows.append({**config_columns(cfg), "run_id": run_id, "figure_group": group,
                         "step": step, "test_accuracy": value / 100, "status": "ok"})
    return pd.DataFrame(rows)


def _claim(cid, experiment, a, b):
    return {"id": cid, "paper": "fbn", "source": "§4", "words": f"{a} beats {b}",
            "experiment": experiment, "relation": "greater", "a": {"normalizer": a},
            "b": {"normalizer": b}}


# 'one': a single seed; 'many': three seeds
STAGED = {"run": RUN, "execution": {"bundle_size": 4},
          "stage2": {"seeds": [100, 101], "jobs": 2},
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


def _staged(**stage2):
    plan = load_plan({**STAGED, "stage2": {**STAGED["stage2"], **stage2}})
    return plan, stage2_record(WORDS, _summary(plan, _accuracy), plan)


def test_the_record_adds_seeds_to_a_thin_claim_and_doubles_a_contradicted_one():
    plan, record = _staged()
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
    configs = {r: cfg for r, (cfg, _) in stage2_runs(record).items()}
    assert record["images"] == sum(c.training_images for c in configs.values())
    assert record["images"] == 4 * UNIT + 6 * 2 * UNIT
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


def test_the_recheck_comes_before_the_seeds_when_the_images_run_short():
    """12 units of doubled runs fit in 13; the seeds' 4 more do not."""
    _, record = _staged(max_images=13 * UNIT)
    assert {e["why"][0] for e in record["runs"]} == {"recheck: against"}
    assert record["images"] == 12 * UNIT


# ---------------------------------------------------------------------------------------------
# A run at twice the budget that the first stage already trains: in config/config.yaml, the
# 30 runs of fixbn_tiny_rounds at E = 500 (64,000 steps) doubled are fixbn_tiny_epochs' runs
# at E = 500 (128,000 steps, the same milestones' fractions).


TWINNED = {"run": {**RUN, "lr": [0.1, 0.01]}, "stage2": {"max_images": 1000},
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


def _twinned():
    plan = load_plan(TWINNED)
    record = stage2_record(TWIN_WORDS, _summary(plan, _twin_accuracy), plan)
    assert {e["run_id"] for e in record["runs"]} == set(plan.experiments["epochs"])
    return plan, record


def test_a_planned_run_the_stage_asks_for_is_not_counted_in_its_images():
    plan, record = _twinned()
    assert record["images"] <= plan.stage2.max_images


def test_a_first_stage_run_that_is_a_twin_stays_in_the_first_look():
    plan, record = _twinned()
    both = plan.with_runs(stage2_runs(record))
    ledger = staged_ledger(TWIN_WORDS, _summary(both, _twin_accuracy), record).set_index("id")
    assert ledger.loc["epochs", "verdict"] == HOLDS
