"""One record per method: what it is, its flags, its own keys and checks, how it is drawn.

A method (a ``normalizer`` value) is one :class:`Method` here, plus its layer or rule in
fednorm.norms (its record's ``module``, or norms' table for a method of one line) and its
test: nothing else names it.
The configuration derives its lists of names, its method keys and their checks from these
records (fednorm.config); norms builds the engine's view of a method (fednorm.norms.Normalizer)
from the record's flags and the run's keys; the engine, the training loop and the plots read
flags, never a name; the claims ledgers read ``paper``.

The flags answer what the engine and the configuration must know of a method:

- ``sends``: its clients send BN statistics that the server aggregates (the target of the
  attacks on statistics and of robust aggregation, FBN paper §5).
- ``statistics``: it has BN running statistics at all (False: per-sample normalization or
  none; the server sees parameters only).
- ``union``: it normalizes over the union of every client's batch in one fused pass (all
  clients take part in every step; no partial participation).
- ``personal``: the BN parts each client keeps to itself between rounds, never averaged
  ("stats", "affine": fednorm.norms.parts), kept for every client across rounds, also under
  partial participation; a method with a module states its parts there instead (Hybrid BN's
  own d, by its key; FedAP's), never both.
- ``in_memory``: it needs the training images in memory, for a forward apart from training
  (HeteroFL's statistics pass before each test, Hybrid BN's round-start statistics, FedAP's
  pretraining and measurement before round 0): not with a dataset streamed from disk.
- ``clientwise``: the layers take client-stacked weights (one forward over all clients).
- ``offset``: its layer after each convolution has a learnable per-channel offset (beta: BN's,
  GN's, LN's, IN's bias). False (no normalization: ``none``; FedWon's scaled WS convs, nothing
  after them): the models give those convolutions a bias instead (fednorm.models.build_model,
  through ``Normalizer.conv_bias``), so that every network has a per-channel offset there.

Own keys (:class:`Key`) are RunConfig fields that only their method reads: any allowed value
with it, the default with every other method (an error naming the key otherwise). A key given
per round for a paper's budget (``per_round_of``) is scaled with the budget when the run asks
for it (``time_constants: scaled``; :func:`per_round`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fednorm.checks import (
    Check,
    IntIn,
    Nullable,
    NumberIn,
    OneOf,
    fail,
)

# A run configuration (fednorm.config.RunConfig, which imports this module), and its place.
Cfg = Any
Where = str


@dataclass(frozen=True)
class Key:
    """A RunConfig field that belongs to one method."""

    name: str
    default: Any
    rule: Check
    type: str  # its annotation in RunConfig
    doc: str
    # a per-round constant given for this many rounds (its paper's): with ``time_constants:
    # scaled`` it moves the same fraction by the end of a run of any length (:func:`per_round`)
    per_round_of: int | None = None


@dataclass(frozen=True)
class Tune:
    """A key that a method's paper or official code tunes (or states per setting): a tuning
    experiment (``tune: true``, fednorm.plan.experiments) sweeps ``grid`` jointly with the
    learning rate, and the claims judge the method at the values chosen on held-out data
    (fednorm.tuning). ``symbol``: how the chosen value is written (``λ 0.16``)."""

    key: str
    symbol: str
    grid: tuple[Any, ...]


@dataclass(frozen=True)
class Look:
    """How a method is drawn in every figure."""

    label: str
    colour: str
    marker: str
    dash: str | tuple = "-"


@dataclass(frozen=True)
class Method:
    """One normalizer: its flags (module docstring), own keys, own checks and look."""

    name: str
    look: Look
    sends: bool = False
    statistics: bool = True
    union: bool = False
    personal: tuple[str, ...] = ()
    in_memory: bool = False
    clientwise: bool = False
    offset: bool = True
    # the fednorm.norms module whose ``layers(cfg)`` gives its layer, rule, parts and hooks;
    # None: fednorm.norms's own table (the methods of one line)
    module: str | None = None
    keys: tuple[Key, ...] = ()
    # the keys its paper or official code tunes per setting (beyond the learning rate)
    tunes: tuple[Tune, ...] = ()
    # the keys of its official code's recipe that differ from the common one (an experiment
    # with ``recipes: own`` runs the method at them: fednorm.plan.experiments)
    recipe: tuple[tuple[str, Any], ...] = ()
    # rules of its own that tie keys together: (cfg, where) -> None, or a ConfigError
    checks: Callable[[Cfg, Where], None] | None = None
    models: tuple[str, ...] | None = None  # the models it can be built in; None: every one
    paper: str | None = None  # the paper that proposed it, when the claims cite it
    # raised when what a method computes at its default keys changes: its runs' ids change
    # with it (fednorm.config.RunConfig.run_id), so no result of the old method is reused
    revision: int = 0

    @property
    def per_round_keys(self) -> tuple[str, ...]:
        """Its keys given per round for a paper's budget (scaled by ``time_constants``)."""
        return tuple(k.name for k in self.keys if k.per_round_of is not None)



# ---------------------------------------------------------------------------------------------
# Own checks


def _one_step(cfg: Cfg, where: Where) -> None:
    if cfg.local_steps != 1:
        raise fail(where, "local_steps", cfg.local_steps,
                   f"1 with normalizer '{cfg.normalizer}' (it normalizes over all clients at "
                   f"every step)")


def _groups_divide_width(cfg: Cfg, where: Where) -> None:
    # every normalized width (fbn_cnn: w, 2w; resnet20: w, 2w, 4w; lenet: w, w, 2w;
    # digits_cnn: w, w, 2w, then its hidden 32w, 8w) is a multiple of `width`
    if cfg.width % cfg.gn_groups:
        raise fail(where, "gn_groups", cfg.gn_groups,
                   f"a divisor of every normalized width (of width = {cfg.width})")


def _first_batch_in_full(cfg: Cfg, where: Where) -> None:
    if cfg.fbn_init == "first_batch" and cfg.participation < 1:
        raise fail(where, "fbn_init", cfg.fbn_init,
                   f"'zero_one' with participation {cfg.participation!r} < 1 (the "
                   f"first-batch calibration takes every client's batch)")


def _no_feature_norm(cfg: Cfg, where: Where) -> None:
    if cfg.feature_norm:
        raise fail(where, "feature_norm", True, f"false with normalizer '{cfg.normalizer}' "
                   f"(FixupResNet20 has no feature normalization)")


def _spatial_maps(cfg: Cfg, where: Where) -> None:
    # digits_cnn normalizes its hidden linear features as (N, C, 1, 1) maps: InstanceNorm
    # over a 1x1 map subtracts each value from itself, so its output is beta whatever the input
    if cfg.model in VECTOR_NORMS:
        raise fail(where, "model", cfg.model,
                   f"a model whose every normalization sees an HxW map with normalizer "
                   f"'{cfg.normalizer}' (per-sample, per-channel statistics of {cfg.model}'s "
                   f"hidden 1x1 features are the value itself: a constant output)")


# The models whose convolutions the project builds itself (torchvision's resnet18 builds plain
# nn.Conv2d and single-client layers: no WSConv2d, ScaledWSConv2d or client-stacked weights)
OWN_CONVS = ("fbn_cnn", "resnet20", "lenet", "digits_cnn")
# The models that normalize (N, C) features too, as (N, C, 1, 1) maps (FedBN's digits network)
VECTOR_NORMS = ("digits_cnn",)

# ---------------------------------------------------------------------------------------------
# The records, in the order figures list them

_FBN = "FBN: Guerraoui et al., arXiv 2405.14670"

METHODS: tuple[Method, ...] = (
    Method("central", Look("Centralized BN", "#222222", "s", ":"), union=True,
           checks=_one_step),
    Method("bn", Look("Naive BN", "#d62728", "v", "--"), sends=True),
    Method("fbn", Look("FBN", "#1f77b4", "o", "-"), sends=True, paper=_FBN,
           keys=(Key("fbn_init", "zero_one", OneOf(("zero_one", "first_batch")), "str",
                     "shared statistics start at mean 0, var 1 (Algorithm 3, line 1); "
                     "first_batch: those of one union batch of all clients"),),
           checks=_first_batch_in_full),
    Method("fixbn", Look("FixBN", "#2ca02c", "^", "-."), sends=True,
           paper="FixBN: Zhong, Chen, Chao, arXiv 2303.06530",
           keys=(Key("fixbn_freeze", 0.5, NumberIn(0, 1), "float",
                     "FixBN's T*: fraction of the training steps before freezing"),
                 # the FixBN paper, Appendix B, Table H: the BN statistics (mu, sigma; the
                 # paper's FixBN), the BN affine parameters (gamma, beta) while the statistics
                 # go on as naive BN, or both
                 Key("fixbn_fix", "stats", OneOf(("stats", "affine", "both")), "str",
                     "what FixBN fixes from T*: stats (mu, sigma), affine, both"))),
    Method("gn", Look("GroupNorm", "#9467bd", "D", (0, (1, 1))), statistics=False,
           checks=_groups_divide_width),
    Method("gn_ws", Look("GN + WS", "#6a3d9a", "P", (0, (3, 1, 1, 1))), statistics=False,
           checks=_groups_divide_width, models=OWN_CONVS),
    Method("ln", Look("LayerNorm", "#c51b7d", "<", (0, (5, 2))), statistics=False),
    Method("in", Look("InstanceNorm", "#6b8e23", ">", (0, (2, 2))), statistics=False,
           checks=_spatial_maps),
    # Fixup initializes residual branches: the other models have none (its blocks' scalar
    # biases are its offsets: FixupResNet20 reads no ``offset``)
    Method("fixup", Look("Fixup", "#00688b", "X", (0, (4, 1, 1, 1, 1, 1))), statistics=False,
           models=("resnet20",), checks=_no_feature_norm),
    Method("fedtan", Look("FedTAN", "#b8860b", "*", (0, (6, 2, 1, 2))), union=True,
           clientwise=True, models=OWN_CONVS, module="fednorm.norms.fedtan",
           paper="FedTAN: Wang, Shi, Chang, arXiv 2301.02982",
           # the union statistics in every local step (the paper's description) or in the
           # first of each round only, the other steps naive BN (the authors' code)
           keys=(Key("fedtan_union", "every_step", OneOf(("every_step", "first_step")), "str",
                     "FedTAN's union statistics in every local step, or the first of a round"),),
           # 1: under first_step, SGD restarts after the union step (the authors' code)
           revision=1),
    Method("fedbn", Look("FedBN", "#e377c2", "h", (0, (1, 2))), personal=("stats", "affine"),
           paper="FedBN: Li, Jiang, Zhang, Kamp, Dou, ICLR 2021, arXiv 2102.07623"),
    Method("silobn", Look("SiloBN", "#8c564b", "p", (0, (3, 2))), personal=("stats",)),
    Method("heterofl_sbn", Look("HeteroFL (static BN)", "#17becf", "d", (0, (2, 1, 2, 3))),
           in_memory=True, module="fednorm.norms.heterofl"),
    # docs/methods.md, its table of details against the authors' code
    Method("hybridbn", Look("Hybrid BN", "#e6550d", "8", (0, (4, 2, 1, 2))), in_memory=True,
           revision=1, module="fednorm.norms.hybridbn",
           paper="Hybrid BN: Chen, Xu, Wu, Kittler, ICML 2025, arXiv 2505.21877",
           keys=(Key("hybridbn_stats_images", 64, IntIn(2), "int",
                     "images per client in the round-start forward of the global model whose "
                     "statistics it reports (the authors' code: one batch of 64)"),
                 Key("hybridbn_report", "mixed", OneOf(("mixed", "batch")), "str",
                     "mixed: (1 - a) global + a batch (the code); batch: its own"),
                 Key("hybridbn_momentum", 0.002, NumberIn(0, 1, low_open=True), "float",
                     "the server's smoothing of G a round (the code's avg_momentum), given "
                     "for the paper's 500 rounds", per_round_of=500),
                 # fresh: each test recomputes G from the current global model, unsmoothed
                 # (the code); global: tests with the smoothed G the clients trained with
                 Key("hybridbn_eval", "fresh", OneOf(("fresh", "global")), "str",
                     "the statistics a test normalizes with"),
                 # client: each client keeps its own d, starting from the server's average on
                 # its first round (the code's buffer_w); shared: one d, averaged like a weight
                 Key("hybridbn_mixing", "client", OneOf(("client", "shared")), "str",
                     "whose mixing weight d a client normalizes with")),
           # the smoothing decides how far G moves from its start at (0, 1) within a budget
           # (docs/methods.md, Hybrid BN re-measured): 1 is G unsmoothed, each round's own
           tunes=(Tune("hybridbn_momentum", "G smoothing", (0.002, 0.01, 0.05, 1.0)),),
           # its code (Hongyao-Chen/HybridBN at 1c0e151): parameters averaged by the clients'
           # data sizes, every gradient clipped at norm 10 (its benchmark does so for every
           # method; here Hybrid BN's own recipe, the common recipe for the others)
           recipe=(("weighted_average", True), ("clip_norm", 10.0))),
    Method("fedwon", Look("FedWon", "#006d2c", "H", (0, (6, 1))), statistics=False,
           models=OWN_CONVS, module="fednorm.norms.fedwon",
           paper="FedWon: Zhuang, Lyu, ICLR 2024, arXiv 2306.05879",
           # Brock et al. (2021), "High-Performance Large-Scale Image Recognition Without
           # Normalization", §4.1: 0.01 is their choice for their large batches (4096);
           # FedWon's text states no value that we could read
           keys=(Key("agc_lambda", 0.01, Nullable(NumberIn(0, math.inf, low_open=True)),
                     "float | None", "adaptive gradient clipping's lambda; null: no clipping"),
                 # a vector (bias, gain) is one unit in Brock et al.'s code, nfnets-pytorch and
                 # timm (FedWon's code is not public); element: each entry its own unit
                 Key("agc_unit", "vector", OneOf(("vector", "element")), "str",
                     "the unit of adaptive clipping for a vector parameter"),
                 # relu: the NF-ResNet gamma sqrt(2 / (1 - 1/pi)) folded into every conv;
                 # none: 1, nfnets-pytorch's WSConv2d (FedWon's text names neither)
                 Key("fedwon_ws_gain", "relu", OneOf(("relu", "none")), "str",
                     "the fixed factor of each scaled weight-standardized conv")),
           # NFNets' 0.01 was chosen for batches of 4,096 (Brock et al. 2021, §4.1, Fig 3: the
           # best lambda grows as the batch shrinks); FedWon tunes it per setting. null: none
           tunes=(Tune("agc_lambda", "λ", (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28,
                                            None)),),
           # 2: LeNet's and ResNet-20's convs carry a bias (``offset``)
           offset=False, revision=2),
    # its official code: microsoft/PersonalizedFL, alg/fedap.py and alg/core/comm.py
    Method("fedap", Look("FedAP", "#7b4173", "+", (0, (5, 1, 1, 1))), module="fednorm.norms.fedap",
           paper="FedAP: Lu, Wang, Chen, Qin, Xu, Dimitriadis, Qin, IEEE TBD 2022, "
                 "arXiv 2112.00734",
           keys=(Key("self_weight", 0.5, NumberIn(0, 1), "float",
                     "FedAP's self-weight lambda, the diagonal of its mixing matrix (the code's "
                     "model_momentum)"),
                 Key("pretrain_passes", 150, IntIn(1), "int",
                     "FedAP's passes of plain SGD over its pretraining images (the code's "
                     "pretrained_iters)")),
           # the paper tunes it (its Fig. 6 sweeps lambda); the code's default 0.5
           tunes=(Tune("self_weight", "λ", (0.1, 0.3, 0.5, 0.7, 0.9)),), in_memory=True),
    # revision 1: LeNet's and ResNet-20's convs carry a bias (``offset``)
    Method("none", Look("No normalization", "#525252", "x", (0, (1, 3))), statistics=False,
           offset=False, revision=1),
)
BY_NAME = {m.name: m for m in METHODS}
NAMES = tuple(BY_NAME)
KEYS: tuple[Key, ...] = tuple(k for m in METHODS for k in m.keys)
OWNER = {k.name: m for m in METHODS for k in m.keys}
KEY = {k.name: k for k in KEYS}

# How the variants of a method that are not normalizers are drawn: FedFN (Kim et al. 2023,
# ``feature_norm``) on top of one (fednorm.config.RunConfig.method)
VARIANT_LOOKS = {
    "none+fn": Look("FedFN", "#8c6d31", "1", (0, (3, 3))),
    "bn+fn": Look("BN + FedFN", "#d6616b", "2", (0, (2, 3))),
}


# FedFN's own key (a RunConfig field: FedFN is a variant of any normalizer): its feature's
# scale, unit (its paper's name) or sqrt(D) (the Hybrid BN authors' FedFN baseline)
FEATURE_NORM_TUNES = (Tune("feature_norm_scale", "scale", ("unit", "sqrt_dim")),)
RATE = "lr_scale"  # the learning rate's factor: tuned for every method
# Every key a tuning chooses: the rate, then each method's own (the choice's columns)
TUNED_KEYS: tuple[str, ...] = (RATE, *dict.fromkeys(
    t.key for t in (*(t for m in METHODS for t in m.tunes), *FEATURE_NORM_TUNES)))
SYMBOLS = {RATE: "lr ×", **{t.key: t.symbol for m in METHODS for t in m.tunes},
           **{t.key: t.symbol for t in FEATURE_NORM_TUNES}}


def method(name: str) -> Method:
    return BY_NAME[name]


def tunes_of(normalizer: str, feature_norm: bool = False) -> tuple[Tune, ...]:
    """The keys a run of this method tunes beyond the rate: its record's, and FedFN's scale
    when the feature is normalized."""
    return method(normalizer).tunes + (FEATURE_NORM_TUNES if feature_norm else ())


def own_keys(after: str) -> Callable[[type], type]:
    """A class decorator that adds every method's own keys to a dataclass-to-be (RunConfig)
    after its field ``after``, each with its annotation and default, in the records' order."""

    def add(cls: type) -> type:
        annotations: dict[str, Any] = {}
        for name, kind in cls.__annotations__.items():
            annotations[name] = kind
            if name == after:
                for key in KEYS:
                    annotations[key.name] = key.type
                    setattr(cls, key.name, key.default)
        cls.__annotations__ = annotations
        return cls

    return add


def key_rules() -> Iterator[tuple[str, Check]]:
    """Each method key and its rule."""
    return ((k.name, k.rule) for k in KEYS)


def check_method(cfg: Cfg, where: Where) -> None:
    """The rules of ``cfg``'s method: its own keys' defaults with every other method, the
    models it can be built in, the images it needs in memory, its own checks."""
    own = method(cfg.normalizer)
    for key in KEYS:
        value = getattr(cfg, key.name)
        if OWNER[key.name] is not own and value != key.default:
            owner = OWNER[key.name].name
            raise fail(where, key.name, value,
                       f"{key.default!r} (the default) with normalizer '{cfg.normalizer}'; "
                       f"{key.rule(object()) or 'other values'} with normalizer '{owner}' "
                       f"only")
    if own.models is not None and cfg.model not in own.models:
        raise fail(where, "model", cfg.model,
                   f"one of {list(own.models)} with normalizer '{own.name}' (fednorm.methods:"
                   f" its layers need convolutions or blocks the others do not build)")
    if own.in_memory and cfg.dataset == "imagenet":
        raise fail(where, "normalizer", cfg.normalizer,
                   f"not '{own.name}' with dataset 'imagenet' (its statistics come from a "
                   f"forward over training images in memory; ImageNet-1K is streamed)")
    if own.union and cfg.participation < 1:
        raise fail(where, "participation", cfg.participation,
                   f"1.0 with normalizer '{own.name}' (it normalizes over the union of all "
                   f"clients' batches in one fused pass)")
    if own.checks is not None:
        own.checks(cfg, where)


def per_round(cfg: Cfg, key: str) -> float:
    """The value of a per-round constant ``key`` for this run: as given, or with
    ``time_constants: scaled`` and fewer rounds R than the paper's P (``Key.per_round_of``),
    the constant m' with which the run's R rounds move a quantity the fraction that the
    paper's P rounds move it at m: 1 - (1 - m')^R = 1 - (1 - m)^P, so m' = 1 - (1 - m)^(P / R)
    (as a learning-rate schedule's milestones are fractions of the budget). A run of P rounds
    or more keeps m: over more rounds the paper's constant tracks its target as it did there,
    and a smaller one would leave G nearer its start at the end."""
    value = float(getattr(cfg, key))
    paper_rounds = KEY[key].per_round_of
    rounds = cfg.steps // cfg.local_steps
    if cfg.time_constants != "scaled" or paper_rounds is None or rounds >= paper_rounds:
        return value
    return 1.0 - (1.0 - value) ** (paper_rounds / rounds)


def papers() -> dict[str, str]:
    """Each method that a claims paper proposed -> the paper, as the ledgers cite it."""
    return {m.name: m.paper for m in METHODS if m.paper is not None}
