"""fednorm.results on a results folder written by hand: each number below is computed by hand
from the rows, not by the code under test."""

import math

import pandas as pd
import pytest

from fednorm.plots import curve_data
from fednorm.results import (
    experiments,
    final_points,
    load_norm_error,
    load_summary,
    run_values,
    seed_stats,
    select,
    settling,
    varying_keys,
)

# run -> (figure_group, normalizer, heterogeneity, seed, status, accuracy at steps 0, 10, 20)
RUNS = {
    "bn-s0": ("fbn_gamma", "bn", 0.0, 0, "ok", (0.1, 0.5, 0.6)),
    "bn-s1": ("fbn_gamma", "bn", 0.0, 1, "ok", (0.1, 0.9, 0.8)),  # its best is not its final
    "bn-s2": ("fbn_gamma", "bn", 0.0, 2, "diverged", (0.95, 0.3, math.nan)),
    "fbn-s0": ("fbn_gamma|compare", "fbn", 0.0, 0, "ok", (0.2, 0.7, math.nan)),  # NaN at the end
    "fbn-iid": ("compare", "fbn", math.nan, 0, "ok", (0.2, 0.4, 0.5)),
}
LAYERS = {"bn-s0": ("conv1", "conv2"), "fbn-s0": ("conv1", "conv2")}  # the others: no rows


@pytest.fixture
def results(tmp_path):
    rows = []
    for run_id, (group, norm, het, seed, status, accs) in RUNS.items():
        for step, acc in zip((0, 10, 20), accs, strict=True):
            rows.append({"run_id": run_id, "figure_group": group, "normalizer": norm,
                         "heterogeneity": het, "seed": seed, "step": step,
                         "test_accuracy": acc, "test_loss": 1 - acc, "status": status,
                         "wall_time_s": 2.0})
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        if run_id in LAYERS:
            errors = [{"step": s, "layer": la, "mean_error": s / 100 + i, "var_error": 0.5}
                      for s in (0, 20) for i, la in enumerate(LAYERS[run_id])]
            pd.DataFrame(errors).to_csv(run_dir / "norm_error.csv", index=False)
        elif run_id == "bn-s1":  # as a run without BN layers writes it: a header only
            (run_dir / "norm_error.csv").write_text("step,layer,mean_error,var_error\n")
    pd.DataFrame(rows).to_csv(tmp_path / "summary.csv", index=False)
    return tmp_path


def test_a_missing_summary_names_its_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no {tmp_path}/summary.csv"):
        load_summary(tmp_path)


def test_final_and_best_point_per_run(results):
    summary = load_summary(results)
    final = run_values(summary, ["normalizer"]).set_index("run_id")
    assert final.loc["bn-s0", "value"] == 0.6 and final.loc["bn-s1", "value"] == 0.8
    assert final.loc["fbn-s0", "value"] == 0.7  # the last non-NaN value, not the NaN
    assert math.isnan(final.loc["bn-s2", "value"]) and final.loc["bn-s2", "diverged"]
    best = run_values(summary, y="test_accuracy", at="max").set_index("run_id")["value"]
    assert best["bn-s1"] == 0.9 and math.isnan(best["bn-s2"])  # its 0.95 never counts
    two = run_values(summary, last=2).set_index("run_id")["value"]
    assert two["bn-s0"] == pytest.approx((0.5 + 0.6) / 2)


def test_final_points_is_one_row_per_run_with_its_config(results):
    points = final_points(load_summary(results)).set_index("run_id")
    assert sorted(points.index) == sorted(RUNS)
    assert points.loc["bn-s1", ["normalizer", "seed", "status"]].tolist() == ["bn", 1, "ok"]
    assert points.loc["bn-s1", "test_loss"] == pytest.approx(1 - 0.8)
    assert points["diverged"].tolist() == [RUNS[r][4] == "diverged" for r in points.index]
    assert "step" not in points.columns


def test_seed_mean_and_std_leave_the_diverged_run_out_and_count_it(results):
    stats = seed_stats(load_summary(results), ["normalizer", "heterogeneity"])
    bn = stats[stats.normalizer == "bn"].iloc[0]
    assert bn["mean"] == pytest.approx(0.7)  # (0.6 + 0.8) / 2: bn-s2 left out
    assert bn["std"] == pytest.approx(math.sqrt(((0.6 - 0.7) ** 2 + (0.8 - 0.7) ** 2) / 1))
    assert (bn["min"], bn["max"]) == (0.6, 0.8)
    assert (bn["n_seeds"], bn["n_diverged"]) == (2, 1)
    best = seed_stats(load_summary(results), ["normalizer"], at="max").set_index("normalizer")
    assert best.loc["bn", "mean"] == pytest.approx((0.6 + 0.9) / 2)
    everything = seed_stats(select(load_summary(results), "fbn_gamma", normalizer="bn"), [])
    assert len(everything) == 1 and everything["mean"].iloc[0] == pytest.approx(0.7)


def test_select_by_experiment_and_keys(results):
    summary = load_summary(results)
    assert experiments(summary) == ["compare", "fbn_gamma"]
    assert set(select(summary, "compare").run_id) == {"fbn-s0", "fbn-iid"}
    assert set(select(summary, "fbn_gamma", normalizer="bn", seed=[0, 1]).run_id) == {
        "bn-s0", "bn-s1"}
    assert set(select(summary, heterogeneity=None).run_id) == {"fbn-iid"}  # IID: empty
    assert set(select(summary, heterogeneity=0.0, normalizer="fbn").run_id) == {"fbn-s0"}


@pytest.mark.parametrize(("experiment", "where", "message"), [
    ("fbn_dirichlet", {}, "experiment 'fbn_dirichlet' has no run; allowed: one of "
                          "['compare', 'fbn_gamma']"),
    (None, {"normaliser": "bn"}, "key 'normaliser' is not a column; allowed: ['run_id', "),
    ("fbn_gamma", {"normalizer": "gn"}, "key 'normalizer' has no row with value 'gn'; "
                                        "allowed: one of ['bn', 'fbn']"),
    ("compare", {"seed": [0, 3]}, "key 'seed' has no row with value 3; allowed: one of [0]"),
])
def test_a_selection_that_selects_nothing_names_key_and_allowed_values(
        results, experiment, where, message):
    with pytest.raises(ValueError) as error:
        select(load_summary(results), experiment, **where)
    assert message in str(error.value)


@pytest.mark.parametrize(("kw", "message"), [
    ({"at": "best"}, "at has value 'best'; allowed: one of ['final', 'max']"),
    ({"last": 0}, "last has value 0; allowed: an integer >= 1"),
    ({"y": "accuracy"}, "missing columns ['accuracy']"),
])
def test_run_values_rejects_bad_arguments(results, kw, message):
    with pytest.raises(ValueError) as error:
        run_values(load_summary(results), **kw)
    assert message in str(error.value)


def test_norm_error_per_layer_with_the_config_columns(results):
    errors = load_norm_error(results)
    assert len(errors) == 2 * 2 * 2  # 2 runs with a file x 2 steps x 2 layers
    assert set(errors.run_id) == set(LAYERS)
    row = errors[(errors.run_id == "fbn-s0") & (errors.layer == "conv2") & (errors.step == 20)]
    assert row[["mean_error", "normalizer", "figure_group"]].iloc[0].tolist() == [
        pytest.approx(1.2), "fbn", "fbn_gamma|compare"]


def test_per_layer_values_and_curves_treat_each_layer_of_a_run_as_a_series(results):
    errors = load_norm_error(results)
    finals = run_values(errors, ["layer"], y="mean_error", per=["run_id", "layer"])
    assert finals.set_index(["run_id", "layer"])["value"].to_dict() == pytest.approx({
        ("bn-s0", "conv1"): 0.2, ("bn-s0", "conv2"): 1.2,
        ("fbn-s0", "conv1"): 0.2, ("fbn-s0", "conv2"): 1.2})
    with pytest.raises(ValueError, match=r"\['layer'\] vary within a run"):
        run_values(errors, ["layer"], y="mean_error")  # per run alone: the layers mix
    curves = curve_data(errors, y="mean_error", hue=["normalizer", "layer"])
    assert (curves["n_runs"] == 1).all() and (curves["n_diverged"] == 0).all()
    assert len(curves) == 2 * 2 * 2  # normalizers x layers x steps


def test_varying_keys_are_the_config_keys_the_runs_differ_in_beyond_seeds(results):
    summary = load_summary(results)
    assert set(varying_keys(summary)) == {"normalizer", "heterogeneity"}
    bn = select(summary, normalizer="bn")
    assert varying_keys(bn) == [] and varying_keys(bn, but=()) == ["seed"]


def _curves(runs):
    """A summary of runs (run_id -> (group, status, accuracies at steps 0, 10, 20, 30, 40))."""
    return pd.DataFrame([{"run_id": r, "group": g, "status": status, "step": 10 * i,
                          "test_accuracy": a} for r, (g, status, accs) in runs.items()
                         for i, a in enumerate(accs)])


def test_a_group_has_settled_when_its_last_quarter_gains_at_most_max_1_point_its_spread():
    summary = _curves({
        "climbing-0": ("climbing", "ok", (0.1, 0.5, 0.6, 0.70, 0.74)),  # +4 points after 30
        "climbing-1": ("climbing", "ok", (0.1, 0.5, 0.6, 0.70, 0.72)),  # +2: group +3
        "flat": ("flat", "ok", (0.1, 0.5, 0.6, 0.80, 0.805)),  # +0.5 < 1 point, one seed
        "noisy-0": ("noisy", "ok", (0.1, 0.5, 0.6, 0.57, 0.60)),  # +3, but the seeds'
        "noisy-1": ("noisy", "ok", (0.1, 0.5, 0.6, 0.67, 0.70)),  # finals spread 7.1 points
        "dead": ("dead", "diverged", (0.1, 0.5, math.nan, math.nan, math.nan)),
    })
    out = settling(summary, ["group"]).set_index("group")
    assert out.loc["climbing", "gain"] == pytest.approx(0.03)
    assert out.loc["noisy", "spread"] == pytest.approx(math.sqrt(2) * 0.05)
    assert dict(out["settled"]) == {"climbing": False, "dead": True, "flat": True,
                                    "noisy": True}
    # the best point: the climbing runs' best also rose by 3 points on average
    best = settling(summary, ["group"], at="max").set_index("group")
    assert best.loc["climbing", "gain"] == pytest.approx(0.03)
    # a run evaluated only at its end shows no climb
    assert settling(summary[summary.step == 40], ["group"])["settled"].all()
