"""The method records (fednorm.methods): what config, norms, the engine and plots derive from
them, each method's own keys, and budget-scaled time constants."""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path

import pytest

from fednorm import methods
from fednorm.config import NORMALIZERS, STAT_FREE, STAT_SENDING, ConfigError, run_config
from fednorm.norms import LAYERS, normalizer_for
from fednorm.plots.style import KNOWN

SRC = Path(__file__).resolve().parents[1] / "src"
QUICK = dict(dataset="synthetic", n_train=60, n_test=20, image_size=8, width=4, hidden=8,
             gn_groups=2, n_clients=3, batch_size=4, steps=32, lr=[0.05], lr_milestones=[])


def test_every_record_has_a_layer_a_look_and_is_a_normalizer():
    assert NORMALIZERS == methods.NAMES
    # a method of one line in norms' table, or a module of its own named by its record
    assert set(LAYERS) == {m.name for m in methods.METHODS if m.module is None}
    assert all(callable(importlib.import_module(m.module).layers)
               for m in methods.METHODS if m.module is not None)
    assert all(KNOWN[m.name] == m.look for m in methods.METHODS)
    assert set(STAT_SENDING) == {"bn", "fbn", "fixbn"}
    assert set(STAT_FREE) == {"gn", "gn_ws", "ln", "in", "fixup", "fedwon", "none"}


# the pipeline's three papers are named as papers too (the report, the claims, the plan)
PAPERS = ("fbn", "fixbn", "fedtan")


@pytest.mark.parametrize("name", [m.name for m in methods.METHODS
                                  if (m.module is not None or m.personal)
                                  and m.name not in PAPERS])
def test_a_method_is_named_in_its_record_its_layer_and_its_module_alone(name):
    """A method's name appears in at most three source files: its record, norms' package
    (its table of the methods of one line, the re-exports), and its own module in norms (its
    layer, rule, parts and hooks) if its record names one (the engine, the training loop,
    config and plots read flags and call hooks)."""
    files = subprocess.run(["grep", "-rlw", name, str(SRC), "--include=*.py"],
                           capture_output=True, text=True, check=False).stdout.split()
    module = methods.method(name).module
    allowed = {"methods.py", "norms/__init__.py",
               *([] if module is None else
                 [module.removeprefix("fednorm.").replace(".", "/") + ".py"])}
    assert {str(Path(f).relative_to(SRC / "fednorm")) for f in files} <= allowed, files


@pytest.mark.parametrize("key", methods.KEYS, ids=lambda k: k.name)
def test_a_method_s_own_key_is_refused_with_another_method(key):
    owner = methods.OWNER[key.name].name
    other = "bn" if owner != "bn" else "gn"
    value = {"fbn_init": "first_batch", "fixbn_freeze": 0.25, "fixbn_fix": "both",
             "fedtan_union": "first_step", "hybridbn_stats_images": 8,
             "hybridbn_report": "batch", "hybridbn_momentum": 0.1, "hybridbn_eval": "global",
             "hybridbn_mixing": "shared", "agc_lambda": 0.1, "agc_unit": "element",
             "fedwon_ws_gain": "none", "pretrain_passes": 3}.get(key.name)
    if value is None:  # a key its record tunes: a value of its grid
        value = next(v for t in methods.OWNER[key.name].tunes if t.key == key.name
                     for v in t.grid if v != key.default)
    assert key.rule(value) is None and value != key.default
    with pytest.raises(ConfigError, match=rf"key '{key.name}'.*'{owner}' only"):
        run_config({**QUICK, "normalizer": other, key.name: value})
    run_config({**QUICK, "normalizer": owner, key.name: value,
                **({"model": "resnet20"} if owner == "fixup" else {})})


@pytest.mark.parametrize("rounds", [1, 7, 32, 160, 500, 2000])
def test_a_scaled_time_constant_moves_the_paper_s_fraction_by_the_end(rounds):
    """Hybrid BN's smoothing m = 0.002 a round for the paper's 500 rounds moves G
    1 - 0.998^500 = 63 % of the way; scaled for R < 500 rounds, m' moves it as far in R."""
    cfg = run_config({**QUICK, "normalizer": "hybridbn", "steps": rounds,
                      "time_constants": "scaled"})
    m = methods.per_round(cfg, "hybridbn_momentum")
    assert normalizer_for(cfg).hooks.start.momentum == m
    if rounds >= 500:  # as long as the paper's or longer: its constant, tracking as there
        assert m == 0.002
    else:
        assert 1 - (1 - m) ** rounds == pytest.approx(1 - 0.998**500, rel=1e-12)
        assert m > 0.002
    given = run_config({**cfg.identity(), "time_constants": "given"})
    assert methods.per_round(given, "hybridbn_momentum") == 0.002


def test_time_constants_leave_the_runs_of_methods_without_one_as_they_were():
    """A profile that scales time constants changes no other method's run (nor its id)."""
    for name in ("bn", "fbn", "fedbn", "fedwon"):
        scaled = run_config({**QUICK, "normalizer": name, "time_constants": "scaled"})
        assert scaled == run_config({**QUICK, "normalizer": name})
    hybrid = {**QUICK, "normalizer": "hybridbn"}
    assert (run_config({**hybrid, "time_constants": "scaled"}).run_id
            != run_config(hybrid).run_id)


def test_a_revised_method_s_runs_get_new_ids_and_the_others_keep_theirs():
    """Hybrid BN's own d per client (revision 1) and FedTAN's SGD restarted after its union
    step (revision 1) changed what they compute: their runs' ids change with it, so that no
    result of the old method is reused for them."""
    import hashlib
    import json

    from fednorm.config import changed_fields

    for name in methods.NAMES:
        cfg = run_config({**QUICK, "normalizer": name,
                          **({"model": "resnet20"} if name == "fixup" else {})})
        plain = hashlib.sha1(json.dumps(changed_fields(cfg), sort_keys=True).encode())
        same = cfg.run_id.endswith(plain.hexdigest()[:10])
        assert same == (methods.method(name).revision == 0), name


def test_a_method_s_models_and_memory_needs_come_from_its_record():
    with pytest.raises(ConfigError, match=r"key 'model'.*'fedwon'"):
        run_config({**QUICK, "normalizer": "fedwon", "model": "resnet18"})
    with pytest.raises(ConfigError, match=r"key 'normalizer'.*'hybridbn' with dataset 'imagenet'"):
        run_config({"normalizer": "hybridbn", "dataset": "imagenet",
                    "augment": "resized_crop_flip"})
    with pytest.raises(ConfigError, match=r"key 'participation'.*'fedtan'"):
        run_config({**QUICK, "normalizer": "fedtan", "participation": 0.5})


@pytest.mark.parametrize("tune", [t for m in methods.METHODS for t in m.tunes]
                         + list(methods.FEATURE_NORM_TUNES), ids=lambda t: t.key)
def test_every_tuned_value_is_one_its_key_allows_and_the_default_is_in_the_grid(tune):
    """A tuned key is its method's own (or FedFN's scale), each value of its grid passes the
    key's rule (a run at it is valid), and the default is one of them: the common recipe is
    a point of the sweep."""
    owner = [m for m in methods.METHODS if tune in m.tunes]
    rules = {**dict(methods.key_rules()), "feature_norm_scale": None}
    assert tune.key in rules and (not owner or tune.key in {k.name for k in owner[0].keys})
    base = {**QUICK, "normalizer": owner[0].name if owner else "none",
            "feature_norm": not owner, "model": "lenet"}
    for value in tune.grid:
        assert getattr(run_config({**base, tune.key: value}), tune.key) == value
    assert getattr(run_config(base), tune.key) in tune.grid
    assert methods.SYMBOLS[tune.key] and tune.key in methods.TUNED_KEYS


def test_fedwon_without_clipping_and_hybrid_bn_at_its_codes_recipe():
    """λ null: no adaptive clipping at all (the engine's normalizer has none); Hybrid BN's
    record carries its code's recipe (averaging by data size, clipping at 10), no other's."""
    fedwon = {**QUICK, "normalizer": "fedwon", "model": "lenet"}
    assert normalizer_for(run_config({**fedwon, "agc_lambda": None})).hooks.lam is None
    assert normalizer_for(run_config(fedwon)).hooks.lam == 0.01
    assert dict(methods.method("hybridbn").recipe) == {"weighted_average": True,
                                                       "clip_norm": 10.0}
    assert [m.name for m in methods.METHODS if m.recipe] == ["hybridbn"]
