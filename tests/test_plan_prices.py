"""fednorm.plan.prices: a run at a measured shape is priced at the table's rate of its bundle
size, any other at an assumed rate that the price says is assumed."""

import dataclasses

import pytest

from fednorm.config import run_config
from fednorm.plan.prices import Rates, evaluations, load_rates, run_hours

CURVE = {1: 1_000.0, 16: 10_000.0}
RESNET20 = ("resnet20", 32, 16, 20, 5, 2)


def _rates():
    return Rates("GPU", "2.x", "12", "2026-01-01", "abc", {RESNET20: CURVE})


def _run(**keys):
    return run_config({"dataset": "cifar10", "model": "resnet20", "width": 16,
                       "image_size": 32, "n_clients": 5, "batch_size": 20, "local_steps": 2,
                       "steps": 1000, "eval_every": 500, "lr": [0.1], "lr_milestones": [],
                       **keys})


def test_a_measured_shape_is_priced_at_its_bundle_size_s_rate():
    cfg = _run()
    hours = run_hours(cfg, 4, _rates())
    rate = (1_000.0 * 10_000.0) ** 0.5  # log-log between (1, 1,000) and (16, 10,000), at 4
    assert hours.training == pytest.approx(cfg.training_images / rate / 3600, rel=1e-12)
    assert hours.assumed == 0.0
    # evaluation: 3 passes (0, 500, 1,000) over CIFAR-10's 10,000 test images, 3x as fast
    assert evaluations(cfg) == 3
    assert hours.evaluation == pytest.approx(3 * 10_000 / (3 * rate) / 3600, rel=1e-12)


def test_an_unmeasured_shape_is_assumed_and_another_side_scaled_by_pixels():
    other_batch = run_hours(_run(batch_size=128), 16, _rates())
    assert other_batch.assumed == other_batch.training > 0
    cfg = dataclasses.replace(_run(), image_size=64)  # ImageNet's way: no rows at its side
    bigger = run_hours(cfg, 16, _rates())
    assert bigger.assumed == bigger.training == pytest.approx(
        cfg.training_images / (10_000.0 / 4) / 3600, rel=1e-12)


def test_the_committed_table_is_the_h100_s_and_its_newest_date():
    rates = load_rates()
    assert rates.device == "NVIDIA H100 80GB HBM3" and rates.date == "2026-11-27"
    assert rates.curves[RESNET20] == {1: 1872, 4: 5363, 16: 17156, 64: 24756}
    assert dataclasses.replace(rates, curves={}).label.startswith("NVIDIA H100 80GB HBM3 (")
