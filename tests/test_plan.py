"""The plan: grids expand to runs (each trained once), figures are checked against them."""

import dataclasses
import itertools
import math
from pathlib import Path

import pytest
import yaml

import fednorm.config.run as config_run
from fednorm.config import ConfigError, RunConfig, bundle_key, run_config
from fednorm.plan import RUN_FILES, load_plan, merge
from fednorm.plan.costs import load_step_costs

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
    fixbn = {"fixbn_epochs": 2 * 5 * 5 * 3,  # normalizer x split x E x seed
             "fixbn_rounds": 2 * 5 * 5 * 3, "fixbn_partitions": 3 * 5 * 3,
             "fixbn_momentum": 3 * 3 * 5 * 3,  # normalizer x momentum mode x E x seed
             "fixbn_e1": 5 * 3, "fixbn_table1": 4 * 3,
             "fixbn_curves": 3 * 5 * 4 * 3,  # normalizer x split x E x seed (Figs K-N)
             "fixbn_table4": 7 * 3, "fixbn_tableI": 3 * 3, "fixbn_batch": 2 * 4 * 3,
             "fixbn_tableH": 3 * 3, "fixbn_clients": 2 * 5 * 3 * 3,
             "fixbn_dynamics": 3, "fixbn_freeze_at": 5 * 3}  # freezing fraction x seed
    assert {name: len(plan.experiments[name]) for name in fixbn} == fixbn
    fedtan = {"fedtan_methods": 6 * 2 * 3,  # normalizer x split x seed
              "fedtan_scheme": 2 * 3, "fedtan_central": 2 * 3}
    compare = {"compare": 15 * 4 * 2 * 3,  # normalizer x split x E x seed
               "compare_central": 4 * 3,
               "compare_fedfn": 2 * 4 * 2 * 3,  # normalizer (none, bn) x split x E x seed
               "compare_batch": 7 * 2 * 3,  # normalizer x batch size x seed
               # method x E x lr_scale x seed, Dir(0.1), each method's own keys swept too
               # (fednorm.methods: FedWon's 9 lambdas, Hybrid BN's 4 smoothings, FedFN's 2
               # scales): 13 methods at one value, the others at theirs
               "tuning": (13 + 4 + 9 + 2 + 2) * 2 * 5 * 3,
               "tuning_splits": (1 + 4) * 3 * 5 * 3,  # BN, Hybrid BN x split x lr x seed
               "tuning_small_batch": (5 + 4 + 9) * 2 * 5 * 3,  # x batch size x lr x seed
               # BN, FedBN, FedWon's 9 lambdas, FedAP's 5 self-weights x lr x seed
               "tuning_feature_shift": (2 + 9 + 5) * 5 * 3}
    assert {name: len(plan.experiments[name]) for name in {**fedtan, **compare}} == {
        **fedtan, **compare}
    # trained once: FBN's 'no attack' runs; FixBN's E = 500 at fixed rounds is the fixed-epochs
    # run (64,000 steps); bn/gn at E = 100, reset momentum at Shards and E = 1's runs repeat
    shared = 2 * 5 * 3 + 2 * 5 * 3 + (2 * 5 * 3 + 3) + (4 * 3)
    # Figs K-N: all bn and gn runs, and fixbn at E = 100 (Fig 4's) and at Shards (Fig 5's);
    # Table 4: bn, gn, fixbn; Table I: 2 groups; Fig J: batch 20
    shared += (2 * 5 * 4 * 3 + 5 * 3 + 3 * 3) + 3 * 3 + 3 + 2 * 3
    shared += 3 + 2 * 3  # Table H's stats = Table 4's FixBN; Fig I at M = 5, full = Fig 2a's
    shared += 3  # Fig 3d's freezing at 0.5 = Fig 4's FixBN at Shards
    # the comparison: bn, gn, fixbn at E = 1 and 100 on its 4 splits (Figs 2a, 4, K-N), Table
    # 4's gn_ws, ln, in, fixup (Shards, E = 100), centralized BN on IID (Fig 1's)
    shared += 3 * 2 * 4 * 3 + 4 * 3 + 3
    # Tiny-ImageNet (ResNet-18): Fig 2 right (both budgets), Fig 4 right, Fig G; trained once:
    # Fig 4's bn, gn and Fig G's bn, gn with reset momentum (Fig 2's fixed-epochs runs), Fig G's
    # fixbn reset at E = 100 (Fig 4's at Shards). Fixed rounds share nothing: 128 rounds of E =
    # 500 are 64,000 steps, 128 epochs 128,000 (5 of the 10 clients take part)
    tiny = {"fixbn_tiny_epochs": 2 * 5 * 5 * 3, "fixbn_tiny_rounds": 2 * 5 * 5 * 3,
            "fixbn_tiny_partitions": 3 * 5 * 3, "fixbn_tiny_momentum": 3 * 3 * 5 * 3}
    assert {name: len(plan.experiments[name]) for name in tiny} == tiny
    shared += 2 * 5 * 3 + (2 * 5 * 3 + 3)
    imagenet = {"fixbn_imagenet": 3 * 3}  # Table 2: gn, bn, fixbn x seed
    assert len(plan.experiments["fixbn_imagenet"]) == 9
    shift = {"feature_shift": 12 * 3}  # Digits-Five: 12 methods x seed (nothing shared)
    assert len(plan.experiments["feature_shift"]) == 36
    assert len(plan.runs) == (144 + sum(byzantine.values()) + sum(fixbn.values())
                              + sum(fedtan.values()) + sum(compare.values())
                              + sum(tiny.values()) + sum(imagenet.values())
                              + sum(shift.values()) - shared)
    # 1,944 + 417 + 9 + 33 before the tuning swept each method's own keys in every setting
    # of its claims (900 - 510 + 225 + 540 + 165 more); FedAP under feature shift, 3 + 75
    assert len(plan.runs) == 1944 + 417 + 9 + 33 + 1320 + 3 + 75
    # ImageNet-1K: E = 2 epochs of a client of average size = 1,281 steps, 64 epochs of the
    # 10 participants' images = 320 rounds, lr x0.1 at 30, 60, 90 % of them (96, 192, 288)
    net = [plan.runs[r] for r in plan.experiments["fixbn_imagenet"]]
    assert {(c.dataset, c.model, c.image_size, c.n_clients, c.participants, c.batch_size,
             c.partition, c.heterogeneity, c.local_steps, c.steps, c.lr_milestones)
            for c in net} == {("imagenet", "resnet18", 224, 100, 10, 20, "dirichlet", 0.1, 1281,
                               320 * 1281, (96 * 1281, 192 * 1281, 288 * 1281))}
    assert round(64 * 1_281_167 / (10 * 20 * 1281)) == 320
    tiny_runs = [c for c in plan.runs.values() if c.dataset == "tinyimagenet"]
    assert {(c.model, c.width, c.image_size, c.n_clients, c.participants, c.batch_size)
            for c in tiny_runs} == {("resnet18", 64, 64, 10, 5, 20)}
    # the paper's 128 epochs of trained images: 5 clients x 20 x 128,000 steps = 128 x 100,000
    assert {plan.runs[r].steps for r in plan.experiments["fixbn_tiny_partitions"]} == {128_000}
    assert plan.needs_cifar10()
    names = {"fig3a", "fig3b", "fig3c", "fig5a", "fig5b", "fig5c", "norm_error_curves",
             "norm_error_vs_heterogeneity", "fig4", *(f"fig{n}" for n in range(6, 14)),
             "byzantine_norm_error"}
    assert {n.split("/")[1] for n in plan.figures if n.startswith("fbn/")} == names
    assert {n for n in plan.figures if n.startswith("fixbn/")} == {
        f"fixbn/{n}" for n in ("fig2a", "fig2b", "table1", "fig1", "fig4", "fig5", "fig6",
                               "figH", "table4", "tableI", "figJ", "figK", "figL", "figM",
                               "figN", "tableH", "figI", "fig3", "table5", "fig2a_tiny",
                               "fig2b_tiny", "figG", "table2")}
    assert [p.experiments for p in plan.figures["fixbn/fig4"].parts] == [
        ("fixbn_partitions",), ("fixbn_tiny_partitions",)]
    fig3 = plan.figures["fixbn/fig3"]
    assert [p.kind for p in fig3.parts] == ["curves", "curves", "curves", "final_vs"]
    assert fig3.parts[0].y == ("stat_change", "stat_deviation")
    assert fig3.experiments == ("fixbn_dynamics", "fixbn_freeze_at")
    assert all(plan.runs[r].record_dynamics for r in plan.experiments["fixbn_dynamics"])
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
    assert {c.dataset for c in quick.runs.values()} == {"mnist5k"}  # no Tiny-ImageNet either
    # every figure but the Tiny-ImageNet and ImageNet ones, which the quick profile drops (set
    # to null)
    dropped = {"fixbn/fig2a_tiny", "fixbn/fig2b_tiny", "fixbn/figG", "fixbn/table2"}
    assert set(quick.figures) == set(paper.figures) - dropped
    assert quick.paths.figures != paper.paths.figures  # never overwrites paper-scale figures


def test_an_override_drops_an_experiment_or_a_figure_by_setting_it_to_null():
    base = {"run": {"steps": 10, "eval_every": 5}, "experiments": {
        "a": {"grid": {"normalizer": ["bn"], "seed": [0]}},
        "b": {"grid": {"normalizer": ["fbn"], "seed": [0, 1]}}},
        "figures": {"fa": {"experiment": "a", "kind": "curves"},
                    "fb": {"experiment": "b", "kind": "curves"}}}
    plan = load_plan(merge(base, {"experiments": {"b": None}, "figures": {"fb": None}}))
    assert set(plan.experiments) == {"a"} and set(plan.figures) == {"fa"}
    assert len(plan.runs) == 1
    with pytest.raises(ConfigError, match="'b'"):  # a figure of a dropped experiment: an error
        load_plan(merge(base, {"experiments": {"b": None}}))


def test_an_override_removes_a_grid_axis_by_setting_it_to_null():
    """The quick tuning grid sets E per entry of ``settings`` in place of the paper's axis."""
    base = {"run": {"steps": 10, "eval_every": 5}, "experiments": {
        "a": {"grid": {"normalizer": ["bn", "gn"], "local_steps": [1, 2], "seed": [0]}}}}
    entries = [{"normalizer": "bn", "local_steps": 1}, {"normalizer": "gn", "local_steps": 2}]
    per_entry = {"experiments": {"a": {"grid": {"normalizer": None, "local_steps": None,
                                                "settings": entries}}}}
    plan = load_plan(merge(base, per_entry))
    assert {(c.normalizer, c.local_steps) for c in plan.runs.values()} == {("bn", 1), ("gn", 2)}

def test_training_images_are_counted_per_dataset_and_model():
    plan = load_plan({"run": {"steps": 10, "eval_every": 5, "n_clients": 4, "batch_size": 3},
                      "experiments": {"a": {"grid": {"normalizer": ["bn", "gn"], "seed": [0]}},
                                      "b": {"set": {"model": "lenet"},
                                            "grid": {"seed": [0, 1, 2]}}}})
    assert plan.images_by_part() == {("cifar10", "fbn_cnn"): 2 * 10 * 4 * 3,
                                     ("cifar10", "lenet"): 3 * 10 * 4 * 3}


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
        # the run section's own error, not an experiment's (checked even where one overrides it)
        ({"run": {"batch_size": 0}}, r"^run: key 'batch_size' has value 0"),
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
        ({"figures": {"f": {"experiment": "e", "kind": "final_vs",
                            "y": ["test_accuracy", "test_loss"]}}},
         r"'y' has value \['test_accuracy', 'test_loss'\]; allowed.*curves: or a list"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "y": ["test_loss"] * 2}}},
         r"'y' has value"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "y": ["test_loss"],
                            "hue": ["scenario", "normalizer"]}}}, r"'hue'.*one column"),
        ({"figures": {"f": {"experiment": "e", "kind": "parts", "parts": []}}},
         r"figures.f: key 'parts' has value \[\]"),
        ({"figures": {"f": {"experiment": "e", "kind": "parts", "parts": [{"kind": "table"}]}}},
         r"figures.f.parts\[0\]: key 'kind' has value 'table'"),
        ({"figures": {"f": {"experiment": "e", "kind": "parts", "parts": [
            {"kind": "curves"}, {"kind": "curves", "panels": {"seed": [0]}}]}}},
         r"figures.f.parts\[1\]: key 'panels' is not allowed"),
        ({"figures": {"f": {"experiment": "e", "kind": "parts", "y": "test_loss",
                            "parts": [{"kind": "curves"}]}}}, r"key 'y' is not one of kind"),
        ({"figures": {"f": {"kind": "parts", "parts": [{"kind": "curves", "where": {"seed": 3}}]}}},
         r"figures.f.parts\[0\]: key 'experiment'"),
        ({"figures": {"f": {"experiment": "e", "kind": "parts", "parts": [
            {"kind": "curves", "where": {"seed": 3}}]}}}, r"f.parts\[0\].where.*value 3"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "paper": ""}}},
         r"figures.f: key 'paper' has value ''; allowed: a paper's figure or table"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "paper": 3}}},
         r"figures.f: key 'paper' has value 3"),
        ({"figures": {"f": {"experiment": "e", "kind": "parts", "parts": [
            {"kind": "curves", "paper": "FBN Fig 3b"}]}}},
         r"figures.f.parts\[0\]: key 'paper' is not allowed in a part"),
        ({"figures": {"f": {"experiment": "e", "kind": "curves", "note": ["a", "b"]}}},
         r"figures.f: key 'note' has value \['a', 'b'\]; allowed: a text"),
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
    plan = load_plan(config)
    fig = plan.figures["f"]
    assert fig.experiments == ("clean", "attacked")
    assert dict(fig.where) == {"normalizer": ("bn", "fbn"), "attack": ("none", "sf")}
    assert fig.hue == ("scenario", "normalizer")
    assert fig.paper is None  # not in the papers
    assert sorted((r.normalizer, r.attack) for r in plan.figure_runs(fig)) == [
        ("bn", "none"), ("bn", "sf"), ("fbn", "none"), ("fbn", "sf")]


def test_the_runs_a_figure_draws_pass_its_filters_panels_and_compared_pair():
    plan = load_plan(_config("config/config.yaml"))
    fig4 = plan.figure_runs(plan.figures["fbn/fig4"])
    assert len(fig4) == 3 * 2 * 2 * 3  # scenario x normalizer x panel (gamma) x seed
    assert {(r.heterogeneity, r.attack, r.aggregator) for r in fig4} == {
        (h, a, g) for h in (0.0, 0.01) for a, g in (("none", "mean"), ("sf", "mean"),
                                                     ("sf", "median"))}
    heatmap = plan.figure_runs(plan.figures["fixbn/fig2a"])
    assert {r.normalizer for r in heatmap} == {"bn", "gn"} and len(heatmap) == 2 * 5 * 5 * 3
    fig3 = plan.figure_runs(plan.figures["fixbn/fig3"])  # its parts' runs, each once
    assert {r.run_id for r in fig3} == {*plan.experiments["fixbn_dynamics"],
                                        *plan.experiments["fixbn_freeze_at"]}
    assert plan.figures["fixbn/table5"].paper == "FixBN Table 5"


# Run bundles: which runs train together in one job.
SMALL = {"steps": 10, "eval_every": 5, "lr": [0.1], "lr_milestones": []}


def _bundle_config(size, seeds=(0, 1), **execution):
    return {"run": SMALL, "execution": {"bundle_size": size, **execution}, "experiments": {
        "gamma": {"set": {"partition": "gamma"}, "grid": {
            "normalizer": ["bn", "fbn"], "heterogeneity": [0, 0.5, 1], "lr": [[0.1], [0.05]],
            "seed": list(seeds)}},
        "dirichlet": {"set": {"partition": "dirichlet"}, "grid": {
            "normalizer": ["bn", "fbn"], "heterogeneity": [0.1], "seed": list(seeds)}},
        "frozen": {"set": {"fixbn_freeze": 0.25}, "grid": {"normalizer": ["fixbn"]}}}}


def test_bundle_key_ignores_seed_split_lr_momentum_mode_and_statistics_server_only():
    cfg = run_config(SMALL)
    same = [{"seed": 3}, {"partition": "dirichlet", "heterogeneity": 0.1}, {"lr": [1.0e6]},
            {"client_momentum": "global"}, {"aggregator": "median", "nnm": True, "f": 0}]
    for values in same:
        assert bundle_key(run_config({**SMALL, **values})) == bundle_key(cfg)
    other = [{"normalizer": "bn"}, {"lr": [0.1, 0.05], "lr_milestones": [5]}, {"width": 8},
             {"momentum": 0.0}, {"attack": "sf", "f": 3}, {"f": 3}]
    for values in other:
        assert bundle_key(run_config({**SMALL, **values})) != bundle_key(cfg)
    attacked = {**SMALL, "f": 3, "attack": "sf"}
    assert bundle_key(run_config(attacked)) == bundle_key(run_config(
        {**attacked, "attack": "alie", "aggregator": "trimmed_mean", "nnm": True}))
    # attacked model updates: one server per bundle
    updates = {**attacked, "attack_updates": True}
    assert bundle_key(run_config(updates)) != bundle_key(run_config(
        {**updates, "aggregator": "median"}))


@pytest.mark.parametrize("size", [1, 5, 100])
def test_bundles_partition_the_runs_by_key_within_the_size(size):
    plan = load_plan(_bundle_config(size))
    members = [r for ids in plan.bundles.values() for r in ids]
    assert sorted(members) == sorted(plan.runs)  # every run in exactly one bundle
    for bid, ids in plan.bundles.items():
        cfgs = [plan.runs[r] for r in ids]
        assert 1 <= len(ids) <= size
        assert len({bundle_key(c) for c in cfgs}) == 1
        assert bid.startswith(f"{cfgs[0].normalizer}-E1-x{len(ids)}-")
    # bn and fbn each: 3 gammas x 2 lr x 2 seeds + 2 dirichlet seeds = 14 runs that differ only
    # in seed, split and lr, so they fill ceil(14 / size) bundles; the frozen fbn run is alone
    assert len(plan.bundles) == 2 * -(-14 // size) + 1
    if size == 100:
        fbn = next(ids for bid, ids in plan.bundles.items() if bid.startswith("fbn-E1-x14-"))
        assert {plan.runs[r].partition for r in fbn} == {"gamma", "dirichlet"}
        assert {plan.runs[r].lr for r in fbn} == {(0.1,), (0.05,)}


def test_a_new_seed_leaves_the_full_bundles_as_they_were():
    before = load_plan(_bundle_config(4)).bundles
    after = load_plan(_bundle_config(4, seeds=(0, 1, 2))).bundles
    full = {bid: ids for bid, ids in before.items() if len(ids) == 4}
    assert len(full) == 6  # bn and fbn: 14 runs -> 4 + 4 + 4 + 2
    assert all(after[bid] == ids for bid, ids in full.items())
    partial = [bid for bid, ids in before.items() if len(ids) == 2]
    assert partial and not set(partial) & set(after)  # the new runs joined these


def test_pending_bundles_declare_only_the_unfinished_runs(tmp_path):
    config = merge(_bundle_config(5), {"paths": {"results": str(tmp_path)}})
    plan = load_plan(config)
    done, *others = next(ids for ids in plan.bundles.values() if len(ids) == 5)
    alone = next(ids[0] for ids in plan.bundles.values() if len(ids) == 1)
    half = others[0]
    for run_id in (done, alone):
        for path in plan.run_files((run_id,)):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("x")
    Path(plan.run_files((half,))[0]).parent.mkdir(parents=True)
    Path(plan.run_files((half,))[0]).write_text("x")  # killed before run.json: not complete
    pending = load_plan(config).pending_bundles()
    assert [r for ids in pending.values() for r in ids] == [
        r for ids in plan.bundles.values() for r in ids if r not in (done, alone)]
    assert set(plan.bundles) - set(pending) == {next(b for b, ids in plan.bundles.items()
                                                     if ids == (alone,))}
    assert plan.run_files((half,)) == [f"{tmp_path}/runs/{half}/{n}" for n in RUN_FILES]


def test_a_training_job_takes_bundles_of_about_equal_cost_and_only_their_unfinished_runs(
        tmp_path):
    """ceil(B / bundles_per_job) jobs, each bundle in one, balanced by the cost model (the
    longest first to the lightest job: no job heavier than the lightest by more than its
    largest bundle); one bundle a job at bundles_per_job 1."""
    config = merge(_bundle_config(2, bundles_per_job=3), {"paths": {"results": str(tmp_path)}})
    plan = load_plan(config)
    bundle_ids = list(plan.bundles)
    assert sorted(b for members in plan.jobs.values() for b in members) == sorted(bundle_ids)
    assert len(plan.jobs) == -(-len(bundle_ids) // 3)
    costs = load_step_costs()
    seconds = {b: sum(costs.run_seconds(plan.runs[r], len(ids)) for r in ids)
               for b, ids in plan.bundles.items()}
    loads = [sum(seconds[b] for b in members) for members in plan.jobs.values()]
    assert max(loads) - min(loads) <= max(seconds.values()) + 1e-9
    first = next(iter(plan.jobs))
    assert first == f"{plan.jobs[first][0]}+{len(plan.jobs[first]) - 1}"
    assert load_plan(_bundle_config(2)).jobs == {b: (b,) for b in bundle_ids}  # 1 a job
    for run_id in plan.bundles[plan.jobs[first][0]]:  # the job's first bundle is complete
        for path in plan.run_files((run_id,)):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("x")
    pending = load_plan(config).pending_jobs()
    assert list(pending[first]) == list(plan.jobs[first][1:])  # the job keeps its id
    assert sum(len(m) for job in pending.values() for m in job.values()) == len(plan.runs) - len(
        plan.bundles[bundle_ids[0]])


@pytest.mark.parametrize(("execution", "expected"), [
    ({"bundles_per_job": 0}, r"execution: key 'bundles_per_job' has value 0; allowed: an "
                             r"integer >= 1"),
    ({"bundle_size": 0}, r"execution: key 'bundle_size' has value 0; allowed: an integer >= 1"),
    ({"bundle_size": "a"}, r"key 'bundle_size' has value 'a'; allowed: an integer >= 1"),
    ({"bundle_size": 2.5}, r"key 'bundle_size' has value 2.5; allowed: an integer >= 1"),
    ({"threads": 0}, r"execution: key 'threads' has value 0"),
    ({"bundle": 4}, r"execution: unknown key 'bundle'; allowed keys: \['device'"),
    ({"mem_mb": 0}, r"execution: key 'mem_mb' has value 0; allowed: an integer >= 1"),
    ({"runtime": "1h"}, r"execution: key 'runtime' has value '1h'; allowed: an integer >= 1"),
    ({"cpus_per_gpu": True}, r"key 'cpus_per_gpu' has value True; allowed: an integer >= 1"),
    ({"checkpoint_minutes": 0}, r"execution: key 'checkpoint_minutes' has value 0; allowed: a "
                                r"number in \(0, inf\]"),
    ({"checkpoint_minutes": "30m"}, r"key 'checkpoint_minutes' has value '30m'"),
    ({"data_workers": -1}, r"execution: key 'data_workers' has value -1; allowed: an integer "
                           r">= 0"),
    ({"images_per_second": 0}, r"execution: key 'images_per_second' has value 0; allowed: "
                               r"null or a number in \(0, inf\], or a mapping dataset/model"),
    ({"images_per_second": {"cifar10": 100}}, r"key 'images_per_second' has value "
                                              r"\{'cifar10': 100\}; allowed: null or a number"),
    ({"images_per_second": {"cifar10/resnet20": -1}}, r"key 'images_per_second' has value"),
    ({"images_per_second": {"cifar10/fbn_cnn": {0: 100}}}, r"key 'images_per_second' has "
                                                          r"value"),
    ({"images_per_second": {"cifar10/fbn_cnn": {"16": 100}}}, r"a mapping bundle size -> such"),
    ({"images_per_second": {"cifar10/fbn_cnn": {}}}, r"key 'images_per_second' has value"),
    # every dataset/model of the plan needs its rate
    ({"images_per_second": {"cifar10/resnet20": 100}},
     r"execution: key 'images_per_second' has no rate for 'cifar10/fbn_cnn', a dataset/model "
     r"of this plan; given: cifar10/resnet20"),
    ({"images_per_second": "fast"}, r"key 'images_per_second' has value 'fast'"),
    ({"max_runtime": 0}, r"execution: key 'max_runtime' has value 0; allowed: null or an "
                         r"integer >= 1"),
    ({"max_runtime": "2-00:00:00"}, r"key 'max_runtime' has value '2-00:00:00'"),
    # a GPU job gets cpus_per_gpu x gpus_per_job CPUs: fewer than its threads is an error
    ({"threads": 8, "gpus_per_job": 2, "cpus_per_gpu": 3},
     r"execution: key 'cpus_per_gpu' has value 3; allowed: an integer >= threads / "
     r"gpus_per_job \(8 / 2\)"),
])
def test_bad_execution_values_are_config_errors(execution, expected):
    with pytest.raises(ConfigError, match=expected):
        load_plan(_bundle_config(1, **execution))


def test_cluster_requests_come_from_the_execution_section():
    paper = load_plan(_config("config/config.yaml")).execution
    assert (paper.cpus_per_gpu, paper.mem_mb, paper.runtime) == (4, 16000, 1440)
    assert paper.cpus_per_gpu * paper.gpus_per_job >= paper.threads
    mine = load_plan(_bundle_config(1, threads=8, gpus_per_job=2, cpus_per_gpu=4, mem_mb=500,
                                    runtime=30)).execution
    assert (mine.cpus_per_gpu, mine.mem_mb, mine.runtime) == (4, 500, 30)
    cpu_only = load_plan(_bundle_config(1, threads=8, gpus_per_job=0, cpus_per_gpu=1))
    assert cpu_only.execution.cpus_per_gpu == 1  # no GPU: SLURM gets --cpus-per-task=threads


def test_a_jobs_runtime_comes_from_its_images_and_the_rate_capped_by_max_runtime():
    """SMALL runs: 10 steps x 10 clients x 50 images = 5,000 images each. Without a rate every
    job asks for `runtime`; at 10 images/s a bundle of 3 runs (15,000 images, 25 minutes) asks
    for 5 + 1.25 x 25 = 36.25 -> 37 minutes, one run for 5 + ceil(10.42) = 16; max_runtime caps
    both."""
    plan = load_plan(_bundle_config(3, runtime=99))
    trio = next(ids for ids in plan.bundles.values() if len(ids) == 3)
    assert plan.training_images(trio) == 15_000
    assert plan.job_runtime(trio) == plan.job_runtime(trio[:1]) == 99
    rated = load_plan(_bundle_config(3, images_per_second=10))
    assert (rated.job_runtime(trio), rated.job_runtime(trio[:1])) == (37, 16)
    capped = load_plan(_bundle_config(3, images_per_second=10, max_runtime=20))
    assert (capped.job_runtime(trio), capped.job_runtime(trio[:1])) == (20, 16)
    assert load_plan(_bundle_config(3, runtime=99, max_runtime=20)).job_runtime(trio) == 20
    # a rate a dataset/model: the bundle's own part's
    (part,) = {(rated.runs[r].dataset, rated.runs[r].model) for r in trio}
    mapped = load_plan(_bundle_config(3, images_per_second={"/".join(part): 10}))
    assert (mapped.job_runtime(trio), mapped.job_runtime(trio[:1])) == (37, 16)
    # a curve: each run at its bundle's size, here 3 runs at 30 images/s (log-log between 1
    # and 9): 15,000 images in 500 s -> 5 + ceil(1.25 x 8.33) = 16; one of them 5 + 4 = 9
    curve = load_plan(_bundle_config(3, images_per_second={"/".join(part): {1: 10, 9: 90}}))
    assert (curve.job_runtime(trio), curve.job_runtime(trio[:1])) == (16, 9)


def test_resume_points_lie_outside_every_job_output():
    """Snakemake deletes a failed job's outputs: a bundle's resume point is never one of them
    (nor inside a run's folder), and each bundle has its own."""
    plan = load_plan(_config("config/config.yaml"))
    outputs = {f for ids in plan.bundles.values() for f in plan.run_files(ids)}
    points = {plan.paths.resume_point(b) for b in plan.bundles}
    assert len(points) == len(plan.bundles) and not points & outputs
    assert not any(p.startswith(f"{plan.paths.results}/runs/") for p in points)
    assert load_plan(_bundle_config(1, checkpoint_minutes=5)).execution.checkpoint_minutes == 5
    assert load_plan(_bundle_config(1, data_workers=0)).execution.data_workers == 0
    assert load_plan(_bundle_config(1)).execution.data_workers == 8


def test_profiles_choose_their_bundle_sizes():
    assert load_plan(_config("config/config.yaml")).execution.bundle_size == 16
    assert load_plan(_config("config/config.yaml", "config/quick.yaml")).execution.bundle_size == 16


def test_settings_axis_sets_several_keys_together_and_crosses_the_other_axes():
    config = _config("config/config.yaml", "config/quick.yaml")
    config["experiments"] = {"mixed": {"grid": {
        "settings": [{"partition": "iid", "heterogeneity": None},
                     {"partition": "dirichlet", "heterogeneity": 0.1}],
        "seed": [0, 1]}}}
    plan = load_plan(config | {"figures": {}})
    got = [(plan.runs[r].partition, plan.runs[r].heterogeneity, plan.runs[r].seed)
           for r in plan.experiments["mixed"]]
    assert got == [("iid", None, 0), ("iid", None, 1), ("dirichlet", 0.1, 0),
                   ("dirichlet", 0.1, 1)]


@pytest.mark.parametrize(("settings", "message"), [
    ([{"partition": "iid"}, {"colour": 1}], r"grid.settings\[1\]: unknown key 'colour'"),
    ([{}], r"key 'settings' has an empty entry 0"),
    ([{"partition": "gamma", "heterogeneity": 3}],
     r"\(partition='gamma', heterogeneity=3\): key 'heterogeneity' has value 3"),
])
def test_bad_settings_entries_are_errors_naming_the_entry(settings, message):
    config = merge(_config("config/config.yaml"), {"figures": {}})
    config["figures"] = {}
    config["experiments"] = {"mixed": {"grid": {"settings": settings}}}
    with pytest.raises(ConfigError, match=message):
        load_plan(config)


# FixBN figure kinds: heatmap, bars, table, final_vs with logx, curves over round / progress.
FIXBN = {"run": {"steps": 100, "eval_every": 50, "partition": "dirichlet", "heterogeneity": 0.6,
                 "gn_groups": 8},
         "experiments": {
             "iid": {"set": {"partition": "iid"},
                     "grid": {"normalizer": ["bn", "gn", "fixbn"], "local_steps": [1, 20]}},
             "shards": {"set": {"partition": "shards", "heterogeneity": 2},
                        "grid": {"normalizer": ["bn", "gn", "fixbn"], "local_steps": [1, 20]}},
             "dir": {"grid": {"normalizer": ["bn", "gn"], "heterogeneity": [0.6, 0.1],
                              "local_steps": [20, 1]}}}}


def _fixbn_figure(**spec):
    return load_plan(merge(FIXBN, {"figures": {"f": spec}})).figures["f"]


def test_a_heatmap_spec_becomes_its_figure():
    fig = _fixbn_figure(experiment=["iid", "dir", "shards"], kind="heatmap", rows="split",
                        cols="local_steps", compare={"normalizer": ["bn", "gn"]},
                        row_order=["IID", "Dir(0.6)", "Dir(0.1)", "Shards(2)"], title="Fig 2")
    assert (fig.kind, fig.rows, fig.cols, fig.compare, fig.compare_values) == (
        "heatmap", "split", "local_steps", "normalizer", ("bn", "gn"))
    assert fig.orders == (("split", ("IID", "Dir(0.6)", "Dir(0.1)", "Shards(2)")),)
    assert (fig.hue, fig.x, fig.logx, fig.panel) == (("normalizer",), None, None, None)


def test_bars_tables_and_axes_specs():
    bars = _fixbn_figure(experiment=["shards", "iid"], kind="bars", x="split",
                         x_order=["Shards(2)", "IID"], where={"local_steps": 20})
    assert (bars.x, bars.hue, bars.orders) == ("split", ("normalizer",),
                                               (("split", ("Shards(2)", "IID")),))
    table = _fixbn_figure(experiment=["shards", "iid"], kind="table", rows="normalizer",
                          cols="split", where={"local_steps": 1})
    assert (table.rows, table.cols, table.orders) == ("normalizer", "split", ())
    assert _fixbn_figure(experiment="dir", kind="final_vs", x="local_steps", logx=True).logx
    assert _fixbn_figure(experiment="dir", kind="curves", x="progress").x == "progress"
    assert _fixbn_figure(experiment="dir", kind="curves", x="round").x == "round"


def test_a_table_is_written_as_csv_and_markdown_only():
    plan = load_plan(merge(FIXBN, {"figures": {
        "fixbn/t1": {"experiment": ["iid", "shards"], "kind": "table", "rows": "normalizer",
                     "cols": "split"},
        "fixbn/f4": {"experiment": ["iid", "shards"], "kind": "bars", "x": "split"}}}))
    assert plan.figure_files() == [f"figures/fixbn/t1.{e}" for e in ("csv", "md")] + [
        f"figures/fixbn/f4.{e}" for e in ("pdf", "png", "csv")]
    assert plan.figure_folders() == {"fixbn": ["fixbn/t1", "fixbn/f4"]}


TUNING = {"run": {"steps": 100, "eval_every": 50, "partition": "dirichlet", "heterogeneity": 0.1},
          "experiments": {
              "held": {"set": {"val_fraction": 0.1},
                       "grid": {"normalizer": ["bn", "gn"], "lr_scale": [0.5, 1, 2]}},
              "plain": {"grid": {"normalizer": ["bn", "gn"], "lr_scale": [0.5, 1]}}}}


def test_a_tuning_table_chooses_on_validation_and_is_written_as_csv_and_markdown():
    plan = load_plan(merge(TUNING, {"figures": {"compare/tuning": {
        "experiment": "held", "kind": "tuning", "rows": "normalizer", "cols": "regime"}}}))
    fig = plan.figures["compare/tuning"]
    assert (fig.kind, fig.select, fig.y) == ("tuning", "val_accuracy", "test_accuracy")
    assert plan.figure_files() == [f"figures/compare/tuning.{e}" for e in ("csv", "md")]
    assert len(plan.experiments["held"]) == 6 and len(set(plan.runs)) == 10


@pytest.mark.parametrize(("spec", "expected"), [
    ({"experiment": "plain"}, r"key 'select' has value 'val_accuracy'; allowed: only with runs "
     r"that hold out a validation set \(val_fraction > 0\); 4 do not"),
    ({"select": "test_accuracy"}, r"key 'select' has value 'test_accuracy'; allowed: "
     r"'val_accuracy' \(a learning rate is chosen on the validation split, never on the test"),
    ({"select": None}, r"key 'select' has value None"),
    ({"kind": "table", "experiment": ["held", "plain"], "select": "val_accuracy"},
     r"only with runs that hold out a validation set"),
])
def test_bad_tuning_specs_name_the_key_the_value_and_what_is_allowed(spec, expected):
    spec = {"experiment": "held", "kind": "tuning", "rows": "normalizer", "cols": "regime",
            **spec}
    with pytest.raises(ConfigError, match=expected):
        load_plan(merge(TUNING, {"figures": {"f": spec}}))


def test_curve_x_names_are_the_computed_columns():
    from fednorm.plan import CURVE_X
    from fednorm.plots.curves import COMPUTED_X

    assert set(CURVE_X) == {"step", *COMPUTED_X}


HEATMAP = {"experiment": "dir", "kind": "heatmap", "rows": "split", "cols": "local_steps",
           "compare": {"normalizer": ["bn", "gn"]}}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"compare": {"norm": ["bn", "gn"]}}, r"figures.f.compare: unknown key 'norm'; allowed keys"),
    ({"compare": {"normalizer": ["bn"]}},
     r"compare: key 'normalizer' has value \['bn'\]; allowed: a list of two different values"),
    ({"compare": {"normalizer": ["bn", "gn", "fixbn"]}}, r"a list of two different values"),
    ({"compare": {"normalizer": ["bn", "bn"]}}, r"a list of two different values"),
    ({"compare": {"normalizer": "bn"}}, r"has value 'bn'; allowed: a list of two"),
    ({"compare": {"normalizer": ["bn", "fixbn"]}},
     r"compare: key 'normalizer' has value 'fixbn'; allowed: a value the experiment has"),
    ({"compare": {"normalizer": ["bn", "gn"], "seed": [0, 1]}}, r"'compare' has value .*one col"),
    ({"compare": {"split": ["IID", "Dir(0.1)"]}}, r"key 'split' is the figure's rows or cols"),
    ({"rows": "splits"}, r"key 'rows' has value 'splits'; allowed: one of \['dataset'"),
    ({"cols": "split"}, r"key 'cols' has value 'split'; allowed: one of .*other than \['split'\]"),
    ({"rows": None}, r"key 'rows' is missing; kind 'heatmap' needs \['rows', 'cols', 'compare'\]"),
    ({"row_order": ["Dir(0.6)"]}, r"'row_order' has value \['Dir\(0.6\)'\]; allowed: each value "
     r"of 'split' that the runs have, once, in any order: \['Dir\(0.6\)', 'Dir\(0.1\)'\]"),
    ({"row_order": ["Dir(0.6)", "IID"]}, r"'row_order' has value"),
    ({"hue": "normalizer"}, r"key 'hue' is not one of kind 'heatmap'; allowed keys"),
    ({"kind": "bars", "compare": None, "rows": None, "cols": None},
     r"key 'x' is missing; kind 'bars' needs \['x'\]"),
    ({"kind": "bars", "x": "split", "hue": ["normalizer", "seed"], "compare": None, "rows": None,
      "cols": None}, r"'hue' has value \['normalizer', 'seed'\]; allowed: one of"),
    ({"kind": "bars", "x": "colour", "compare": None, "rows": None, "cols": None},
     r"'x' has value 'colour'; allowed: one of \['dataset'"),
    ({"kind": "final_vs", "x": "round", "compare": None, "rows": None, "cols": None},
     r"'x' has value 'round'"),
    ({"kind": "final_vs", "logx": "yes", "compare": None, "rows": None, "cols": None},
     r"'logx' has value 'yes'; allowed: true or false"),
    ({"kind": "curves", "logx": True, "compare": None, "rows": None, "cols": None},
     r"key 'logx' is not one of kind 'curves'"),
    ({"kind": "curves", "x": "epoch", "compare": None, "rows": None, "cols": None},
     r"'x' has value 'epoch'; allowed: one of \['step', 'round', 'progress'"),
    ({"kind": "table", "compare": None, "cols": None}, r"kind 'table' needs \['rows', 'cols'\]"),
    ({"kind": "improvement", "compare": None, "rows": "normalizer", "baseline": "central"},
     r"'baseline' has value 'central'; allowed: a value of 'normalizer' that the runs have"),
    ({"kind": "improvement", "compare": None, "rows": "normalizer", "cols": "split"},
     r"key 'baseline' is missing; kind 'improvement' needs \['cols', 'baseline'\]"),
    ({"kind": "profile", "compare": None, "rows": "normalizer", "baseline": "bn"},
     r"key 'baseline' is not one of kind 'profile'"),
])
def test_bad_fixbn_figure_specs_name_the_key_the_value_and_what_is_allowed(spec, expected):
    spec = {k: v for k, v in {**HEATMAP, **spec}.items() if v is not None}
    with pytest.raises(ConfigError, match=expected):
        _fixbn_figure(**spec)


def test_a_new_field_at_its_default_changes_no_run_id(monkeypatch):
    """Issue 22: an upgrade that adds a RunConfig field, with a default that keeps today's
    behaviour, leaves every id of config/config.yaml and config/quick.yaml as it was (run_id
    hashes only the fields that differ from their defaults); set away from its default, the new
    field changes the id."""
    plans = [load_plan(_config("config/config.yaml")),
             load_plan(_config("config/config.yaml", "config/quick.yaml"))]
    upgraded = dataclasses.make_dataclass(
        "UpgradedRunConfig", [("new_knob", float, dataclasses.field(default=0.5))],
        bases=(RunConfig,), frozen=True)
    # what fednorm.config.run computes at import from the upgraded class's defaults
    monkeypatch.setattr(config_run, "_DEFAULT_IDENTITY", upgraded().identity())
    for plan in plans:
        new_ids = {r: upgraded(**dataclasses.asdict(cfg)).run_id for r, cfg in plan.runs.items()}
        assert new_ids == {r: r for r in plan.runs}
    cfg = next(iter(plans[1].runs.values()))
    assert upgraded(**dataclasses.asdict(cfg), new_knob=0.25).run_id != cfg.run_id


def test_a_seed_offset_asks_the_same_questions_on_disjoint_seeds():
    """seed_offset: 8 over the quick profile: every run as before but for its seed (0 -> 8,
    2 -> 10), no run id shared, the same figures and bundles count; a bad offset names itself."""
    quick = _config("config/config.yaml", "config/quick.yaml")
    plan, other = load_plan(quick), load_plan({**quick, "seed_offset": 8})
    assert not set(plan.runs) & set(other.runs)
    moved = sorted(dataclasses.replace(c, seed=c.seed + 8).run_id for c in plan.runs.values())
    assert moved == sorted(other.runs)
    assert {c.seed for c in plan.runs.values()} == {0, 1, 2, 3, 4, 5, 6, 7, 100}
    assert plan.figures.keys() == other.figures.keys()
    assert len(plan.bundles) == len(other.bundles)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match=rf"key 'seed_offset' has value {bad!r}; allowed: "
                                              r"an integer >= 0"):
            load_plan({**quick, "seed_offset": bad})


def test_the_quick_seed_sets_are_disjoint():
    """make quick, quick-other-seeds and quick-third-seeds judge the claims on seed sets that
    share no seed (benchmarks/verdict_stability.py compares each pair): a grid given more seeds
    must move the offsets too."""
    quick = ("config/config.yaml", "config/quick.yaml")
    seeds = [{c.seed for c in load_plan(_config(*quick, *more)).runs.values()}
             for more in ((), ("config/quick_other_seeds.yaml",),
                          ("config/quick_third_seeds.yaml",))]
    # the tuning seeds 0, 1, 100 and the six judged seeds
    assert seeds[0] == {0, 1, 2, 3, 4, 5, 6, 7, 100}
    for a, b in itertools.combinations(seeds, 2):
        assert not a & b


def test_gpu_hours_in_bundles_price_each_run_at_its_bundles_rate():
    """Each bundle of R runs at rate(part, R); summed bundle by bundle here, run by run there."""
    plan = load_plan(_bundle_config(3))
    flat = plan.gpu_hours(lambda part: 100.0)
    assert plan.gpu_hours_in_bundles(lambda part, runs: 100.0) == pytest.approx(flat)
    by_bundle = sum(plan.training_images(ids) / (50.0 * len(ids))
                    for ids in plan.bundles.values()) / 3600
    assert len({len(ids) for ids in plan.bundles.values()}) > 1  # sizes differ: rate matters
    got = plan.gpu_hours_in_bundles(lambda part, runs: 50.0 * runs)
    assert got["all"] == pytest.approx(by_bundle)


# Feature shift's figure: methods x the runs' domains (kind domains).
SHIFT = {"run": {"steps": 100, "eval_every": 50},
         "experiments": {
             "shift": {"set": {"dataset": "mnist5k", "n_train": 4000, "n_test": 500,
                               "image_size": 16, "model": "lenet", "partition": "domains",
                               "heterogeneity": None, "n_clients": 5,
                               "domains": ["mnist", "noise", "colour", "inverted", "blur"]},
                       "grid": {"normalizer": ["bn", "fedbn", "gn"]}},
             "plain": {"grid": {"normalizer": ["bn", "gn"]}}}}


def _shift_figure(**spec):
    spec = {"experiment": "shift", "kind": "domains", **spec}
    return load_plan(merge(SHIFT, {"figures": {"f": spec}})).figures["f"]


def test_a_domains_figure_takes_its_columns_from_the_runs_domains():
    fig = _shift_figure(row_order=["gn", "bn", "fedbn"])
    assert (fig.rows, fig.y, fig.orders) == ("method", "domain_accuracy",
                                             (("method", ("gn", "bn", "fedbn")),))
    assert fig.domains == ("mnist", "noise", "colour", "inverted", "blur")  # the runs' order
    assert _shift_figure(domains=["blur", "mnist"]).domains == ("blur", "mnist")


@pytest.mark.parametrize(("spec", "expected"), [
    ({"domains": ["mnist", "svhn"]}, r"figures.f: key 'domains' has value \['mnist', 'svhn'\]; "
     r"allowed: a list of different domains of the figure's runs, from \['mnist', 'noise'"),
    ({"domains": ["mnist", "mnist"]}, r"key 'domains' has value \['mnist', 'mnist'\]"),
    ({"domains": "mnist"}, r"key 'domains' has value 'mnist'"),
    ({"experiment": "plain"}, r"key 'kind' has value 'domains'; allowed: runs with domains"),
    ({"row_order": ["bn", "gn"]}, r"'row_order' has value \['bn', 'gn'\]; allowed: each value "
     r"of 'method'"),
    ({"cols": "split"}, r"key 'cols' is not one of kind 'domains'"),
    ({"y": "accuracy"}, r"key 'y' has value 'accuracy'"),
])
def test_bad_domains_specs_name_the_key_the_value_and_what_is_allowed(spec, expected):
    with pytest.raises(ConfigError, match=expected):
        _shift_figure(**spec)


def test_an_experiment_sweeps_each_methods_own_keys_with_the_rate_and_takes_its_own_recipe():
    """``tune: true``: each run swept over its method's record grids (FedWon's 9 lambdas,
    FedFN's 2 scales) times the grid's lr_scale, a key the grid names kept; a mapping replaces
    a key's grid. ``recipes: own``: Hybrid BN at its code's recipe, the others as set; a key
    the experiment sets wins over the recipe."""
    from fednorm.plan.experiments import expand

    base = {"dataset": "synthetic", "n_train": 60, "n_test": 20, "image_size": 8,
            "width": 4, "gn_groups": 2, "n_clients": 3, "batch_size": 4, "steps": 8,
            "lr": [0.05], "lr_milestones": [], "model": "lenet"}
    grid = {"settings": [{"normalizer": "fedwon"}, {"normalizer": "bn"},
                         {"normalizer": "none", "feature_norm": True},
                         {"normalizer": "fedwon", "agc_lambda": 0.5}],
            "lr_scale": [1, 4]}
    runs = expand("t", {"grid": grid, "tune": True}, base)
    lambdas = sorted((r.agc_lambda for r in runs if r.normalizer == "fedwon"),
                     key=lambda v: math.inf if v is None else v)
    swept = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28]
    assert lambdas == [*sorted([*swept, *swept, 0.5, 0.5]), None, None]
    assert sorted(r.feature_norm_scale for r in runs if r.feature_norm) == [
        "sqrt_dim", "sqrt_dim", "unit", "unit"]
    assert len([r for r in runs if r.normalizer == "bn"]) == 2  # the rate alone
    mapped = expand("t", {"grid": grid, "tune": {"agc_lambda": [0.1, None]}}, base)
    assert {r.agc_lambda for r in mapped if r.normalizer == "fedwon"} == {0.1, None, 0.5}
    assert len(expand("t", {"grid": grid}, base)) == 8  # no tune: the grid alone
    own = expand("t", {"grid": {"normalizer": ["hybridbn", "bn"]}, "recipes": "own"}, base)
    assert [(r.weighted_average, r.clip_norm) for r in own] == [(True, 10.0), (False, None)]
    fixed = expand("t", {"set": {"clip_norm": 5.0}, "grid": {"normalizer": ["hybridbn"]},
                         "recipes": "own"}, base)
    assert (fixed[0].weighted_average, fixed[0].clip_norm) == (True, 5.0)


@pytest.mark.parametrize(("spec", "message"), [
    ({"tune": "yes"}, r"experiments.t: key 'tune' has value 'yes'; allowed: true, false, or a "
                      r"mapping of tuned keys \['hybridbn_momentum'"),
    ({"tune": {"lr_scale": [1]}}, r"experiments.t.tune: unknown key 'lr_scale'; allowed keys: "
                                  r"\['hybridbn_momentum'.*\(the rate: the grid's lr_scale\)"),
    ({"tune": {"agc_lambda": []}}, r"experiments.t.tune: key 'agc_lambda' has value \[\]; "
                                   r"allowed: a non-empty list"),
    ({"recipes": "paper"}, r"experiments.t: key 'recipes' has value 'paper'; allowed: 'common'"),
    ({"tune": {"agc_lambda": [-1]}}, r"agc_lambda"),
])
def test_a_bad_tune_or_recipes_value_is_refused_naming_the_key(spec, message):
    from fednorm.plan.experiments import expand

    with pytest.raises(ConfigError, match=message):
        expand("t", {"grid": {"normalizer": ["fedwon"]}, **spec},
               {"dataset": "synthetic", "model": "lenet", "image_size": 8})
