"""RunConfig: one frozen object per training run, and what is derived from it alone.

A :class:`RunConfig` is everything that decides a run's result (a run is a pure function of it);
paths, devices and thread counts are not part of it. Its id hashes the fields that differ from
their defaults (:func:`changed_fields`); :func:`fednorm.config.run_config` builds one from plain
values and checks it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from fednorm import methods


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
    # BN authors' FedFN baseline (no official FedFN code is public; docs/methods.md)
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


FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
_DEFAULT_IDENTITY = RunConfig().identity()
# Columns derived from a run's config (properties of RunConfig), usable like keys in figures.
DERIVED = ("scenario", "split", "regime", "setting", "method")
