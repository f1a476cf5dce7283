"""The claims' second stage as the plan sees it (fednorm.plan.stage2): its section checked at the
door, a run at a multiple of its budget, the plan extended by the stage's runs, and the runs
read back from the stage's record."""

import dataclasses

import pytest

from fednorm.claims.stage2 import read_record, write_record
from fednorm.config import ConfigError, RunConfig, run_config
from fednorm.plan import load_plan
from fednorm.plan.stage2 import (
    STAGE2_KEYS,
    Stage2,
    load_stage2,
    stage2_runs,
    with_budget,
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
    assert stage == Stage2(seeds=(100, 101), budget=2, jobs=4)
    assert load_plan({**CONFIG, "stage2": {}}).stage2 == stage
    assert set(STAGE2_KEYS) == {f.name for f in dataclasses.fields(Stage2)}


def test_the_suffix_names_the_budgets_factor():
    assert Stage2().suffix() == "@x2"
    assert Stage2(budget=3).suffix() == "@x3"


def test_the_stages_seeds_move_by_the_configs_offset():
    """seed_offset moves every grid's seeds; the stage's move with them, so that two disjoint
    seed sets stay disjoint in the second stage too."""
    plan = load_plan({**CONFIG, "seed_offset": 2, "stage2": {"seeds": [100]}})
    assert plan.stage2 is not None and plan.stage2.seeds == (102,)
    assert load_plan({**CONFIG, "stage2": {"seeds": [100]}}).stage2.seeds == (100,)
    assert load_stage2({"seeds": [5, 7]}, offset=3).seeds == (8, 10)


def test_given_values_are_kept():
    stage = load_stage2({"seeds": [7], "budget": 3, "jobs": 6})
    assert stage == Stage2(seeds=(7,), budget=3, jobs=6)


@pytest.mark.parametrize(("key", "value"), [
    ("seeds", []), ("seeds", [-1]), ("seeds", 100), ("budget", 1), ("budget", 2.0),
    ("jobs", 0), ("jobs", True)])
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
# A run at a multiple of its budget; a run on another seed.


def test_a_doubled_budget_scales_steps_and_milestones_only():
    cfg = _run(steps=300, lr=[0.1, 0.01, 0.001], lr_milestones=[100, 200])
    doubled = with_budget(cfg, 2)
    assert (doubled.steps, doubled.lr_milestones) == (600, (200, 400))
    drop = ("steps", "lr_milestones")
    assert ({k: v for k, v in doubled.identity().items() if k not in drop}
            == {k: v for k, v in cfg.identity().items() if k not in drop})
    assert isinstance(doubled, RunConfig) and run_config(doubled.identity()) == doubled
    assert doubled.run_id != cfg.run_id
    assert doubled.training_images == 2 * cfg.training_images
    assert with_budget(cfg, 3).steps == 900


def test_a_doubled_budget_keeps_a_schedule_given_as_fractions():
    """A budget given as epochs with lr_decay_at resolves to steps and milestones; doubling
    keeps each milestone's share of the steps. Where the fractions fall on round boundaries at
    both budgets, the doubled run is the one that twice the epochs gives."""
    spec = {**{k: v for k, v in RUN.items() if k not in ("steps", "lr_milestones")},
            "lr": [0.1, 0.01, 0.001], "local_steps": 2, "lr_decay_at": [0.5, 0.75]}
    cfg = run_config({**spec, "epochs": 4})  # 10 rounds of E = 2: milestones at rounds 5, 8
    assert (cfg.steps, cfg.lr_milestones) == (20, (10, 16))
    doubled = with_budget(cfg, 2)
    assert [m / doubled.steps for m in doubled.lr_milestones] == [
        m / cfg.steps for m in cfg.lr_milestones]
    exact = run_config({**spec, "local_steps": 1, "epochs": 4})  # 20 rounds: 10, 15
    assert with_budget(exact, 2) == run_config({**spec, "local_steps": 1, "epochs": 8})


def test_a_doubled_budget_is_validated_as_any_run():
    cfg = _run(steps=2**30, lr=[0.1, 0.01], lr_milestones=[10])
    with pytest.raises(ConfigError, match=r"at 2x its budget.*key 'steps' has value 2147483648"):
        with_budget(cfg, 2)


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
    doubled = with_budget(plan.runs[bn], 2)
    extra = {seeded.run_id: (seeded, ("a", "b")), doubled.run_id: (doubled, ("a@x2",)),
             fbn: (plan.runs[fbn], ("a",))}  # already in 'a': joins it once
    more = plan.with_runs(extra)
    assert more.runs == {**runs, seeded.run_id: seeded, doubled.run_id: doubled}
    assert more.experiments == {"a": (*experiments["a"], seeded.run_id),
                                "b": (*experiments["b"], seeded.run_id),
                                "a@x2": (doubled.run_id,)}
    assert more.groups(seeded.run_id) == "a|b"
    assert more.groups(doubled.run_id) == "a@x2"
    assert more.groups(fbn) == "a|b"
    # the plan itself is unchanged, and frozen
    assert plan.runs == runs and plan.experiments == experiments
    assert "a@x2" not in plan.experiments and plan.groups(seeded.run_id) == ""
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
    configs = {iid: ("a", "b"), with_budget(iid, 2): ("a@x2",), with_seed(gamma, 101): ("c",)}
    record = {"looks": 2, "budget": 2, "runs": [
        {"run_id": cfg.run_id, "config": cfg.identity(), "groups": list(groups), "why": [],
         "source": None} for cfg, groups in configs.items()]}
    path = tmp_path / "stage2" / "plan.json"
    write_record(record, path)
    read = read_record(path)
    assert read == record
    assert stage2_runs(read) == {cfg.run_id: (cfg, groups) for cfg, groups in configs.items()}
    assert stage2_runs({}) == {}


def test_writing_a_record_returns_its_path(tmp_path):
    path = tmp_path / "plan.json"
    assert write_record({"runs": []}, path) == path
