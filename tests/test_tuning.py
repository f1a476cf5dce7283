"""fednorm.tuning: per cell, the learning rate with the best validation accuracy."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fednorm.figures import draw, tuning_table
from fednorm.plan import Figure
from fednorm.tuning import beyond, choices, select_by_validation


def frame() -> pd.DataFrame:
    """Two methods x one regime, lr_scale 0.5 / 1 / 2, two seeds, two evaluation rows each.
    The test accuracy is made to favour other choices than the validation accuracy does."""
    rows = []
    val = {("bn", 0.5): 0.6, ("bn", 1.0): 0.8, ("bn", 2.0): 0.7,
           ("fbn", 0.5): 0.5, ("fbn", 1.0): 0.4, ("fbn", 2.0): math.nan}
    test = {("bn", 0.5): 0.99, ("bn", 1.0): 0.1, ("bn", 2.0): 0.5,
            ("fbn", 0.5): 0.2, ("fbn", 1.0): 0.3, ("fbn", 2.0): 0.99}
    for (method, scale), v in val.items():
        for seed in (0, 1):
            run = f"{method}-{scale}-{seed}"
            for step, factor in ((0, 0.0), (10, 1.0)):
                rows.append(dict(run_id=run, figure_group="tuning", method=method,
                                 regime="IID, E=1", lr_scale=scale, seed=seed, step=step,
                                 status="ok",
                                 val_accuracy=v * factor + 0.01 * seed,
                                 test_accuracy=test[method, scale]))
    return pd.DataFrame(rows)


def test_the_choice_is_the_best_final_validation_accuracy_never_the_test_one():
    chosen = choices(frame(), ["method", "regime"])
    assert dict(zip(chosen["method"], chosen["lr_scale"], strict=True)) == {"bn": 1.0,
                                                                           "fbn": 0.5}
    # changing every test accuracy changes nothing
    other = frame().assign(test_accuracy=lambda f: 1 - f["test_accuracy"])
    assert choices(other, ["method", "regime"]).equals(chosen)


def test_a_diverged_seed_rules_its_learning_rate_out_and_ties_go_to_the_smaller():
    f = frame()
    f.loc[(f["method"] == "bn") & (f["lr_scale"] == 1.0) & (f["seed"] == 1),
          "status"] = "diverged"
    assert choices(f, ["method", "regime"]).set_index("method")["lr_scale"]["bn"] == 2.0
    tie = frame().assign(val_accuracy=0.5)
    assert set(choices(tie, ["method", "regime"])["lr_scale"]) == {0.5}


def test_selection_keeps_every_row_of_the_chosen_runs_only():
    picked = select_by_validation(frame(), ["method", "regime"])
    assert sorted(picked["run_id"].unique()) == ["bn-1.0-0", "bn-1.0-1", "fbn-0.5-0",
                                                 "fbn-0.5-1"]
    assert len(picked) == 8


def test_the_tuning_table_reports_the_chosen_runs_test_accuracy_beside_the_common_recipes():
    """bn: lr x 1 chosen (val 80 / 81 %), test 10 %, which is also its common recipe; fbn: lr x
    0.5 chosen (val 50 / 51 %), test 20 %, its common recipe (lr x 1) 30 %."""
    table = tuning_table(frame(), ["method", "regime"]).set_index("method")
    assert table["lr_scale"].to_dict() == {"bn": 1.0, "fbn": 0.5}
    assert table["val_accuracy"].to_dict() == pytest.approx({"bn": 80.5, "fbn": 50.5})
    assert table["tuned_mean"].to_dict() == pytest.approx({"bn": 10.0, "fbn": 20.0})
    assert table["common_mean"].to_dict() == pytest.approx({"bn": 10.0, "fbn": 30.0})
    assert table["n_seeds"].to_dict() == {"bn": 2, "fbn": 2}
    assert table["edge"].to_dict() == {"bn": "", "fbn": "lr_scale:low"}
    assert table["chosen"].to_dict() == {"bn": "lr × 1", "fbn": "lr × 0.5↓"}
    assert table["grid"].to_dict() == {"bn": "lr × 0.5, 1, 2", "fbn": "lr × 0.5, 1, 2"}
    # the best at the largest factor: marked 'high'; one factor swept: no edge
    high = frame()
    high.loc[high["lr_scale"] == 2.0, "val_accuracy"] = 0.99
    assert choices(high, ["method", "regime"])["edge"].tolist() == ["lr_scale:high"] * 2
    alone = frame()[lambda f: f["lr_scale"] == 1.0]
    assert choices(alone, ["method", "regime"])["edge"].tolist() == ["", ""]


def test_a_tuning_figure_writes_the_table_as_csv_and_markdown_in_the_figure_order(tmp_path):
    fig = Figure("compare/tuning", ("tuning",), "tuning", rows="method", cols="regime",
                 select="val_accuracy", orders=(("method", ("fbn", "bn")),))
    csv, md = draw(fig, frame(), tmp_path / "tuning")
    assert pd.read_csv(csv)["method"].tolist() == ["fbn", "bn"]
    lines = md.read_text().splitlines()
    assert lines[2].startswith("| method | regime | swept | chosen | val accuracy (chosen) |")
    assert lines[4] == ("| FBN | IID, E=1 | lr × 0.5, 1, 2 | lr × 0.5↓ | 50.50 | 20.00 ± 0.00 | "
                        "– | 30.00 ± 0.00 | 2 + 0 |")
    assert lines[5].startswith("| Naive BN | IID, E=1 | lr × 0.5, 1, 2 | lr × 1 |")
    assert "never on the test set" in md.read_text()
    assert "↓: the smallest value swept (the best may lie beyond it" in md.read_text()
    assert pd.read_csv(csv, keep_default_na=False).set_index("method")["edge"].to_dict() == {
        "fbn": "lr_scale:low", "bn": ""}


def test_a_combination_no_run_has_is_left_out(tmp_path):
    """A method tuned in one setting only (the quick grids tune 9 of 16 methods at E = 5): no
    row for it in the other setting, and no error."""
    other = frame()[lambda f: f["method"] == "bn"].assign(
        regime="IID, E=5", run_id=lambda f: f["run_id"] + "-E5")
    fig = Figure("compare/tuning", ("tuning",), "tuning", rows="method", cols="regime",
                 select="val_accuracy")
    csv, md = draw(fig, pd.concat([frame(), other]), tmp_path / "tuning")
    rows = pd.read_csv(csv)[["method", "regime"]].values.tolist()
    assert rows == [["bn", "IID, E=1"], ["bn", "IID, E=5"], ["fbn", "IID, E=1"]]
    assert "| FBN | IID, E=5 |" not in md.read_text()


def test_a_table_with_select_shows_each_cells_chosen_runs_only(tmp_path):
    fig = Figure("t", ("tuning",), "table", rows="method", cols="regime",
                 select="val_accuracy", extra=("lr_scale",))
    csv, _ = draw(fig, frame(), tmp_path / "t")
    data = pd.read_csv(csv).set_index("method")
    assert data["mean"].to_dict() == pytest.approx({"bn": 10.0, "fbn": 20.0})
    assert data["lr_scale"].to_dict() == {"bn": 1.0, "fbn": 0.5}


def _joint() -> pd.DataFrame:
    """FedWon swept over lr × {1, 4} and λ {0.01, 0.16, none} on tuning seeds 0, 1 (val best
    at × 4, λ none; test best elsewhere), and its choice again on the fresh seeds 100, 101."""
    rows = []
    val = {(1.0, 0.01): 0.2, (1.0, 0.16): 0.5, (1.0, None): 0.6,
           (4.0, 0.01): 0.3, (4.0, 0.16): 0.7, (4.0, None): 0.8}
    for (scale, lam), v in val.items():
        seeds = (0, 1, 100, 101) if (scale, lam) == (4.0, None) else (0, 1)
        for seed in seeds:
            fresh = seed >= 100
            rows.append(dict(run_id=f"{scale}-{lam}-{seed}", method="fedwon", regime="Dir",
                             lr_scale=scale, agc_lambda=lam, seed=seed, step=10, status="ok",
                             # the fresh seeds score low on validation: never read
                             val_accuracy=0.0 if fresh else v + 0.01 * seed,
                             test_accuracy=0.4 if fresh else 1.0 - v))
    return pd.DataFrame(rows)


def test_the_rate_and_a_methods_own_key_are_chosen_jointly_on_the_tuning_seeds_only():
    """The joint best on the seeds every combination has (× 4, no clipping: λ none, the
    limit λ → ∞, the sweep's high end but no edge: nothing lies beyond it); the fresh seeds at
    that choice, however low their validation accuracy, never move it; the table keeps them
    apart from the tuning seeds."""
    chosen = choices(_joint(), ["method"]).iloc[0]
    assert (chosen["lr_scale"], chosen["agc_lambda"]) == (4.0, math.inf)
    assert chosen["score"] == pytest.approx(0.805) and chosen["n_seeds"] == 2
    assert chosen["edge"] == "lr_scale:high"
    picked = select_by_validation(_joint(), ["method"])
    assert sorted(picked["seed"]) == [0, 1, 100, 101]
    assert picked["agc_lambda"].isna().all()  # the rows as they were: null
    table = tuning_table(_joint(), ["method"]).iloc[0]
    assert table["chosen"] == "lr × 4↑, λ none"
    assert table["grid"] == "lr × 1, 4; λ 0.01, 0.16, none"
    assert table["tuned_mean"] == pytest.approx(20.0)  # 1 - 0.8 on seeds 0, 1
    assert table["fresh_mean"] == pytest.approx(40.0) and table["fresh_seeds"] == 2
    assert table["common_mean"] == pytest.approx(80.0)  # lr × 1 at λ 0.01 (the default)


def test_under_feature_shift_the_table_reads_the_mean_over_the_domains():
    """A run with domains is tested on domain_accuracy (as its claims and its validation
    are), one without on test_accuracy."""
    rows = _joint().assign(domain_accuracy=lambda f: f["test_accuracy"] / 2)
    rows.loc[rows["seed"] == 1, "domain_accuracy"] = float("nan")  # no domains: test's
    table = tuning_table(rows, ["method"]).iloc[0]
    assert table["tuned_mean"] == pytest.approx((0.2 / 2 + 0.2) / 2 * 100)


@pytest.mark.parametrize(("key", "values", "side", "expected"), [
    ("lr_scale", [0.25, 1, 4, 16], "high", 64.0),  # the rates' own step, × 4
    ("lr_scale", [0.25, 1, 4, 16], "low", 0.0625),
    ("lr_scale", [0.5, 1, 2, 4, 8], "high", 16.0),  # the paper's grid: × 2
    ("agc_lambda", [0.01, 0.16, 0.64, math.inf], "low", 0.01 * 0.01 / 0.16),
    ("agc_lambda", [0.01, 0.16, 0.64, math.inf], "high", None),  # none: the limit
    ("hybridbn_momentum", [0.002, 1.0], "high", None),  # its rule allows at most 1
    ("hybridbn_momentum", [0.002, 1.0], "low", 0.002 * 0.002),
    ("lr_scale", [4.0], "high", None),  # one value: no step
])
def test_a_grid_extends_by_its_own_geometric_step_where_its_key_goes_on(key, values, side,
                                                                         expected):
    got = beyond(key, values, side)
    assert got == (None if expected is None else pytest.approx(expected, rel=1e-12))


def test_a_choice_at_a_natural_bound_is_no_edge_but_one_at_a_rule_free_end_is():
    """λ 0.01 (the sweep's low end: 0.000625 lies beyond) is an edge; smoothing 1 (its rule's
    bound) is none; the rate's low end is."""
    rows = []
    for lam, scale, v in ((0.01, 1.0, 0.9), (0.16, 1.0, 0.5), (0.01, 4.0, 0.4),
                          (0.16, 4.0, 0.3)):
        rows += [dict(run_id=f"{lam}-{scale}-{s}", method="fedwon", lr_scale=scale,
                      agc_lambda=lam, seed=s, step=10, status="ok", val_accuracy=v)
                 for s in (0, 1, 2)]
    assert choices(pd.DataFrame(rows), ["method"])["edge"].tolist() == [
        "lr_scale:low,agc_lambda:low"]
    hybrid = pd.DataFrame([dict(run_id=f"{m}-{s}", method="hybridbn", lr_scale=1.0,
                                hybridbn_momentum=m, seed=s, step=10, status="ok",
                                val_accuracy=0.9 if m == 1.0 else 0.5)
                           for m in (0.002, 1.0) for s in (0, 1, 2)])
    assert choices(hybrid, ["method"])["edge"].tolist() == [""]
