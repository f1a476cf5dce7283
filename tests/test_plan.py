"""The plan: grids expand to runs (each trained once), figures are checked against them."""

from pathlib import Path

import pytest
import yaml

from fednorm.config import ConfigError
from fednorm.plan import load_plan, merge

ROOT = Path(__file__).resolve().parents[1]


def _config(*names):
    out = {}
    for name in names:
        out = merge(out, yaml.safe_load((ROOT / name).read_text()))
    return out


def test_paper_config_counts_the_issue_grids():
    plan = load_plan(_config("config/config.yaml"))
    assert len(plan.experiments["fbn_gamma"]) == 4 * 7 * 3
    assert len(plan.experiments["fbn_dirichlet"]) == 4 * 5 * 3
    byzantine = {"fbn_byzantine_gamma": 2 * 4 * 3 * 3,  # normalizer x gamma x attack x seed
                 "fbn_byzantine_gamma_defended": 2 * 4 * 3 * 2 * 3,  # x aggregator
                 "fbn_byzantine_dirichlet_defended": 2 * 2 * 3 * 2 * 3}
    assert {name: len(plan.experiments[name]) for name in byzantine} == byzantine
    assert len(plan.runs) == 144 + sum(byzantine.values())  # the 'no attack' runs are shared
    assert plan.needs_cifar10()
    names = {"fig3a", "fig3b", "fig3c", "fig5a", "fig5b", "fig5c", "norm_error_curves",
             "norm_error_vs_heterogeneity", "fig4", *(f"fig{n}" for n in range(6, 14)),
             "byzantine_norm_error"}
    assert {n.split("/")[1] for n in plan.figures} == names
    assert dict(plan.figures["fbn/fig5c"].where) == {"heterogeneity": 0.05}  # 'min' resolved
    curves = plan.figures["fbn/norm_error_curves"]
    assert (curves.y, curves.panel, curves.panel_values, curves.logy) == (
        "norm_error_var", "heterogeneity", (0.01, 0.0), True)
    toy = {p.rsplit("/", 1)[1] for p in plan.toy_files()}
    assert toy == {f"fig{n}.{e}" for n in ("1a", "1b", "2a", "2b", "2c") for e in ("pdf", "png",
                                                                                  "csv")}
    assert plan.toy.settings.rounds == 100 and plan.toy.gammas == (0, 0.1, 0.5, 1)


def test_quick_profile_is_offline_and_keeps_every_figure():
    paper, quick = load_plan(_config("config/config.yaml")), load_plan(
        _config("config/config.yaml", "config/quick.yaml"))
    assert not quick.needs_cifar10()
    assert set(quick.figures) == set(paper.figures)
    assert quick.paths.figures != paper.paths.figures  # never overwrites paper-scale figures


def test_a_run_needed_twice_is_planned_once():
    config = {"run": {"steps": 10, "eval_every": 5}, "experiments": {
        "a": {"grid": {"normalizer": ["bn", "fbn"], "seed": [0]}},
        "b": {"grid": {"normalizer": ["fbn"], "seed": [0, 1]}}}}
    plan = load_plan(config)
    assert len(plan.runs) == 3
    shared = plan.experiments["a"][1]
    assert shared in plan.experiments["b"] and plan.groups(shared) == "a|b"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"run": {"batch_size": 0}}, r"experiments.e.*key 'batch_size' has value 0"),
        ({"experiments": {"e": {"grid": {"normalizer": ["bn", "nope"]}}}},
         r"normalizer='nope'.*key 'normalizer' has value 'nope'"),
        ({"experiments": {"e": {"grid": {"seed": 3}}}}, r"key 'seed' has value 3.*non-empty list"),
        ({"experiments": {"e": {"gird": {}}}}, r"unknown key 'gird'"),
        ({"figures": {"f": {"experiment": "zz", "kind": "curves"}}}, r"'experiment'.*'zz'"),
        ({"figures": {"f": {"experiment": "e", "kind": "pie"}}}, r"'kind' has value 'pie'"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves",
                            "where": {"heterogeneity": 0.5}}}}, r"value 0.5.*experiment has"),
        ({"colour": "red"}, r"unknown key 'colour'"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "y": "accuracy"}}},
         r"'y' has value 'accuracy'.*norm_error_var"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves",
                            "panels": {"heterogeneity": [0.0, 0.3]}}}}, r"value 0.3.*experiment"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves",
                            "panels": {"seed": [0], "heterogeneity": [0.0]}}}},
         r"'panels'.*one key"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "logy": "yes"}}},
         r"'logy' has value 'yes'"),
        ({"figures": {"f": {"experiment": ["e", "zz"], "kind": "curves"}}},
         r"'experiment' has value \['e', 'zz'\]"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves",
                            "where": {"attack": ["none", "sf"]}}}},
         r"'attack' has value 'sf'; allowed: a value the experiment has \(\['none'\]\)"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "where": {"attack": []}}}},
         r"'attack' has value \[\]"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "hue": "colour"}}},
         r"'hue' has value 'colour'.*scenario"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves",
                            "hue": ["scenario", "normalizer", "seed"]}}}, r"one or two"),
        ({"experiments": {"e": {"set": {"attack": "sf", "f": 5}}}},
         r"key 'f' has value 5.*n_clients/2"),
        ({"experiments": {"e": {"set": {"attack": "sf", "f": -1}}}}, r"key 'f' has value -1"),
        ({"experiments": {"e": {"set": {"attack": "lie", "f": 3}}}},
         r"key 'attack' has value 'lie'.*'sf', 'foe', 'alie'"),
        ({"toy": {"settings": {"rounds": 0}}}, r"toy.settings.*'rounds' has value 0"),
        ({"toy": {"settings": {"points": 3}}}, r"toy.settings: unknown key 'points'"),
        ({"toy": {"gammas": [0, 2]}}, r"toy: key 'gammas' has value \[0, 2\]"),
    ],
)
def test_config_errors_are_raised_before_any_job(patch, expected):
    base = {"experiments": {"e": {"grid": {"normalizer": ["bn"], "heterogeneity": [0.0]}}}}
    with pytest.raises(ConfigError, match=expected):
        load_plan(merge(base, patch))


def test_a_figure_takes_the_union_of_experiments_filtered_by_lists():
    config = {"run": {"steps": 10, "eval_every": 5, "partition": "gamma", "heterogeneity": 0},
              "experiments": {
                  "clean": {"grid": {"normalizer": ["bn", "fbn", "central"]}},
                  "attacked": {"set": {"f": 3}, "grid": {"normalizer": ["bn", "fbn"],
                                                         "attack": ["sf", "alie"]}}},
              "figures": {"f": {"experiment": ["clean", "attacked"], "kind": "curves",
                                "where": {"normalizer": ["bn", "fbn"], "attack": ["none", "sf"]},
                                "hue": ["scenario", "normalizer"]}}}
    fig = load_plan(config).figures["f"]
    assert fig.experiments == ("clean", "attacked")
    assert dict(fig.where) == {"normalizer": ("bn", "fbn"), "attack": ("none", "sf")}
    assert fig.hue == ("scenario", "normalizer")
