"""Run configuration: defaults are the paper's, and every bad value is named before a job runs."""

import pytest

from fednorm.config import FIELDS, ConfigError, RunConfig, run_config, with_values


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
        ({"seed": True}, "seed", "integer"),
        ({"bn_momentum": 0.0}, "bn_momentum", "(0"),
    ],
)
def test_bad_values_name_key_value_and_rule(values, key, allowed):
    with pytest.raises(ConfigError) as err:
        run_config(values, where="test")
    message = str(err.value)
    assert f"'{key}'" in message and allowed in message
    assert repr(values[key])[:6] in message if key in values else True


def test_unknown_key_lists_allowed_keys():
    with pytest.raises(ConfigError, match=r"unknown key 'lrate'.*'lr'"):
        run_config({"lrate": 0.1})


def test_run_id_derives_from_config_alone():
    a = run_config({"normalizer": "fbn", "heterogeneity": 0.01, "seed": 2})
    assert a.run_id == run_config({"seed": 2, "heterogeneity": 0.01}).run_id
    assert a.run_id.startswith("fbn-gamma0.01-E1-s2-")
    assert a.run_id != with_values(a, lr=[0.2, 0.05, 0.033]).run_id
    assert a.run_id != with_values(a, bn_momentum=0.2).run_id


def test_every_field_round_trips_through_identity():
    cfg = run_config({"lr": [0.5], "lr_milestones": []})
    assert run_config(cfg.identity()) == cfg
    assert set(cfg.identity()) == set(FIELDS)
