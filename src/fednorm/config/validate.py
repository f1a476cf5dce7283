"""The door: :func:`run_config` turns plain values (from YAML) into a checked RunConfig.

Each key alone against its rule (fednorm.config.schema), the budget keys resolved
(fednorm.config.budget), then the rules that tie several keys together; a bad value raises
:class:`~fednorm.checks.ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fednorm import methods
from fednorm.checks import ConfigError, check, fail
from fednorm.config.budget import BUDGET_KEYS, resolve_budget, train_size
from fednorm.config.run import FIELDS, RunConfig
from fednorm.config.schema import (
    _RULES,
    DATASET_DOMAINS,
    DIGITS5_DOMAINS,
    DIGITS5_SIZES,
    MNIST5K_IMAGES,
    MNIST5K_SIZE,
    STAT_FREE,
    STAT_SENDING,
    TINYIMAGENET_SIZE,
    TINYIMAGENET_TEST,
    TINYIMAGENET_TRAIN,
)

assert set(_RULES) == set(FIELDS), set(_RULES) ^ set(FIELDS)


def check_keys(values: Mapping[str, Any], where: str = "run") -> None:
    """Each run key alone against its rule (the budget keys are checked together, by
    :func:`resolve_budget`); ConfigError for an unknown key or a bad value. Also what checks the
    pipeline's ``run`` section itself: a bad default is an error even where every experiment
    sets the key."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a mapping of keys to values, got {values!r}")
    for key, value in values.items():
        if key not in _RULES and key not in BUDGET_KEYS:
            raise ConfigError(f"{where}: unknown key '{key}'; allowed keys: "
                              f"{sorted(FIELDS + BUDGET_KEYS)}")
        if key in _RULES:
            check(where, key, value, _RULES[key])


def checked_section(section: Any, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    """A section of the pipeline's configuration at ``where``: a mapping (None: an empty one)
    whose keys are all ``allowed``; ConfigError naming the first other key and the allowed."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {section!r}")
    for key in section:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key '{key}'; allowed keys: {list(allowed)}")
    return section


# Keys whose numbers are stored as floats (a YAML integer such as 1 becomes 1.0, one run id)
_FLOAT_KEYS = ("foe_eps", "alie_z", "var_floor", "val_fraction", "lr_scale", "clip_norm",
               *(k.name for k in methods.KEYS if k.type.startswith("float")))


def run_config(values: Mapping[str, Any], where: str = "run") -> RunConfig:
    """Build and validate a RunConfig from plain values; unknown keys are errors. The budget
    keys (``epochs``, ``rounds``, ``lr_decay_at``: :func:`resolve_budget`) are accepted and
    turned into ``steps`` and ``lr_milestones``."""
    check_keys(values, where)  # each key alone first: the budget reads some of them
    values = resolve_budget(values, where)
    clean = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    if "heterogeneity" in clean and clean["heterogeneity"] is not None:
        clean["heterogeneity"] = float(clean["heterogeneity"])
    for key in _FLOAT_KEYS:
        if clean.get(key) is not None:
            clean[key] = float(clean[key])
    if not methods.method(clean.get("normalizer", RunConfig.normalizer)).per_round_keys:
        # nothing of this method to scale: kept at its default, so that a profile that scales
        # time constants leaves the ids of every other method's runs as they were
        clean["time_constants"] = RunConfig.time_constants
    cfg = RunConfig(**clean)
    _cross_checks(cfg, where)
    methods.check_method(cfg, where)
    _byzantine_checks(cfg, where)
    _participation_checks(cfg, where)
    return cfg


def with_values(cfg: RunConfig, **values: Any) -> RunConfig:
    """A validated copy of ``cfg`` with some keys replaced."""
    return run_config({**cfg.identity(), **values})


def _cross_checks(cfg: RunConfig, where: str) -> None:
    """Rules that tie several keys together."""
    het = cfg.heterogeneity
    if cfg.partition == "gamma" and (het is None or het > 1):
        raise fail(where, "heterogeneity", het, "gamma in [0, 1] when partition is 'gamma'")
    if cfg.partition == "dirichlet" and (het is None or het <= 0):
        raise fail(where, "heterogeneity", het, "alpha > 0 when partition is 'dirichlet'")
    if cfg.partition == "shards" and (het is None or het < 1 or het != int(het)):
        raise fail(where, "heterogeneity", het, "an integer >= 1 (classes per client) for shards")
    _domain_checks(cfg, where)
    size = train_size(dataclasses.asdict(cfg))
    if cfg.partition == "shards" and het is not None and cfg.n_clients * het > size:
        raise fail(where, "heterogeneity", het, f"at most {size} shards in all: n_clients "
                   f"({cfg.n_clients}) x classes per client")
    if len(cfg.lr) != len(cfg.lr_milestones) + 1:
        raise fail(where, "lr", list(cfg.lr), "one more value than lr_milestones has entries")
    if cfg.steps % cfg.local_steps:
        raise fail(where, "steps", cfg.steps, f"a multiple of local_steps ({cfg.local_steps})")
    if cfg.dataset == "cifar10":
        for key, need in (("image_size", 32), ("n_train", None), ("n_test", None)):
            if getattr(cfg, key) != need:
                raise fail(where, key, getattr(cfg, key), f"{need!r} with dataset 'cifar10'")
    elif cfg.dataset == "tinyimagenet":
        _tinyimagenet_checks(cfg, where)
    elif cfg.dataset == "imagenet":
        _imagenet_checks(cfg, where)
    elif cfg.n_train is None or cfg.n_test is None:
        key = "n_train" if cfg.n_train is None else "n_test"
        raise fail(where, key, None, f"an integer >= 1 with dataset '{cfg.dataset}'")
    if cfg.dataset == "mnist5k":
        _mnist5k_checks(cfg, where)
    if cfg.model == "lenet" and cfg.image_size < 8:
        # three 3x3 stride-2 poolings (ceil mode): 8 -> 4 -> 2 -> 1; 7 -> 3 -> 1 -> nothing
        raise fail(where, "image_size", cfg.image_size, "an integer >= 8 with model 'lenet'")
    if cfg.feature_norm_scale != "unit" and not cfg.feature_norm:
        raise fail(where, "feature_norm_scale", cfg.feature_norm_scale,
                   "'unit' (the default) with feature_norm: false (no feature to scale)")
    if cfg.client_momentum == "global" and cfg.attack_updates:
        # the server combines attacked updates robustly; averaging the Byzantine clients'
        # momenta as honest ones would be a threat model of its own, not implemented
        raise fail(where, "client_momentum", cfg.client_momentum,
                   "'local' or 'reset' with attack_updates: true")


def _domain_checks(cfg: RunConfig, where: str) -> None:
    """Feature shift: the domains a dataset gives, and the split by domain."""
    allowed = DATASET_DOMAINS.get(cfg.dataset, ())
    if cfg.domains and (not set(cfg.domains) <= set(allowed)
                        or len(set(cfg.domains)) < len(cfg.domains)):
        raise fail(where, "domains", list(cfg.domains),
                   f"distinct names from {list(allowed)} with dataset '{cfg.dataset}'"
                   if allowed else f"[] with dataset '{cfg.dataset}' (domains: "
                   f"{sorted(DATASET_DOMAINS)})")
    if cfg.dataset == "digits5":
        if not cfg.domains:
            raise fail(where, "domains", [], f"a non-empty list from {list(DIGITS5_DOMAINS)} "
                       "with dataset 'digits5'")
        for key, i in (("n_train", 0), ("n_test", 1)):
            most = min(DIGITS5_SIZES[d][i] for d in cfg.domains)
            if (getattr(cfg, key) or 0) > most:
                raise fail(where, key, getattr(cfg, key), f"at most {most} with dataset "
                           f"'digits5' and domains {list(cfg.domains)} (images of each domain)")
    if cfg.partition != "domains":
        return
    if not cfg.domains:
        raise fail(where, "partition", "domains", "'domains' with a non-empty list of domains")
    if cfg.heterogeneity is not None:
        raise fail(where, "heterogeneity", cfg.heterogeneity,
                   "null with partition 'domains' (each client holds one domain)")
    if cfg.n_clients % len(cfg.domains):
        raise fail(where, "n_clients", cfg.n_clients,
                   f"a multiple of the {len(cfg.domains)} domains with partition 'domains' "
                   f"(the same number of clients a domain)")


def _mnist5k_checks(cfg: RunConfig, where: str) -> None:
    """What the 5,000 digits of 28x28 pixels can give (fednorm.data.mnist5k)."""
    if cfg.image_size > MNIST5K_SIZE:
        raise fail(where, "image_size", cfg.image_size,
                   f"an integer <= {MNIST5K_SIZE} with dataset 'mnist5k' (its digits are "
                   f"{MNIST5K_SIZE}x{MNIST5K_SIZE}; they are only ever shrunk)")
    assert cfg.n_train is not None and cfg.n_test is not None
    if cfg.n_train + cfg.n_test > MNIST5K_IMAGES:
        raise fail(where, "n_train", cfg.n_train,
                   f"at most {MNIST5K_IMAGES - cfg.n_test} with dataset 'mnist5k' and n_test = "
                   f"{cfg.n_test} (n_train + n_test <= its {MNIST5K_IMAGES} images)")


def _tinyimagenet_checks(cfg: RunConfig, where: str) -> None:
    """What Tiny-ImageNet's 100,000 + 10,000 images of 64x64 can give."""
    if cfg.image_size > TINYIMAGENET_SIZE:
        raise fail(where, "image_size", cfg.image_size,
                   f"an integer <= {TINYIMAGENET_SIZE} with dataset 'tinyimagenet' (its images "
                   f"are {TINYIMAGENET_SIZE}x{TINYIMAGENET_SIZE}; they are only ever shrunk)")
    for key, most in (("n_train", TINYIMAGENET_TRAIN), ("n_test", TINYIMAGENET_TEST)):
        if getattr(cfg, key) is not None and getattr(cfg, key) > most:
            raise fail(where, key, getattr(cfg, key),
                       f"null (all) or at most {most} with dataset 'tinyimagenet'")


def _imagenet_checks(cfg: RunConfig, where: str) -> None:
    """What ImageNet-1K's images, streamed from disk and never held in memory
    (fednorm.data.imagenet), can be used with."""
    for key in ("n_train", "n_test"):
        if getattr(cfg, key) is not None:  # its classes are of unequal sizes: no subsets
            raise fail(where, key, getattr(cfg, key), "null (all images) with dataset "
                       "'imagenet'")
    if cfg.augment != "resized_crop_flip":
        # its JPEGs are each of its own size: a training image is its random box, resized as
        # it is decoded (fednorm.data.imagenet.decode_crop_flip)
        raise fail(where, "augment", cfg.augment, "'resized_crop_flip' with dataset 'imagenet' "
                   "(its images, each of its own size, are cropped and resized as they are "
                   "decoded)")


def _participation_checks(cfg: RunConfig, where: str) -> None:
    """What partial participation (``participation`` < 1) cannot be combined with."""
    if cfg.participation >= 1:
        return
    why = (f"participation {cfg.participation!r} < 1 averages over the drawn clients alone")
    if cfg.record_dynamics:
        raise fail(where, "record_dynamics", True,
                   f"false with participation {cfg.participation!r} < 1 (the dynamics average "
                   f"over every client of a round)")
    for key, ok in (("attack", cfg.attack == "none"), ("aggregator", cfg.aggregator == "mean"),
                    ("nnm", not cfg.nnm), ("attack_updates", not cfg.attack_updates)):
        if not ok:
            default = RunConfig.__dataclass_fields__[key].default
            raise fail(where, key, getattr(cfg, key),
                       f"{default!r} with participation {cfg.participation!r} < 1 ({why}; "
                       f"attacks and robust aggregators take all n_clients rows)")


def _byzantine_checks(cfg: RunConfig, where: str) -> None:
    """The Byzantine minority and what an attack or a defense needs."""
    if 2 * cfg.f >= cfg.n_clients:
        raise fail(where, "f", cfg.f, f"0 <= f < n_clients/2 (a Byzantine minority; n_clients "
                                       f"= {cfg.n_clients}, so f <= {(cfg.n_clients - 1) // 2})")
    if cfg.attack != "none" and cfg.f == 0:
        raise fail(where, "f", cfg.f, f"f >= 1 with attack '{cfg.attack}' (f clients attack)")
    robust = cfg.attack != "none" or cfg.aggregator != "mean" or cfg.nnm
    # with attacked updates there is something to attack whatever the normalizer sends
    targets = (*STAT_SENDING, *STAT_FREE) if cfg.attack_updates else STAT_SENDING
    if robust and cfg.normalizer not in targets:
        key, value = (("attack", cfg.attack) if cfg.attack != "none" else
                      ("aggregator", cfg.aggregator) if cfg.aggregator != "mean" else
                      ("nnm", cfg.nnm))
        default = RunConfig.__dataclass_fields__[key].default
        raise fail(where, key, value, f"{default!r} with normalizer '{cfg.normalizer}', "
                   f"which sends no statistics to attack or aggregate (attacks and robust "
                   f"aggregation need one of {list(STAT_SENDING)}, or one of "
                   f"{list(STAT_FREE)} with attack_updates: true)")
