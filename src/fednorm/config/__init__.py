"""The run configuration: one frozen object per training run, validated at the door.

A :class:`RunConfig` is everything that decides a run's result (a run is a pure function of it);
paths, devices and thread counts are not part of it. Every key, its type and its allowed values
are declared once, in ``_RULES`` (fednorm.config.schema); :func:`run_config` turns a plain dict
(from YAML) into a RunConfig and raises :class:`ConfigError` naming the key, the value and what
is allowed. Import the names from here; the rooms, each importing only those listed after it:

``validate``   :func:`run_config`, :func:`check_keys`, :func:`with_values`, the rules that tie
               several keys together, :func:`checked_section` (a pipeline section's keys)
``budget``     budgets as a user states them (``epochs``, ``rounds``, ``lr_decay_at``) turned
               into ``steps`` and ``lr_milestones`` (:func:`resolve_budget`)
``bundles``    which runs may train together in one bundle (:func:`bundle_key`)
``run``        :class:`RunConfig`, its id and labels; ``FIELDS``, ``DERIVED``
``schema``     each key's allowed values and its rule (``_RULES``); the datasets' sizes
``paths``      :class:`Paths`, where a pipeline's outputs go
``toy``        :class:`ToyConfig`, the 2-D normalization toy's
"""

from fednorm.checks import (  # the checks every config module uses
    INT_MAX,
    Boolean,
    ConfigError,
    Finite,
    IntIn,
    ListOf,
    Nullable,
    NumberIn,
    OneOf,
    check,
    fail,
    int_at_least,
    number_in,
)
from fednorm.config.budget import _BUDGET_RULES, BUDGET_KEYS, resolve_budget, train_size
from fednorm.config.bundles import BUNDLE_FREE, SERVER_FREE, bundle_key
from fednorm.config.paths import Paths
from fednorm.config.run import DERIVED, FIELDS, RunConfig, changed_fields, participants_per_round
from fednorm.config.schema import (
    _RULES,
    AGGREGATORS,
    ATTACK_STATS,
    ATTACKS,
    AUGMENTS,
    CHECKPOINT_MINUTES,
    CLIENT_MOMENTA,
    CUDA_GRAPHS,
    DATA_WORKERS,
    DATASET_DOMAINS,
    DATASETS,
    DIGITS5_SIZES,
    IMAGENET_TEST,
    IMAGENET_TRAIN,
    MNIST5K_IMAGES,
    MNIST5K_SIZE,
    MODELS,
    MOMENTUM_CONVENTIONS,
    NORMALIZERS,
    PARTITIONS,
    PRECISIONS,
    STAT_FREE,
    STAT_SENDING,
    TIME_CONSTANTS,
    TINYIMAGENET_SIZE,
    TINYIMAGENET_TEST,
    TINYIMAGENET_TRAIN,
)
from fednorm.config.toy import ToyConfig
from fednorm.config.validate import check_keys, checked_section, run_config, with_values

__all__ = [
    "AGGREGATORS",
    "ATTACKS",
    "ATTACK_STATS",
    "AUGMENTS",
    "BUDGET_KEYS",
    "BUNDLE_FREE",
    "CHECKPOINT_MINUTES",
    "CLIENT_MOMENTA",
    "CUDA_GRAPHS",
    "DATASETS",
    "DATASET_DOMAINS",
    "DATA_WORKERS",
    "DERIVED",
    "DIGITS5_SIZES",
    "FIELDS",
    "IMAGENET_TEST",
    "IMAGENET_TRAIN",
    "INT_MAX",
    "MNIST5K_IMAGES",
    "MNIST5K_SIZE",
    "MODELS",
    "MOMENTUM_CONVENTIONS",
    "NORMALIZERS",
    "PARTITIONS",
    "PRECISIONS",
    "SERVER_FREE",
    "STAT_FREE",
    "STAT_SENDING",
    "TIME_CONSTANTS",
    "TINYIMAGENET_SIZE",
    "TINYIMAGENET_TEST",
    "TINYIMAGENET_TRAIN",
    "_BUDGET_RULES",  # the tests read the rules themselves (tests/test_config_properties.py)
    "_RULES",
    "Boolean",
    "ConfigError",
    "Finite",
    "IntIn",
    "ListOf",
    "Nullable",
    "NumberIn",
    "OneOf",
    "Paths",
    "RunConfig",
    "ToyConfig",
    "bundle_key",
    "changed_fields",
    "check",
    "check_keys",
    "checked_section",
    "fail",
    "int_at_least",
    "number_in",
    "participants_per_round",
    "resolve_budget",
    "run_config",
    "train_size",
    "with_values",
]
