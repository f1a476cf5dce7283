"""What a run costs by the cost model (fednorm.plan.costs): steps x the table's bundle seconds
per step of its shape over its bundle's size, linear in the size between measured ones, per
run beyond them, by training images where the table lacks the shape; a bad table is an error
naming the key before any job."""

import dataclasses
import math

import pytest

from fednorm.config import ConfigError, run_config
from fednorm.plan import load_plan, merged_config
from fednorm.plan.costs import COLUMNS, TABLE, load_step_costs, shape_of

RUN = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
       "hidden": 8, "batch_size": 8, "steps": 200, "lr": [0.1], "lr_milestones": [],
       "eval_every": 10, "normalizer": "bn"}
BASE = run_config(RUN)  # 10 clients of 8 images, E = 1, bn: 80 images a step
HEADER = ",".join(COLUMNS)
# S at R = 1, 4, 16: 0.1, 0.25, 0.85 s a bundle step
ROWS = ["synthetic,fbn_cnn,8,4,80,dsgd,bn,1,0.1", "synthetic,fbn_cnn,8,4,80,dsgd,bn,4,0.25",
        "synthetic,fbn_cnn,8,4,80,dsgd,bn,16,0.85"]


def _table(tmp_path, *rows, header=HEADER, name="costs.csv"):
    path = tmp_path / name
    path.write_text("\n".join(["# a comment line", header, *rows]) + "\n")
    return str(path)


def test_a_shape_is_what_the_table_keys():
    assert shape_of(BASE) == ("synthetic", "fbn_cnn", 8, 4, 80, "dsgd", "bn")
    fedavg = dataclasses.replace(BASE, local_steps=5, participation=0.5, normalizer="gn")
    assert shape_of(fedavg) == ("synthetic", "fbn_cnn", 8, 4, 40, "fedavg", "gn")


@pytest.mark.parametrize(("runs", "seconds"), [
    (1, 200 * 0.1),  # measured
    (4, 200 * 0.25 / 4),  # measured: 12.5
    (2, 200 * (0.1 + 0.15 / 3) / 2),  # a third of the way from R = 1 to 4: S = 0.15, 15 s
    (10, 200 * (0.25 + 0.6 * 6 / 12) / 10),  # half way from 4 to 16: S = 0.55, 11 s
    (32, 200 * 0.85 / 16),  # beyond 16: 16's seconds a run, 10.625 s
])
def test_a_run_costs_its_steps_times_its_bundles_step_over_its_size(tmp_path, runs, seconds):
    costs = load_step_costs(_table(tmp_path, *ROWS))
    assert math.isclose(costs.run_seconds(BASE, runs), seconds, rel_tol=1e-12)
    assert costs.covers(BASE)


def test_a_shape_the_table_lacks_costs_its_training_images_at_the_median_rate(tmp_path):
    """Seconds per image of a run: 0.1 / 80, 0.25 / 320, 0.85 / 1280; median 0.25 / 320. A
    run of 16 images a step (other batch), 100 steps, in a bundle of 3: 1,600 images."""
    costs = load_step_costs(_table(tmp_path, *ROWS))
    other = dataclasses.replace(BASE, batch_size=16, steps=100)
    assert not costs.covers(other)
    assert math.isclose(costs.run_seconds(other, 3), 100 * 160 * 0.25 / 320, rel_tol=1e-12)


def test_the_committed_table_covers_the_quick_profile():
    """Every shape of `make quick`'s first stage is measured (none priced by the fallback)."""
    plan = load_plan(merged_config(["config/config.yaml", "config/quick.yaml"]))
    assert plan.stage2 is not None and plan.stage2.step_costs is None
    costs = load_step_costs(str(TABLE))
    assert all(costs.covers(cfg) for cfg in plan.runs.values())


@pytest.mark.parametrize(("rows", "header", "problem"), [
    (ROWS, HEADER.replace("images", "imgs"), "columns"),
    (["synthetic,fbn_cnn,8,4,80,dsgd,bn,1,0"], HEADER, "seconds > 0"),
    (["synthetic,fbn_cnn,8,4,80,e5,bn,1,0.1"], HEADER, "local dsgd or fedavg"),
    (["synthetic,fbn_cnn,8,four,80,dsgd,bn,1,0.1"], HEADER, "integers for image_size"),
    ([], HEADER, "no rows"),
])
def test_a_bad_table_is_an_error_naming_the_key_and_the_file(tmp_path, rows, header, problem):
    path = _table(tmp_path, *rows, header=header, name=f"{problem[:4]}.csv")
    config = {"run": RUN, "claims": "config/claims.yaml", "stage2": {"step_costs": path},
              "experiments": {"e": {"grid": {"seed": [0]}}}}
    with pytest.raises(ConfigError, match="stage2: key 'step_costs'") as err:
        load_plan(config)
    assert path in str(err.value) and problem in str(err.value)


def test_a_missing_table_or_a_path_that_is_not_one_is_an_error(tmp_path):
    config = {"run": RUN, "claims": "config/claims.yaml",
              "experiments": {"e": {"grid": {"seed": [0]}}}}
    missing = str(tmp_path / "none.csv")
    with pytest.raises(ConfigError, match=f"stage2: key 'step_costs' has value '{missing}': "
                                          "no such file"):
        load_plan({**config, "stage2": {"step_costs": missing}})
    with pytest.raises(ConfigError, match="stage2: key 'step_costs' has value 5; allowed: "
                                          "null or a path to a CSV file"):
        load_plan({**config, "stage2": {"step_costs": 5}})
