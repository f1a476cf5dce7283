"""A new axis is never averaged away: bn_momentum added to the quick profile's FBN γ grid (as
docs/configuration.md walks through) is its own line in FBN's Fig 3a and its CSV, a figure
with no room for it refuses naming it, and the claims ledger never pools its two values."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import yaml

from fednorm.claims.words import parse_words
from fednorm.claims.words_ledger import words_ledger
from fednorm.figures import averaged_keys, draw, figure_rows
from fednorm.plan import load_plan
from fednorm.plan.pipeline import merged_config
from fednorm.summarize import config_columns
from fednorm.tuning import tuned_keys
from tests.dag import ROOT

MOMENTA = (0.01, 0.1)
STEPS = (10, 20)


def _plan(tmp_path):
    quick = yaml.safe_load((ROOT / "config/quick.yaml").read_text())
    quick["experiments"]["fbn_gamma"]["grid"]["bn_momentum"] = list(MOMENTA)
    (tmp_path / "quick.yaml").write_text(yaml.safe_dump(quick))
    return load_plan(merged_config([ROOT / "config/config.yaml", tmp_path / "quick.yaml"]))


def _accuracy(cfg) -> float:
    """Final accuracy by momentum alone: 0.5 at 0.01, 0.9 at 0.1 (their mean 0.7 would be the
    averaged-away figure)."""
    return 0.5 if cfg.bn_momentum == MOMENTA[0] else 0.9


def _summary(plan) -> pd.DataFrame:
    """A summary of the FBN γ experiment's runs, built without training."""
    rows = [{**config_columns(cfg), "run_id": cfg.run_id, "figure_group": plan.groups(run_id),
             "step": step, "test_accuracy": _accuracy(cfg), "status": "ok"}
            for run_id in plan.experiments["fbn_gamma"] for cfg in [plan.runs[run_id]]
            for step in STEPS]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    plan = _plan(tmp_path_factory.mktemp("config"))
    return plan, _summary(plan)


def test_the_plan_trains_both_momenta(planned):
    plan, _ = planned
    momenta = {plan.runs[r].bn_momentum for r in plan.experiments["fbn_gamma"]}
    assert momenta == set(MOMENTA)
    # 4 normalizers x 3 heterogeneities x 6 seeds, now at 2 momenta
    assert len(plan.experiments["fbn_gamma"]) == 4 * 3 * 6 * 2


def test_fig3a_draws_each_momentum_as_its_own_line(planned, tmp_path):
    plan, summary = planned
    fig = plan.figures["fbn/fig3a"]
    assert "bn_momentum" not in fig.hue and averaged_keys(fig, summary) == ["bn_momentum"]
    draw(fig, summary, tmp_path / "fig3a")
    data = pd.read_csv(tmp_path / "fig3a.csv")
    assert set(data["bn_momentum"]) == set(MOMENTA)
    # each momentum's own mean over its 6 seeds, never the two averaged (0.7)
    assert dict(data.groupby("bn_momentum")["mean"].agg(set)) == {0.01: {0.5}, 0.1: {0.9}}
    assert set(data["n_seeds"]) == {6}
    assert (data.groupby(["normalizer", "heterogeneity"]).size() == 2).all()


def test_a_table_with_no_room_for_the_key_refuses_naming_it(planned, tmp_path):
    plan, summary = planned
    table = dataclasses.replace(plan.figures["fbn/fig3a"], kind="table", rows="normalizer",
                                cols="heterogeneity", hue=())
    with pytest.raises(ValueError, match=r"key 'bn_momentum' varies within its cells "
                                         r"\(0\.01, 0\.1\)"):
        draw(table, summary, tmp_path / "table")
    named = dataclasses.replace(table, where=(("bn_momentum", 0.1),))
    draw(named, summary, tmp_path / "named")  # filtered to one value: drawn
    assert (tmp_path / "named.csv").exists()


def test_the_ledger_keeps_the_momenta_apart(planned):
    _, summary = planned
    claim = {"id": "c", "paper": "fixbn", "source": "§4", "words": "FBN beats BN at γ = 0.",
             "experiment": "fbn_gamma", "relation": "greater",
             "where": {"heterogeneity": 0}, "a": {"normalizer": "fbn"},
             "b": {"normalizer": "bn"}}
    row = words_ledger(parse_words({"claims": [claim]}), summary).iloc[0]
    assert "differ in ['bn_momentum']" in row.detail  # reported, not pooled
    for momentum in MOMENTA:
        at = {**claim, "where": {"heterogeneity": 0, "bn_momentum": momentum}}
        row = words_ledger(parse_words({"claims": [at]}), summary).iloc[0]
        assert "ambiguous" not in row.detail
        assert row.margin == pytest.approx(0.0)  # fbn and bn equal at one momentum


@pytest.mark.parametrize("override", ["config/quick.yaml", "config/hour.yaml"])
def test_no_configured_figure_averages_a_key_away(override):
    """Every figure as configured names each key its runs vary in (a summary of the planned
    runs' configs; a figure that selects on validation picks its tuned keys per cell)."""
    plan = load_plan(merged_config([ROOT / "config/config.yaml", ROOT / override]))
    summary = pd.DataFrame([{**config_columns(c), "run_id": r, "figure_group": plan.groups(r)}
                            for r, c in plan.runs.items()])
    averaged = {}
    for name, fig in plan.figures.items():
        for part in fig.parts or (fig,):
            rows = figure_rows(part, summary)
            keys = set(averaged_keys(part, rows)) - (set(tuned_keys(rows)) if part.select
                                                     else set())
            if keys:
                averaged[name] = keys
    assert averaged == {}
