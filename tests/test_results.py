"""fednorm.results on a results folder written by hand: each number below is computed by hand
from the rows, or independently of the code under test (a least-squares fit by numpy, a
rejection rate by simulation), never by it."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fednorm.plots import curve_data
from fednorm.results import (
    ALPHA,
    SETTLED_FLOOR,
    experiments,
    final_points,
    load_norm_error,
    load_summary,
    lr_milestones,
    run_values,
    seed_stats,
    select,
    settling,
    varying_keys,
    window_points,
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


def test_the_window_value_is_the_mean_over_the_last_quarter_after_the_last_drop():
    """Each run's value by hand: the mean of its points at steps >= 3/4 of its last step and
    after its last lr drop; at least its last 2 after the drop; 1 after the drop: that one."""
    rng = np.random.default_rng(5)
    accs = rng.uniform(0.3, 0.9, len(STEPS))
    runs = {"plain": ("g", "ok", STEPS, accs),
            "sparse": ("g", "ok", (0, 50, 100), (0.1, 0.5, 0.6)),  # 75..100 holds only 100
            "dead": ("g", "diverged", STEPS, accs),
            "nan-end": ("g", "ok", STEPS, np.r_[accs[:-1], math.nan])}
    value = run_values(_frame(runs), at="window").set_index("run_id")["value"]
    assert value["plain"] == pytest.approx(accs[STEPS >= 300].mean(), rel=1e-12)
    assert value["sparse"] == pytest.approx((0.5 + 0.6) / 2)
    assert math.isnan(value["dead"])
    # the last point with a value is at 380: its window is 285 ... 380
    assert value["nan-end"] == pytest.approx(accs[(STEPS >= 285) & (STEPS < 400)].mean())
    dropped = run_values(_frame(runs, "[100, 340]"), at="window").set_index("run_id")["value"]
    assert dropped["plain"] == pytest.approx(accs[STEPS > 340].mean(), rel=1e-12)
    one = _frame({"late": ("g", "ok", (0, 50, 100), (0.1, 0.5, 0.6))}, "[60]")
    assert run_values(one, at="window")["value"].tolist() == [0.6]  # one point after 60
    # the points of the value are those settling tests
    points = window_points(_frame(runs), "test_accuracy")
    assert points.groupby("run_id")["test_accuracy"].mean().to_dict() == pytest.approx(
        value.dropna().to_dict(), rel=1e-12)


def test_the_window_value_of_flat_noisy_runs_has_the_variance_of_a_mean():
    """2,000 runs flat at 0.6 with independent noise of sd 0.02 at each point: the window's
    6 points (300 ... 400) give a value of sd 0.02 / sqrt(6), the last point alone 0.02; the
    sample sd of 2,000 values is within 5 % of its truth (its relative error ~ 1.6 %)."""
    rng = np.random.default_rng(6)
    runs = {f"r{i}": ("g", "ok", STEPS, 0.6 + rng.normal(0, 0.02, len(STEPS)))
            for i in range(2000)}
    summary = _frame(runs)
    window = run_values(summary, at="window")["value"].std()
    final = run_values(summary)["value"].std()
    assert window == pytest.approx(0.02 / math.sqrt(6), rel=0.05)
    assert final == pytest.approx(0.02, rel=0.05)


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
    ({"at": "best"}, "at has value 'best'; allowed: one of ['final', 'max', 'window']"),
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
    # the window per layer: steps 0 and 20, the window (15 ... 20) too short: the last 2
    windows = run_values(errors, ["layer"], y="mean_error", per=["run_id", "layer"],
                         at="window")
    assert windows.set_index(["run_id", "layer"])["value"].to_dict() == pytest.approx({
        ("bn-s0", "conv1"): 0.1, ("bn-s0", "conv2"): 1.1,
        ("fbn-s0", "conv1"): 0.1, ("fbn-s0", "conv2"): 1.1})
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


def _frame(runs, milestones="[]"):
    """A summary (run_id -> (group, status, steps, accuracies)), each run with the
    ``lr_milestones`` text the summary writes."""
    return pd.DataFrame([{"run_id": r, "group": g, "status": status, "step": step,
                          "test_accuracy": a, "lr_milestones": milestones}
                         for r, (g, status, steps, accs) in runs.items()
                         for step, a in zip(steps, accs, strict=True)])


STEPS = np.arange(0, 401, 20)  # a 400-step budget: its last quarter holds 300, 320, ..., 400


def _group(name, rise, noise, rng, runs=3, steps=STEPS, jump_at=300):
    """``runs`` seeds of a setting flat at 0.6 until ``jump_at``, then rising linearly by
    ``rise`` up to the end, with Gaussian noise of sd ``noise``."""
    trend = rise * np.clip((steps - jump_at) / (steps[-1] - jump_at), 0, 1)
    return {f"{name}-{i}": (name, "ok", steps, 0.6 + trend + rng.normal(0, noise, len(steps)))
            for i in range(runs)}


@pytest.mark.parametrize(("value", "steps"), [
    ("[100, 200]", (100, 200)), ("[]", ()), ("(340,)", (340,)), ("100", (100,)),
    ((100, 200), (100, 200)), ([1000], (1000,)), (np.array([5, 7]), (5, 7)), (250.0, (250,)),
    (None, ()), (math.nan, ()), ("", ()),
])
def test_lr_milestones_read_from_the_summary_text_a_sequence_or_nothing(value, steps):
    assert lr_milestones(value) == steps


@pytest.mark.parametrize("value", ["[100, x]", "[12.5]", [-3], "{'a': 1}"])
def test_lr_milestones_that_are_not_steps_are_an_error_naming_the_value(value):
    with pytest.raises(ValueError, match=r"lr_milestones has value .*allowed: a list of steps"):
        lr_milestones(value)


def test_a_rise_of_5_points_climbs_and_a_flat_noisy_group_has_settled():
    rng = np.random.default_rng(0)
    summary = _frame({**_group("rising", 0.05, 0.003, rng), **_group("flat", 0.0, 0.03, rng),
                      "dead": ("flat", "diverged", STEPS, np.linspace(0.0, 1.0, len(STEPS)))})
    out = settling(summary, ["group"]).set_index("group")
    assert dict(out["settled"]) == {"flat": True, "rising": False}
    assert out.loc["rising", "gain"] == pytest.approx(0.05, abs=3 * out.loc["rising", "gain_se"])
    assert out.loc["rising", "p"] < 0.05 < out.loc["flat", "p"]
    # 3 runs x 6 points, one intercept per run and a slope; the diverged run adds nothing
    assert (out["df"] == 6 * 3 - 3 - 1).all() and (out["window"] == 100).all()
    assert out.loc["flat", "n_seeds"] == 3
    # the best point's spread is of the runs' best values; the trend is of the accuracy
    best = settling(summary, ["group"], at="max").set_index("group")
    assert best["gain"].tolist() == out["gain"].tolist()
    assert best.loc["flat", "spread"] != out.loc["flat", "spread"]


def test_a_rise_below_the_floor_has_settled_and_one_above_it_climbs():
    rng = np.random.default_rng(1)
    summary = _frame({**_group("half", 0.005, 0.0002, rng), **_group("two", 0.02, 0.0002, rng)})
    out = settling(summary, ["group"]).set_index("group")
    assert out.loc["half", "gain"] == pytest.approx(0.005, abs=0.0005)
    assert dict(out["settled"]) == {"half": True, "two": False}  # H0 is gain <= 1 point
    assert out.loc["half", "p"] > 0.99 and out.loc["two", "p"] < 1e-6
    assert not settling(summary, ["group"], floor=0.001).set_index("group").loc["half",
                                                                               "settled"]


def test_a_jump_at_an_lr_drop_in_the_last_quarter_is_left_out_of_the_window():
    rng = np.random.default_rng(2)
    runs = {f"drop-{i}": ("drop", "ok", STEPS, np.where(STEPS > 340, 0.7, 0.6)
                          + rng.normal(0, 0.003, len(STEPS))) for i in range(3)}
    after = settling(_frame(runs, "[100, 340]"))  # 340 trained at the old rate: a step
    assert after["settled"].iloc[0] and after["window"].iloc[0] == 400 - 360
    as_tuples = _frame(runs).assign(lr_milestones=[(100, 340)] * len(STEPS) * 3)
    assert settling(as_tuples).equals(after)  # as a frame built from RunConfigs holds them
    without = settling(_frame(runs, "[100]"))  # the same points, the drop unknown
    assert not without["settled"].iloc[0] and without["gain"].iloc[0] > 0.05


def test_slope_and_standard_error_equal_least_squares_with_one_intercept_per_run():
    rng = np.random.default_rng(3)
    windows = {"a": np.arange(150, 201, 10), "b": np.arange(120, 161, 20),
               "c": np.arange(300, 401, 25)}  # each run's last quarter, ends 200, 160, 400
    accs = {r: 0.5 + 0.001 * steps + rng.normal(0, 0.02, len(steps))
            for r, steps in windows.items()}
    summary = _frame({r: ("g", "ok", np.r_[0, steps], np.r_[0.0, accs[r]])  # step 0: outside
                      for r, steps in windows.items()})
    out = settling(summary).iloc[0]
    design = np.vstack([np.c_[np.eye(3)[[i] * len(s)], s] for i, s in enumerate(windows.values())])
    y = np.concatenate(list(accs.values()))
    beta, rss, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - 3 - 1
    se = math.sqrt(rss[0] / df * np.linalg.inv(design.T @ design)[-1, -1])
    length = np.mean([s[-1] - s[0] for s in windows.values()])
    assert out["df"] == df and out["window"] == length
    assert out["gain"] / length == pytest.approx(beta[-1], rel=1e-12)
    assert out["gain_se"] / length == pytest.approx(se, rel=1e-12)
    assert out["p"] == pytest.approx(stats.t.sf((out["gain"] - 0.01) / out["gain_se"], df))
    # what it could gain over one more window: the upper one-sided (1 − α) bound of the gain
    assert out["reach"] == pytest.approx(length * (beta[-1] + stats.t.ppf(1 - ALPHA, df) * se),
                                         rel=1e-12)


def test_at_the_floor_the_test_calls_climbing_at_the_rate_alpha():
    """2000 groups of 2 runs x 5 window points (steps 120 ... 160), gaining exactly the floor
    over the window with Gaussian noise: a level-α test rejects at rate α. Monte Carlo error:
    √(α(1 − α) / 2000) = 0.0049; the bound is 3 of those."""
    rng = np.random.default_rng(4)
    groups, steps = 2000, np.arange(120, 161, 10)
    accs = 0.6 + SETTLED_FLOOR * (steps - 120) / 40 + rng.normal(0, 0.01, (groups, 2, 5))
    summary = pd.DataFrame({
        "group": np.repeat(np.arange(groups), 10), "run_id": np.repeat(np.arange(2 * groups), 5),
        "status": "ok", "step": np.tile(steps, 2 * groups), "test_accuracy": accs.ravel()})
    out = settling(summary, ["group"])
    assert (out["df"] == 10 - 2 - 1).all()
    error = math.sqrt(ALPHA * (1 - ALPHA) / groups)
    assert abs((~out["settled"]).mean() - ALPHA) < 3 * error


def test_without_a_slope_to_test_a_group_settles_unless_its_gain_shows_a_climb():
    summary = _frame({
        "dead": ("dead", "diverged", (0, 10, 20), (0.1, 0.5, math.nan)),
        "end-only": ("end-only", "ok", (40,), (0.7,)),
        "sparse": ("sparse", "ok", (0, 50, 100), (0.1, 0.5, 0.6)),  # the last 2: +10 points
        "flat-two": ("flat-two", "ok", (0, 50, 100), (0.1, 0.6, 0.605)),
    })
    out = settling(summary, ["group"]).set_index("group")
    assert dict(out["settled"]) == {"dead": True, "end-only": True, "flat-two": True,
                                    "sparse": False}
    assert out.loc[["dead", "end-only"], "gain"].isna().all()
    assert out.loc["sparse", "gain"] == pytest.approx(0.1) and out.loc["sparse", "df"] == 0
    assert out.loc["sparse", "reach"] == pytest.approx(0.1)  # no SE: the gain itself
    assert out.loc[["dead", "end-only"], "reach"].isna().all()
    assert out.loc["dead", "n_seeds"] == 0 and math.isnan(out.loc["sparse", "p"])
    # after a drop at 50 only the point at 100 is left: too few for a slope
    after_drop = _frame({"s": ("s", "ok", (0, 50, 100), (0.1, 0.5, 0.6))}, "[50]")
    assert math.isnan(settling(after_drop)["gain"].iloc[0])
