"""The tuning grids extended beyond an edge before the fresh seeds train
(fednorm.claims.extension): a choice at an edge gets one value beyond it on every tuning seed,
an interior one nothing; the second stage then copies the choice made on the extended grid, and
a choice still at its edge stays marked with its key and side."""

import pytest
from test_claims_stage2 import RUN, _claim, _summary

from fednorm.claims.comparisons import compare_all
from fednorm.claims.extension import extension_record
from fednorm.claims.stage2 import stage2_record
from fednorm.claims.words import parse_words
from fednorm.plan import load_plan
from fednorm.plan.stage2 import stage2_runs, with_seed

SEEDS = (0, 1, 2)  # the tuning seeds
EXTENDED = {"run": RUN, "execution": {"bundle_size": 4}, "claims": "config/claims.yaml",
            "stage2": {"seeds": [100, 101], "jobs": 2},
            "experiments": {
                "e": {"grid": {"normalizer": ["bn", "fbn"], "seed": [100]}},
                "tuning": {"set": {"val_fraction": 0.1},
                           "grid": {"normalizer": ["bn", "fbn"], "lr_scale": [1, 4, 16],
                                    "seed": list(SEEDS)}}}}
WORDS = parse_words({"claims": [_claim("c", "e", "fbn", "bn")]})


def _accuracy(experiment, cfg):
    """Validation accuracy: FBN best at × 4 (interior), BN best at the low edge × 1 and better
    still at × 0.25 (the extension), averaged over seeds that differ by a point each."""
    scores = {"fbn": {1.0: 40.0, 4.0: 60.0, 16.0: 50.0},
              "bn": {0.25: 70.0, 1.0: 65.0, 4.0: 50.0, 16.0: 30.0}}
    return scores[cfg.normalizer][cfg.lr_scale] + cfg.seed


def _with_val(plan):
    summary = _summary(plan, _accuracy)
    summary["val_accuracy"] = summary["test_accuracy"]
    return summary


@pytest.fixture
def staged():
    plan = load_plan(EXTENDED)
    record = extension_record(WORDS, _with_val(plan), plan)
    return plan, record


def test_a_choice_at_an_edge_gets_one_value_beyond_on_every_tuning_seed(staged):
    """BN's choice × 1 is the grid's low end: × 0.25 (the grid's step, ÷ 4) on seeds 0, 1, 2,
    in the tuning experiment; FBN's × 4 is interior: nothing."""
    plan, record = staged
    added = stage2_runs(record)
    assert sorted((c.normalizer, c.lr_scale, c.seed) for c, _ in added.values()) == [
        ("bn", 0.25, s) for s in SEEDS]
    assert all(groups == ("tuning",) for _, groups in added.values())
    assert all(e["why"] == [e["why"][0]] and e["why"][0].startswith("extend: tuning")
               for e in record["runs"])
    assert not any(e["planned"] for e in record["runs"]) and record["jobs"]
    for cfg, _ in added.values():  # the chosen run's config but for the rate
        source = next(c for c in plan.runs.values() if c.normalizer == "bn"
                      and c.lr_scale == 1.0 and c.seed == cfg.seed)
        assert {**source.identity(), "lr_scale": 0.25} == cfg.identity()


def test_the_second_stage_copies_the_choice_on_the_extended_grid_and_keeps_its_edge(staged):
    """After the extension BN's best is × 0.25, still the low edge (one step only): the fresh
    seeds train BN at × 0.25 and FBN at × 4, and BN's side is marked at the low edge of its
    rate's grid, FBN's at none."""
    plan, record = staged
    extended = plan.with_runs(stage2_runs(record))
    summary = _with_val(extended)
    second = stage2_record(WORDS, summary, extended)
    fresh = {(c.normalizer, c.lr_scale, c.seed) for c, _ in stage2_runs(second).values()}
    assert fresh == {(n, s, seed) for n, s in (("bn", 0.25), ("fbn", 4.0))
                     for seed in (100, 101)}
    unit = compare_all(WORDS, summary)["c"][0]
    edges = {s.label: (s.edge, s.edges) for s in unit.sides}
    assert edges == {"normalizer=fbn": (False, ()),
                     "normalizer=bn": (True, (("lr_scale", "low"),))}
    # no fresh seed is an extension's: every stage-2 run is a tuning run on a fresh seed
    bn = next(r for r, c in extended.runs.items() if (c.normalizer, c.lr_scale) == ("bn", 0.25))
    assert with_seed(extended.runs[bn], 100).run_id in stage2_runs(second)


def test_without_an_edge_nothing_is_extended():
    plan = load_plan({**EXTENDED, "experiments": {
        **EXTENDED["experiments"],
        "tuning": {"set": {"val_fraction": 0.1},
                   "grid": {"normalizer": ["fbn"], "lr_scale": [1, 4, 16],
                            "seed": list(SEEDS)}}}})
    words = parse_words({"claims": [_claim("c", "e", "fbn", "bn")]})
    assert extension_record(words, _with_val(plan), plan)["runs"] == []
