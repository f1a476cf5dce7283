"""The claims' second stage as the plan sees it (fednorm.plan.stage2): its section checked at the
door (the removed ``budget`` refused by name), a run on another seed, the plan extended by the
stage's runs, and the runs read back from the stage's record."""

import dataclasses

import pytest

from fednorm.claims.stage2 import read_record, write_record
from fednorm.config import ConfigError, run_config
from fednorm.plan import load_plan
from fednorm.plan.stage2 import (
    STAGE2_KEYS,
    Stage2,
    load_stage2,
    stage2_runs,
    with_seed,
)

RUN = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
       "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
       "eval_every": 10}
# 'b' shares its seed-0 run with 'a' (fbn at seed 0)
CONFIG = {"run": RUN, "claims": "config/claims.yaml", "experiments": {
    "a": {"grid": {"normalizer": ["bn", "fbn"], "seed": [0]}},
    "b": {"grid": {"normalizer": ["fbn"], "seed": [0, 1]}}}}


def _run(**keys):
    return run_config({**RUN, **keys})


# ---------------------------------------------------------------------------------------------
# The section.


def test_no_section_is_no_second_stage():
    assert load_stage2(None) is None
    assert load_plan(CONFIG).stage2 is None
    assert load_plan({**CONFIG, "stage2": None}).stage2 is None


def test_no_claims_file_is_no_second_stage_but_its_section_is_checked():
    """The stage serves the claims ledger (a profile with `claims: null`, like the SLURM test's
    subset, has none); a bad value is still an error before any job."""
    assert load_plan({**CONFIG, "claims": None, "stage2": {}}).stage2 is None
    with pytest.raises(ConfigError, match="stage2: key 'jobs'"):
        load_plan({**CONFIG, "claims": None, "stage2": {"jobs": 0}})


def test_an_empty_section_takes_the_defaults():
    stage = load_stage2({})
    assert stage == Stage2(seeds=(100, 101), jobs=4)
    assert load_plan({**CONFIG, "stage2": {}}).stage2 == stage
    assert set(STAGE2_KEYS) == {f.name for f in dataclasses.fields(Stage2)}


def test_the_removed_budget_key_is_refused_by_name_whatever_its_value():
    """The second stage trains no run at another budget (one look on the design fixed before
    the runs): a profile that still sets ``budget`` fails before any job, in one line naming
    the key, its value and that it was removed."""
    for value in (2, 1, None):
        with pytest.raises(ConfigError) as err:
            load_plan({**CONFIG, "stage2": {"seeds": [100], "budget": value}})
        message = str(err.value)
        assert message.startswith(f"stage2: key 'budget' has value {value!r}; allowed: ")
        assert "removed" in message and "\n" not in message
    assert "budget" not in STAGE2_KEYS


def test_the_stages_seeds_move_by_the_configs_offset():
    """seed_offset moves every grid's seeds; the stage's move with them, so that two disjoint
    seed sets stay disjoint in the second stage too."""
    plan = load_plan({**CONFIG, "seed_offset": 2, "stage2": {"seeds": [100]}})
    assert plan.stage2 is not None and plan.stage2.seeds == (102,)
    assert load_plan({**CONFIG, "stage2": {"seeds": [100]}}).stage2.seeds == (100,)
    assert load_stage2({"seeds": [5, 7]}, offset=3).seeds == (8, 10)


def test_given_values_are_kept():
    stage = load_stage2({"seeds": [7], "jobs": 6})
    assert stage == Stage2(seeds=(7,), jobs=6)


@pytest.mark.parametrize(("key", "value"), [
    ("seeds", []), ("seeds", [-1]), ("seeds", 100), ("jobs", 0), ("jobs", True)])
def test_a_bad_value_names_the_section_the_key_and_the_value(key, value):
    with pytest.raises(ConfigError) as err:
        load_plan({**CONFIG, "stage2": {key: value}})
    assert str(err.value).startswith(f"stage2: key '{key}' has value {value!r}; allowed: ")


def test_an_unknown_key_names_the_section_and_the_key():
    with pytest.raises(ConfigError) as err:
        load_plan({**CONFIG, "stage2": {"nope": 1}})
    message = str(err.value)
    assert message.startswith("stage2: unknown key 'nope'")
    assert all(key in message for key in STAGE2_KEYS)


def test_a_section_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match=r"^stage2: expected a mapping, got \[100\]"):
        load_stage2([100])


# ---------------------------------------------------------------------------------------------
# A run on another seed.


def test_another_seed_changes_the_seed_and_the_run_id_only():
    cfg = _run(normalizer="bn")
    moved = with_seed(cfg, 100)
    assert moved.seed == 100 and moved.run_id != cfg.run_id
    assert dataclasses.replace(moved, seed=0) == cfg


# ---------------------------------------------------------------------------------------------
# The plan with the stage's runs.


def test_a_plan_with_runs_adds_them_to_their_experiments_and_leaves_the_plan_as_it_was():
    plan = load_plan(CONFIG)
    runs, experiments = dict(plan.runs), dict(plan.experiments)
    bn, fbn = (next(r for r, c in plan.runs.items() if c.normalizer == n and c.seed == 0)
               for n in ("bn", "fbn"))
    seeded = with_seed(plan.runs[fbn], 100)
    other = with_seed(plan.runs[bn], 101)
    extra = {seeded.run_id: (seeded, ("a", "b")), other.run_id: (other, ("c",)),
             fbn: (plan.runs[fbn], ("a",))}  # already in 'a': joins it once
    more = plan.with_runs(extra)
    assert more.runs == {**runs, seeded.run_id: seeded, other.run_id: other}
    assert more.experiments == {"a": (*experiments["a"], seeded.run_id),
                                "b": (*experiments["b"], seeded.run_id),
                                "c": (other.run_id,)}
    assert more.groups(seeded.run_id) == "a|b"
    assert more.groups(other.run_id) == "c"
    assert more.groups(fbn) == "a|b"
    # the plan itself is unchanged, and frozen
    assert plan.runs == runs and plan.experiments == experiments
    assert "c" not in plan.experiments and plan.groups(seeded.run_id) == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.runs = {}  # type: ignore[misc]
    # the first stage's bundles and jobs: the second stage's runs train in their own jobs
    assert (more.bundles, more.jobs, more.figures) == (plan.bundles, plan.jobs, plan.figures)
    assert plan.with_runs({}) == plan


# ---------------------------------------------------------------------------------------------
# The record's runs, read back.


def test_the_stages_runs_round_trip_through_its_record(tmp_path):
    iid = _run(partition="iid", heterogeneity=None, lr=[0.1, 0.05], lr_milestones=[10])
    gamma = _run(partition="gamma", heterogeneity=0.5, attack="sf", f=2, aggregator="median")
    configs = {iid: ("a", "b"), with_seed(iid, 100): ("a",), with_seed(gamma, 101): ("c",)}
    record = {"runs": [
        {"run_id": cfg.run_id, "config": cfg.identity(), "groups": list(groups), "why": [],
         "planned": False} for cfg, groups in configs.items()]}
    path = tmp_path / "stage2" / "plan.json"
    write_record(record, path)
    read = read_record(path)
    assert read == record
    assert stage2_runs(read) == {cfg.run_id: (cfg, groups) for cfg, groups in configs.items()}
    assert stage2_runs({}) == {}


def test_writing_a_record_returns_its_path(tmp_path):
    path = tmp_path / "plan.json"
    assert write_record({"runs": []}, path) == path
