"""fednorm.tuning: per cell, the learning rate with the best validation accuracy."""

from __future__ import annotations

import math

import pandas as pd

from fednorm.tuning import choices, select_by_validation


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
                rows.append(dict(run_id=run, method=method, regime="IID, E=1", lr_scale=scale,
                                 seed=seed, step=step, status="ok",
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
