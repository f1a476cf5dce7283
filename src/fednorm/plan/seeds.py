"""How full the bundles are, and what one more seed costs: from the configs alone.

The median run's bundle size of a model is the number R of runs in the bundle of its median
run (the runs ordered by their bundle's size; the lower median, so that it is a size some run
trains at). It says where on the engine's rate curve a plan trains: on an H100 a ResNet-20
bundle trains 1,872 images/s at R = 1, 5,363 at 4 and 17,156 at 16 (docs/speed.md).

One more seed: every setting (a run's config but its seed) gains the seed after its highest
(:func:`next_seed_runs`); the runs are bundled as the plan bundles them (:func:`~fednorm.plan.
jobs.bundles`, the same cap), so a new seed fills the room its settings' bundles have before it
opens new ones. Its price is the plan's training time with it minus without it, by what the
plan prices with (:func:`seed_price`):

- the cost model (fednorm.plan.costs): each run's steps x its shape's bundle seconds per step
  at its bundle's size R / R, in the committed table's machine's seconds; a shape the table
  lacks (every CIFAR-10 shape) is priced by its training images, which no bundle size changes;
- ``execution.images_per_second`` when the config gives it: GPU-hours of training images, each
  run at its bundle size's rate where the rate is a curve (bundle size -> images/s), else at
  the one rate.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from fednorm.config import RunConfig
from fednorm.plan.costs import run_costs
from fednorm.plan.jobs import bundles
from fednorm.plan.pipeline import Plan


def median_bundle_sizes(runs: Mapping[str, RunConfig],
                        packed: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    """Model -> the size of its median run's bundle (the lower median over the model's runs of
    their bundle's number of runs), for the models of ``runs`` in name order; ``packed``:
    bundle id -> member run ids, every run of ``runs`` in one."""
    size = {r: len(members) for members in packed.values() for r in members}
    by_model: dict[str, list[int]] = {}
    for run_id, cfg in runs.items():
        by_model.setdefault(cfg.model, []).append(size[run_id])
    return {model: statistics.median_low(sizes) for model, sizes in sorted(by_model.items())}


def next_seed_runs(runs: Mapping[str, RunConfig]) -> dict[str, RunConfig]:
    """Run id -> config of one more seed of every setting of ``runs``: the setting's highest
    seed plus one (a setting: the fields but ``seed``)."""
    highest: dict[RunConfig, int] = {}
    for cfg in runs.values():
        setting = dataclasses.replace(cfg, seed=0)
        highest[setting] = max(highest.get(setting, cfg.seed), cfg.seed)
    new = (dataclasses.replace(setting, seed=seed + 1) for setting, seed in highest.items())
    return {cfg.run_id: cfg for cfg in new}


@dataclass(frozen=True)
class SeedPrice:
    """The plan before and after one more seed of every setting (:func:`seed_price`)."""

    runs: tuple[int, int]  # distinct runs
    bundles: tuple[int, int]
    medians: tuple[dict[str, int], dict[str, int]]  # model -> its median run's bundle size
    seconds: tuple[float, float]  # training time by the cost model, its table's seconds
    gpu_hours: tuple[float, float] | None  # at execution.images_per_second; None: no rate


def seed_price(plan: Plan) -> SeedPrice:
    """The plan's training time without and with one more seed of every setting
    (:func:`next_seed_runs`), the new runs bundled with the plan's under its bundle cap; priced
    by the cost model (the step-cost table the plan balances its jobs with) and, when the
    config gives ``execution.images_per_second``, in GPU-hours (in bundles when it is a curve:
    :meth:`Plan.gpu_hours_in_bundles`; else :meth:`Plan.gpu_hours`)."""
    after = with_one_more_seed(plan)
    runs = after.runs
    return SeedPrice(runs=(len(plan.runs), len(runs)),
                     bundles=(len(plan.bundles), len(after.bundles)),
                     medians=(median_bundle_sizes(plan.runs, plan.bundles),
                              median_bundle_sizes(runs, after.bundles)),
                     seconds=(_seconds(plan), _seconds(after)),
                     gpu_hours=None if plan.execution.images_per_second is None
                     else (_gpu_hours(plan), _gpu_hours(after)))


def with_one_more_seed(plan: Plan) -> Plan:
    """The plan with one more seed of every setting (:func:`next_seed_runs`), bundled under
    its bundle cap."""
    runs = {**plan.runs, **next_seed_runs(plan.runs)}
    return dataclasses.replace(plan, runs=runs,
                               bundles=bundles(runs, plan.execution.planned_bundle_size))


def _seconds(plan: Plan) -> float:
    """The plan's training time by the cost model, its runs in their bundles."""
    return sum(run_costs(plan.runs, plan.bundles, plan.step_costs()).values())


def _gpu_hours(plan: Plan) -> float:
    """The plan's GPU-hours at execution.images_per_second: in its bundles for a curve."""
    execution = plan.execution
    if execution.by_bundle_size:
        return plan.gpu_hours_in_bundles(execution.rate, {})["all"]
    return plan.gpu_hours(execution.rate, {})["all"]
