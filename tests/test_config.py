"""Run configuration: defaults are the paper's, and every bad value is named before a job runs."""

import hashlib
import re

import pytest

from fednorm.config import (
    FIELDS,
    ConfigError,
    RunConfig,
    changed_fields,
    run_config,
    with_values,
)


def test_defaults_are_the_fbn_paper_table_2():
    cfg = RunConfig()
    assert (cfg.n_clients, cfg.batch_size, cfg.steps, cfg.momentum) == (10, 50, 3000, 0.99)
    assert [cfg.lr_at(s) for s in (0, 999, 1000, 1999, 2000, 2999)] == [
        0.1, 0.1, 0.05, 0.05, 0.033, 0.033]
    assert cfg.momentum_convention == "ema"


@pytest.mark.parametrize(
    ("values", "key", "allowed"),
    [
        ({"lr": [-0.1, 0.05, 0.033]}, "lr", "positive"),
        ({"heterogeneity": 1.5}, "heterogeneity", "[0, 1]"),
        ({"heterogeneity": -0.5}, "heterogeneity", "[0"),
        ({"normalizer": "layernorm"}, "normalizer", "'fbn'"),
        ({"partition": "dirichlet", "heterogeneity": 0.0}, "heterogeneity", "alpha > 0"),
        ({"partition": "shards", "heterogeneity": 1.5}, "heterogeneity", "integer"),
        ({"batch_size": 1}, "batch_size", ">= 2"),
        ({"local_steps": 7}, "steps", "multiple of local_steps"),
        ({"normalizer": "central", "local_steps": 2, "steps": 10}, "local_steps", "central"),
        ({"lr_milestones": [1000]}, "lr", "one more value"),
        ({"lr_milestones": [2000, 1000], "lr": [1, 1, 1]}, "lr_milestones", "increasing"),
        ({"dataset": "synthetic"}, "n_train", "synthetic"),
        ({"image_size": 16}, "image_size", "cifar10"),
        ({"normalizer": "gn", "gn_groups": 48}, "gn_groups", "divisor"),
        ({"normalizer": "gn_ws", "gn_groups": 48}, "gn_groups", "divisor"),
        ({"normalizer": "fixup"}, "model", "['resnet20'] with normalizer 'fixup'"),
        ({"normalizer": "fixup", "model": "fbn_cnn"}, "model", "'resnet20'"),
        ({"seed": True}, "seed", "integer"),
        ({"bn_momentum": 0.0}, "bn_momentum", "(0"),
        ({"crop_padding": -1}, "crop_padding", ">= 0"),
        ({"client_momentum": "server"}, "client_momentum", "'global'"),
        ({"model": "lenet", "dataset": "synthetic", "n_train": 9, "n_test": 9, "image_size": 7},
         "image_size", ">= 8 with model 'lenet'"),
        ({"normalizer": "bn", "agc_lambda": 0.1}, "agc_lambda", "with normalizer 'fedwon'"),
        ({"normalizer": "fedwon", "agc_lambda": 0.0}, "agc_lambda", "(0"),
        ({"normalizer": "fixup", "model": "resnet20", "feature_norm": True}, "feature_norm",
         "'fixup'"),
        ({"feature_norm": 1}, "feature_norm", "true or false"),
        ({"normalizer": "hybridbn", "attack": "sf", "f": 2}, "attack", "'hybridbn'"),
        ({"normalizer": "hybridbn", "hybridbn_stats_images": 1}, "hybridbn_stats_images",
         ">= 2"),
        ({"normalizer": "hybridbn", "hybridbn_report": "raw"}, "hybridbn_report", "'batch'"),
        ({"normalizer": "hybridbn", "hybridbn_momentum": 0.0}, "hybridbn_momentum", "(0"),
        ({"normalizer": "hybridbn", "hybridbn_momentum": 1.5}, "hybridbn_momentum", "1]"),
        ({"normalizer": "hybridbn", "hybridbn_eval": "smoothed"}, "hybridbn_eval", "'fresh'"),
        ({"normalizer": "bn", "hybridbn_report": "batch"}, "hybridbn_report",
         "with normalizer 'hybridbn' only"),
        ({"normalizer": "fbn", "hybridbn_momentum": 0.1}, "hybridbn_momentum",
         "with normalizer 'hybridbn' only"),
        ({"normalizer": "hybridbn", "dataset": "imagenet", "augment": "resized_crop_flip"},
         "normalizer", "'imagenet'"),
        ({"val_fraction": 0.6}, "val_fraction", "[0, 0.5]"),
    ],
)
def test_bad_values_name_key_value_and_rule(values, key, allowed):
    with pytest.raises(ConfigError) as err:
        run_config(values, where="test")
    message = str(err.value)
    assert f"'{key}'" in message and allowed in message
    assert repr(values[key])[:6] in message if key in values else True


def test_table_4_normalizers_are_accepted_where_they_apply():
    """LN, IN and GN+WS on either model, Fixup on ResNet-20; gn_groups only binds GN and GN+WS;
    with attacked updates a statistics-free normalizer has something to attack."""
    for name in ("ln", "in", "gn_ws"):
        for model in ("fbn_cnn", "resnet20"):
            assert run_config({"normalizer": name, "model": model, "gn_groups": 2}).normalizer \
                == name
    assert run_config({"normalizer": "fixup", "model": "resnet20"}).model == "resnet20"
    for name in ("ln", "in", "fixup"):  # 48 does not divide width 64: irrelevant here
        run_config({"normalizer": name, "model": "resnet20", "gn_groups": 48})
    for name in ("gn_ws", "ln", "in", "fixup"):
        with pytest.raises(ConfigError, match=f"normalizer '{name}'"):
            run_config({"normalizer": name, "model": "resnet20", "attack": "sf", "f": 2})
        run_config({"normalizer": name, "model": "resnet20", "attack": "sf", "f": 2,
                    "attack_updates": True})


def test_unknown_key_lists_allowed_keys():
    with pytest.raises(ConfigError, match=r"unknown key 'lrate'.*'lr'"):
        run_config({"lrate": 0.1})


def test_run_id_derives_from_config_alone():
    a = run_config({"normalizer": "fbn", "heterogeneity": 0.01, "seed": 2})
    assert a.run_id == run_config({"seed": 2, "heterogeneity": 0.01}).run_id
    assert a.run_id.startswith("fbn-gamma0.01-E1-s2-")
    assert a.run_id != with_values(a, lr=[0.2, 0.05, 0.033]).run_id
    assert a.run_id != with_values(a, bn_momentum=0.2).run_id


# Every RunConfig default as released. A run_id hashes only the fields that differ from their
# defaults, so a changed default would give a run that left the key alone the same id for a
# different computation (stale results reused). Never edit a value here: add a field instead.
PINNED_DEFAULTS = {
    "dataset": "cifar10", "n_train": None, "n_test": None, "image_size": 32,
    "synthetic_separation": 1.0, "augment": "none", "crop_padding": 4, "model": "fbn_cnn",
    "width": 64, "hidden": 128, "dropout": 0.25, "normalizer": "fbn", "bn_momentum": 0.1,
    "bn_eps": 1e-05, "gn_groups": 32, "fbn_init": "zero_one", "fixbn_freeze": 0.5,
    "fixbn_fix": "stats", "fedtan_union": "every_step",
    "hybridbn_stats_images": 64, "hybridbn_report": "mixed", "hybridbn_momentum": 0.002,
    "hybridbn_eval": "fresh", "hybridbn_mixing": "client", "clip_norm": None,
    "time_constants": "given", "weighted_average": False, "domains": [],
    "feature_norm_scale": "unit", "agc_unit": "vector", "fedwon_ws_gain": "relu",
    "n_clients": 10, "participation": 1.0,
    "partition": "gamma",
    "heterogeneity": 0.0, "batch_size": 50, "local_steps": 1, "steps": 3000,
    "lr": [0.1, 0.05, 0.033], "lr_milestones": [1000, 2000], "momentum": 0.99,
    "momentum_convention": "ema", "weight_decay": 0.0, "client_momentum": "local",
    "attack": "none", "f": 0, "aggregator": "mean", "nnm": False, "foe_eps": 1.1,
    "alie_z": None, "var_floor": 1e-05, "attack_stats": "mean_var", "attack_updates": False,
    "eval_every": 50, "record_dynamics": False, "dynamics_window": 200, "seed": 0,
    "val_fraction": 0.0, "agc_lambda": 0.01, "feature_norm": False, "lr_scale": 1.0,
    "self_weight": 0.5, "pretrain_passes": 150,
}


def test_defaults_never_change_their_meaning():
    """A field added later may only be added (with the default that keeps the old behaviour):
    the defaults that existed stay as they were."""
    defaults = RunConfig().identity()
    changed = {k: (PINNED_DEFAULTS[k], defaults[k]) for k in PINNED_DEFAULTS
               if k in defaults and defaults[k] != PINNED_DEFAULTS[k]}
    assert not changed, f"defaults changed (pinned, now): {changed}"
    assert set(PINNED_DEFAULTS) <= set(defaults), "a field was removed"
    assert set(defaults) <= set(PINNED_DEFAULTS), "pin the new field's default here"


def test_run_id_hashes_only_the_fields_that_differ_from_their_defaults():
    cfg = run_config({"seed": 2, "heterogeneity": 0.01, "record_dynamics": False})
    assert changed_fields(cfg) == {"seed": 2, "heterogeneity": 0.01}
    digest = hashlib.sha1(b'{"heterogeneity": 0.01, "seed": 2}').hexdigest()[:10]
    assert cfg.run_id == f"fbn-gamma0.01-E1-s2-{digest}"
    # every field set away from its default changes the id
    for key, value in (("record_dynamics", True), ("dynamics_window", 50), ("dropout", 0.5),
                       ("lr", [0.2, 0.05, 0.033]), ("alie_z", 1.0)):
        assert with_values(cfg, **{key: value}).run_id != cfg.run_id, key


def test_every_field_round_trips_through_identity():
    cfg = run_config({"lr": [0.5], "lr_milestones": []})
    assert run_config(cfg.identity()) == cfg
    assert set(cfg.identity()) == set(FIELDS)


# --- Byzantine keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "key", "value", "allowed"),
    [
        ({"f": 5}, "f", "5", "n_clients/2"),  # n_clients = 10: 5 is not a minority
        ({"f": 3, "n_clients": 6}, "f", "3", "f <= 2"),
        ({"f": -1}, "f", "-1", "integer >= 0"),
        ({"attack": "bogus"}, "attack", "'bogus'", "'alie'"),
        ({"aggregator": "mode"}, "aggregator", "'mode'", "'trimmed_mean'"),
        ({"nnm": "yes"}, "nnm", "'yes'", "true or false"),
        ({"attack": "sf"}, "f", "0", "f >= 1 with attack 'sf'"),
        ({"attack": "sf", "f": 1, "normalizer": "gn"}, "attack", "'sf'", "normalizer 'gn'"),
        ({"attack": "foe", "f": 2, "normalizer": "central"}, "attack", "'foe'",
         "normalizer 'central'"),
        ({"aggregator": "median", "normalizer": "gn"}, "aggregator", "'median'",
         "normalizer 'gn'"),
        ({"nnm": True, "normalizer": "central"}, "nnm", "True", "normalizer 'central'"),
        ({"attack_stats": "both"}, "attack_stats", "'both'", "'mean_var', 'mean', 'var'"),
        ({"attack_updates": 1}, "attack_updates", "1", "true or false"),
        ({"attack": "sf", "f": 3, "normalizer": "central", "attack_updates": True}, "attack",
         "'sf'", "or one of ['gn', 'gn_ws', 'ln', 'in', 'fixup', 'fedwon', 'none'] with "
         "attack_updates: true"),
    ],
)
def test_byzantine_errors_name_key_value_and_rule(values, key, value, allowed):
    """Each Byzantine misconfiguration is refused with "key '<key>' has value <value>" and
    what is allowed."""
    pattern = re.escape(f"key '{key}' has value {value};") + ".*" + re.escape(allowed)
    with pytest.raises(ConfigError, match=pattern):
        run_config(values, where="test")


def test_attacked_updates_give_groupnorm_something_to_attack():
    """GN sends no statistics, so an attack needs attack_updates (Robust-DSGD with GN)."""
    with pytest.raises(ConfigError, match="key 'attack' has value 'alie'"):
        run_config({"normalizer": "gn", "attack": "alie", "f": 3})
    cfg = run_config({"normalizer": "gn", "attack": "alie", "f": 3, "attack_updates": True})
    assert cfg.scenario == "ALIE + updates, no defense"


def test_attack_free_byzantine_settings_are_accepted():
    """f clients that do not attack, and robust aggregation without an attack, are valid."""
    assert run_config({"f": 4}).f == 4  # the largest minority of 10
    cfg = run_config({"aggregator": "trimmed_mean", "f": 2, "normalizer": "bn"})
    assert (cfg.aggregator, cfg.f, cfg.attack) == ("trimmed_mean", 2, "none")


@pytest.mark.parametrize(
    ("values", "scenario", "tag"),
    [
        ({}, "no attack", ""),
        ({"attack": "sf", "f": 3}, "SF, no defense", "-sf3-mean"),
        ({"attack": "sf", "f": 3, "aggregator": "median", "nnm": True}, "SF, median + NNM",
         "-sf3-median+nnm"),
        ({"attack": "alie", "f": 2, "aggregator": "trimmed_mean"}, "ALIE, trimmed mean",
         "-alie2-trimmed_mean"),
        ({"attack": "sf", "f": 3, "attack_stats": "mean"}, "SF on means, no defense",
         "-sf3-mean"),
        ({"attack": "sf", "f": 3, "attack_updates": True, "aggregator": "median", "nnm": True},
         "SF + updates, median + NNM", "-sf3+upd-median+nnm"),
    ],
)
def test_scenario_and_run_id_name_the_attack_and_the_defense(values, scenario, tag):
    """scenario reads '<ATTACK>, <defense>'; run_id carries '-<attack><f>-<aggregator>[+nnm]'
    between the federation axes and the seed, and nothing for the default (no attack)."""
    cfg = run_config(values)
    assert cfg.scenario == scenario
    assert re.fullmatch(r"fbn-gamma0-E1" + re.escape(tag) + r"-s0-[0-9a-f]{10}", cfg.run_id)


@pytest.mark.parametrize(("partition", "het", "label"), [
    ("iid", None, "IID"), ("gamma", 0.1, "γ=0.1"), ("dirichlet", 0.6, "Dir(0.6)"),
    ("shards", 2, "Shards(2)"),
])
def test_split_names_partition_and_heterogeneity(partition, het, label):
    cfg = run_config({"partition": partition, "heterogeneity": het})
    assert cfg.split == label


IMAGENET = {"dataset": "imagenet", "model": "resnet18", "image_size": 16,
            "augment": "resized_crop_flip"}


@pytest.mark.parametrize(("values", "key", "value", "allowed"), [
    ({"n_train": 10}, "n_train", "10", "null (all images) with dataset 'imagenet'"),
    ({"n_test": 10}, "n_test", "10", "null (all images) with dataset 'imagenet'"),
    # its JPEGs are of every size: cropped and resized as they are decoded, nothing else
    ({"augment": "none"}, "augment", "'none'", "'resized_crop_flip' with dataset 'imagenet'"),
    ({"augment": "crop_flip"}, "augment", "'crop_flip'",
     "'resized_crop_flip' with dataset 'imagenet'"),
    # HeteroFL's one pass over the training images held in memory
    ({"normalizer": "heterofl_sbn"}, "normalizer", "'heterofl_sbn'",
     "not 'heterofl_sbn' with dataset 'imagenet'"),
])
def test_imagenet_refuses_what_needs_its_images_in_memory(values, key, value, allowed):
    pattern = re.escape(f"test: key '{key}' has value {value}; allowed: {allowed}")
    with pytest.raises(ConfigError, match=pattern):
        run_config({**IMAGENET, **values}, where="test")


def test_imagenet_takes_a_held_out_validation_split():
    """val_fraction holds out file lists (fednorm.data.arrays.hold_out): allowed."""
    assert run_config({**IMAGENET, "val_fraction": 0.1}).val_fraction == 0.1
