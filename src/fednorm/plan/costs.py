"""What a run costs to train, from its config alone: the claims' second stage is priced by it
(fednorm.claims.stage2), so that its plan is a function of the configs and a committed table,
never of a clock.

The table (``step_costs.csv`` next to this module; another with ``stage2.step_costs``) holds
the seconds of one local step of a whole bundle, measured by benchmarks/step_costs.py on one
machine for each training shape

    (dataset, model, image_size, width, images, local, normalizer) at R runs a bundle

``images``: the images one step trains per run, batch_size x the m participants; ``local``:
``dsgd`` (E = 1) or ``fedavg`` (E > 1, timed at E = 5: a round's aggregation spread over its E
steps); ``normalizer``: each method its own row (their passes differ: FedTAN's union, Hybrid
BN's extra statistics, ...). A run of T steps in a bundle of R runs costs

    T x S(shape, R) / R                                                    (seconds)

with S(shape, R) the table's bundle seconds per step: at a measured R as measured; between two
measured sizes linear in R (a bundle step is a fixed cost plus a cost per run); above the
largest, that size's seconds per run times R. A shape the table does not hold is priced as
its training images at the table's median seconds per training image of a run (over its
rows): the project's other measure of cost (fednorm.plan.jobs.training_images), in the same
machine's seconds. Evaluation is not priced (it is a few percent of a run).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

from fednorm.config import ConfigError, RunConfig

TABLE = Path(__file__).with_name("step_costs.csv")
SHAPE = ("dataset", "model", "image_size", "width", "images", "local", "normalizer")
COLUMNS = (*SHAPE, "runs", "seconds")
FEDAVG_E = 5  # the E at which benchmarks/step_costs.py times the shapes of E > 1

Shape = tuple[str, str, int, int, int, str, str]


def shape_of(cfg: RunConfig) -> Shape:
    """The table's key of a run (the module's docstring)."""
    return (cfg.dataset, cfg.model, cfg.image_size, cfg.width,
            cfg.batch_size * cfg.participants, "dsgd" if cfg.local_steps == 1 else "fedavg",
            cfg.normalizer)


@dataclass(frozen=True)
class StepCosts:
    """The table: shape -> {R: bundle seconds per local step}."""

    rows: Mapping[Shape, Mapping[int, float]]

    @cached_property
    def per_image(self) -> float:
        """The median seconds per training image of one run over the table's rows: the price
        of a shape the table lacks."""
        return statistics.median(s / (shape[4] * runs) for shape, curve in self.rows.items()
                                 for runs, s in curve.items())

    def bundle_step(self, shape: Shape, runs: int) -> float:
        """S(shape, R): seconds of one local step of a bundle of ``runs`` runs."""
        curve = self.rows.get(shape)
        if curve is None:
            return self.per_image * shape[4] * runs
        sizes = sorted(curve)
        if runs >= sizes[-1]:
            return curve[sizes[-1]] * runs / sizes[-1]
        lo = max((r for r in sizes if r <= runs), default=sizes[0])
        hi = min(r for r in sizes if r >= runs)
        if lo == hi:
            return curve[lo]
        return curve[lo] + (curve[hi] - curve[lo]) * (runs - lo) / (hi - lo)

    def run_seconds(self, cfg: RunConfig, runs: int) -> float:
        """T x S(shape, R) / R: what the run costs in a bundle of ``runs`` runs."""
        return cfg.steps * self.bundle_step(shape_of(cfg), runs) / runs

    def covers(self, cfg: RunConfig) -> bool:
        return shape_of(cfg) in self.rows


def _row(row: Mapping[str, str], where: str) -> tuple[Shape, int, float]:
    try:
        shape = (row["dataset"], row["model"], int(row["image_size"]), int(row["width"]),
                 int(row["images"]), row["local"], row["normalizer"])
        runs, seconds = int(row["runs"]), float(row["seconds"])
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where} has row {dict(row)}; allowed: integers for image_size, "
                          "width, images and runs, a number for seconds") from err
    if shape[5] not in ("dsgd", "fedavg") or runs < 1 or not 0 < seconds < math.inf:
        raise ConfigError(f"{where} has row {dict(row)}; allowed: local dsgd or fedavg, runs "
                          ">= 1, seconds > 0")
    return shape, runs, seconds


@cache
def load_step_costs(path: str | None = None) -> StepCosts:
    """The table at ``path`` (None: the committed one, TABLE), each row checked; an error
    names the key stage2.step_costs, the file and what is allowed."""
    file = TABLE if path is None else Path(path)
    where = f"stage2: key 'step_costs' has value {str(file)!r}:"
    if not file.is_file():
        raise ConfigError(f"{where} no such file; allowed: a CSV of columns "
                          f"{', '.join(COLUMNS)} (benchmarks/step_costs.py writes it)")
    lines = [line for line in file.read_text().splitlines() if not line.startswith("#")]
    reader = csv.DictReader(lines)
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ConfigError(f"{where} columns {reader.fieldnames}; allowed: {', '.join(COLUMNS)}")
    rows: dict[Shape, dict[int, float]] = {}
    for row in reader:
        shape, runs, seconds = _row(row, f"{where} it")
        rows.setdefault(shape, {})[runs] = seconds
    if not rows:
        raise ConfigError(f"{where} no rows; allowed: at least one measured shape")
    return StepCosts(rows)


def run_costs(runs: Mapping[str, RunConfig], packed: Mapping[str, tuple[str, ...]],
              costs: StepCosts) -> dict[str, float]:
    """Run id -> its modelled seconds in its bundle of ``packed`` (:meth:`StepCosts.
    run_seconds`), in run id order: what balances the training jobs and prices the second
    stage."""
    sizes = {r: len(members) for members in packed.values() for r in members}
    return {r: costs.run_seconds(runs[r], sizes[r]) for r in sorted(sizes)}

