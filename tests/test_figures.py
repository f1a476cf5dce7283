"""Which summary rows a configured figure draws."""

import pandas as pd

from fednorm.config import Figure
from fednorm.figures import figure_rows


def _summary() -> pd.DataFrame:
    rows = [  # run, groups, normalizer, attack, aggregator
        ("a", "clean", "bn", "none", "mean"),
        ("b", "clean", "central", "none", "mean"),
        ("c", "clean|attacked", "fbn", "none", "mean"),
        ("d", "attacked", "fbn", "sf", "mean"),
        ("e", "attacked", "fbn", "alie", "mean"),
        ("f", "defended", "fbn", "sf", "median"),
        ("g", "defended", "fbn", "sf", "trimmed_mean"),
        ("h", "other", "fbn", "sf", "median"),
    ]
    return pd.DataFrame(rows, columns=["run_id", "figure_group", "normalizer", "attack",
                                       "aggregator"])


def test_rows_of_any_listed_experiment_whose_keys_are_in_the_lists():
    fig = Figure("f", ("clean", "attacked", "defended"), "curves",
                 where=(("normalizer", ("bn", "fbn")), ("attack", ("none", "sf")),
                        ("aggregator", ("mean", "median"))))
    assert list(figure_rows(fig, _summary()).run_id) == ["a", "c", "d", "f"]


def test_a_single_value_filter_is_an_equality():
    fig = Figure("f", ("attacked",), "curves", where=(("attack", "sf"),))
    assert list(figure_rows(fig, _summary()).run_id) == ["d"]
