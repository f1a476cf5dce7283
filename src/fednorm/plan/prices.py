"""What a plan costs on a GPU, from the committed table of measured rates (``gpu_rates.csv``
next to this module): training images/s of the engine's bundles, one row a shape and bundle
size, with the device, PyTorch, CUDA, the date and the commit they were measured at.

A run's training is priced at its bundle's size R (the plan's bundles): its training images
over the rate of its shape at R (:func:`fednorm.plan.jobs.rate_at`: log-log between measured
sizes, below the smallest that size's rate a run, above the largest the largest's). A shape
is (model, image_size, width, batch_size, participants, local_steps); a run whose shape the
table holds is priced at a **measured** rate, any other at an **assumed** one, and the price
says how many hours rest on assumptions:

- the same model, side and width at another batch or E: the nearest measured shape's rate
  (nearest in log E, then log images a step), unscaled;
- the same model at another side or width: its nearest measured side's rate times the ratio
  of pixels (ImageNet's 224² from Tiny-ImageNet's 64²);
- a model the table lacks: the slowest measured shape's rate, times the ratio of pixels.

Evaluation (assumed): each evaluation forwards the test set once (``n_test``, or the
dataset's test set) at the run's bundle rate times EVAL_SPEEDUP (a forward is about a third
of a training step's work). The claims' second stage (an estimate, before its runs are
chosen): the tuned methods' fresh seeds (each tuned setting once per stage-2 seed, in bundles
of their own); the tuning grids' extensions beyond an edge depend on the choices and are not
priced (each costs one more grid value on the tuning seeds).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from fednorm.config import ConfigError, RunConfig
from fednorm.plan.jobs import bundles, rate_at
from fednorm.plan.pipeline import Plan

TABLE = Path(__file__).with_name("gpu_rates.csv")
COLUMNS = ("device", "torch", "cuda", "date", "commit", "model", "image_size", "width",
           "batch_size", "participants", "local_steps", "runs", "images_per_second")
EVAL_SPEEDUP = 3.0  # test images/s over training images/s at one bundle size (assumed)
# The test set an evaluation forwards when a run's n_test is None (the dataset's own)
TEST_IMAGES = {"cifar10": 10_000, "tinyimagenet": 10_000, "imagenet": 50_000}

Shape = tuple[str, int, int, int, int, int]  # model, side, width, batch, participants, E


def shape_of(cfg: RunConfig) -> Shape:
    return (cfg.model, cfg.image_size, cfg.width, cfg.batch_size, cfg.participants,
            cfg.local_steps)


@dataclass(frozen=True)
class Rates:
    """The table's rows of one device at its newest date: shape -> {R: images/s}."""

    device: str
    torch: str
    cuda: str
    date: str
    commit: str
    curves: Mapping[Shape, Mapping[int, float]] = field(repr=False)

    def rate(self, cfg: RunConfig, runs: int) -> tuple[float, bool]:
        """(training images/s of ``cfg``'s shape in a bundle of ``runs``, measured?)."""
        shape = shape_of(cfg)
        if shape in self.curves:
            return rate_at(self.curves[shape], runs), True
        model, side = shape[0], shape[1]
        same = [s for s in self.curves if s[:3] == shape[:3]]
        if same:
            near = min(same, key=lambda s: (abs(math.log(s[5] / shape[5])),
                                            abs(math.log(s[3] * s[4] / (shape[3] * shape[4])))))
            return rate_at(self.curves[near], runs), False
        kin = [s for s in self.curves if s[0] == model]
        if kin:
            near = min(kin, key=lambda s: (abs(math.log(s[1] / side)), s))
        else:
            near = min(self.curves, key=lambda s: (max(self.curves[s].values()), s))
        return rate_at(self.curves[near], runs) * (near[1] / side) ** 2, False

    @property
    def label(self) -> str:
        return (f"{self.device} (PyTorch {self.torch}, CUDA {self.cuda}; measured {self.date} "
                f"at {self.commit})")


def _row(row: Mapping[str, str], where: str) -> tuple[Shape, int, float]:
    try:
        shape = (row["model"], *(int(row[k]) for k in COLUMNS[6:11]))
        runs, rate = int(row["runs"]), float(row["images_per_second"])
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where} has row {dict(row)}; allowed: integers for image_size, "
                          "width, batch_size, participants, local_steps and runs, a number "
                          "for images_per_second") from err
    if runs < 1 or not 0 < rate < math.inf:
        raise ConfigError(f"{where} has row {dict(row)}; allowed: runs >= 1, images/s > 0")
    return shape, runs, rate  # type: ignore[return-value]


@cache
def load_rates(path: str | None = None, device: str | None = None) -> Rates:
    """The table at ``path`` (None: the committed TABLE): the rows of ``device`` (None: the
    device of the newest row) at that device's newest date."""
    file = TABLE if path is None else Path(path)
    where = f"GPU rates {file}:"
    lines = [x for x in file.read_text().splitlines() if x and not x.startswith("#")]
    reader = csv.DictReader(lines)
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ConfigError(f"{where} columns {reader.fieldnames}; allowed: {', '.join(COLUMNS)}")
    rows = list(reader)
    if device is None and rows:
        device = max(rows, key=lambda r: r["date"])["device"]
    rows = [r for r in rows if r["device"] == device]
    if not rows:
        raise ConfigError(f"{where} no rows of device {device!r}")
    newest = max(r["date"] for r in rows)
    rows = [r for r in rows if r["date"] == newest]
    curves: dict[Shape, dict[int, float]] = {}
    for row in rows:
        shape, runs, rate = _row(row, where)
        curves.setdefault(shape, {})[runs] = rate
    first = rows[0]
    return Rates(device, first["torch"], first["cuda"], newest, first["commit"], curves)


@dataclass(frozen=True)
class Hours:
    """GPU-hours of a set of runs: training (and how much of it at assumed rates) and
    evaluation (assumed throughout)."""

    training: float = 0.0
    assumed: float = 0.0
    evaluation: float = 0.0

    def __add__(self, other: Hours) -> Hours:
        return Hours(self.training + other.training, self.assumed + other.assumed,
                     self.evaluation + other.evaluation)

    @property
    def total(self) -> float:
        return self.training + self.evaluation


def eval_images(cfg: RunConfig) -> int:
    """The images one evaluation forwards: its test set (every domain's for Digits-Five)."""
    n = cfg.n_test if cfg.n_test is not None else TEST_IMAGES.get(cfg.dataset, 10_000)
    return n * max(1, len(cfg.domains)) if cfg.dataset == "digits5" else n


def evaluations(cfg: RunConfig) -> int:
    """Evaluations of a run: at step 0, every ``eval_every`` steps, and at the end."""
    return cfg.steps // cfg.eval_every + 1 + (cfg.steps % cfg.eval_every != 0)


def run_hours(cfg: RunConfig, runs: int, rates: Rates) -> Hours:
    """One run in a bundle of ``runs`` runs."""
    rate, measured = rates.rate(cfg, runs)
    train = cfg.training_images / rate / 3600
    evaluate = evaluations(cfg) * eval_images(cfg) / (rate * EVAL_SPEEDUP) / 3600
    return Hours(train, 0.0 if measured else train, evaluate)


def hours_of(runs: Mapping[str, RunConfig], packed: Mapping[str, tuple[str, ...]],
             rates: Rates, ids: Iterable[str] | None = None) -> Hours:
    """The runs ``ids`` (None: all of ``runs``), each in its bundle of ``packed``."""
    size = {r: len(members) for members in packed.values() for r in members}
    total = Hours()
    for r in dict.fromkeys(runs if ids is None else ids):
        total = total + run_hours(runs[r], size[r], rates)
    return total


def fresh_runs(plan: Plan) -> dict[str, RunConfig]:
    """The second stage's fresh seeds of the tuned methods, before their values are chosen:
    each tuned setting (a run of a ``tuning`` figure, its seed and tuned keys aside: its first
    grid point stands for the chosen one) once per stage-2 seed."""
    if plan.stage2 is None:
        return {}
    tuned = {r for f in plan.figures.values() if f.kind == "tuning"
             for name in f.experiments for r in plan.experiments[name]}
    settings: dict[tuple, RunConfig] = {}
    for r in sorted(tuned):
        cfg = plan.runs[r]
        settings.setdefault((cfg.setting, cfg.method, shape_of(cfg), cfg.steps), cfg)
    new = (dataclasses.replace(cfg, seed=seed) for cfg in settings.values()
           for seed in plan.stage2.seeds)
    return {cfg.run_id: cfg for cfg in new}


@dataclass(frozen=True)
class Price:
    """A plan's GPU-hours on one device (:func:`plan_price`)."""

    rates: Rates
    parts: Mapping[str, Hours]  # each paper part's (a run two parts draw in both) and 'all'
    fresh: Hours  # the second stage's fresh seeds of the tuned methods (estimated)

    @property
    def stage2(self) -> float:
        """The second stage before its rechecks: the tuned methods' fresh seeds."""
        return self.fresh.total

    @property
    def total(self) -> float:
        return self.parts["all"].total + self.stage2


def plan_price(plan: Plan, rates: Rates | None = None) -> Price:
    """The plan's GPU-hours at ``rates`` (None: the committed table's newest device)."""
    rates = load_rates() if rates is None else rates
    parts = {**plan.paper_parts(), "all": tuple(plan.runs)}
    priced = {name: hours_of(plan.runs, plan.bundles, rates, ids)
              for name, ids in parts.items()}
    fresh = fresh_runs(plan)
    fresh_hours = hours_of(fresh, bundles(fresh, plan.execution.planned_bundle_size), rates)
    return Price(rates, priced, fresh_hours)
