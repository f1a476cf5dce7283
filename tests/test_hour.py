"""The CIFAR-10 profile (config/hour.yaml, make cifar10): every paper part and the comparison on
CIFAR-10, priced by `fednorm plan` at the committed table of measured GPU rates
(src/fednorm/plan/gpu_rates.csv; checked here against the table read independently), the
README's figure equal to what the command prints, and its shapes train."""

import csv
import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch
import yaml
from dag import env_without_torch, snakemake

from fednorm.data.cifar import CACHE_NAME
from fednorm.plan import load_plan, merge
from fednorm.run import train_and_write

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src/fednorm/plan/gpu_rates.csv"


def _plan(*names):
    config = {}
    for name in names:
        config = merge(config, yaml.safe_load((ROOT / name).read_text()))
    return load_plan(config)


@pytest.fixture(scope="module")
def hour():
    return _plan("config/config.yaml", "config/hour.yaml")


def test_the_hour_plans_all_three_papers_and_the_comparison_on_cifar10(hour):
    paper = _plan("config/config.yaml")
    assert hour.execution.images_per_second is None  # priced from the measured table
    assert set(hour.paper_parts()) == {"fbn", "fixbn", "fedtan", "compare"}
    # every CIFAR-10 experiment of the paper scale is there (the claims' evidence), on CIFAR-10
    cifar = {n for n, ids in paper.experiments.items()
             if paper.runs[ids[0]].dataset == "cifar10"}
    assert set(hour.experiments) == cifar
    assert {c.dataset for c in hour.runs.values()} == {"cifar10"}
    # every figure with a CIFAR-10 part (FixBN's Fig 4 keeps that part alone)
    assert set(hour.figures) == {n for n, f in paper.figures.items() if set(f.experiments)
                                 & cifar}
    # the papers' models and methods, fewer seeds and steps
    assert {c.model for c in hour.runs.values()} == {"fbn_cnn", "resnet20"}
    assert {c.normalizer for c in hour.runs.values()} == {
        c.normalizer for c in paper.runs.values() if c.dataset == "cifar10"}
    assert hour.paths.results != paper.paths.results


def test_the_cifar10_profile_dry_runs_one_job_per_bundle_without_torch(hour, tmp_path):
    """The DAG's dry run imports no PyTorch (a login node without it)."""
    out = snakemake("--profile", "workflow/profiles/cifar10", "--dry-run", "--quiet", "rules",
                    env=env_without_torch(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    trains = {line.split()[0] for line in out.stdout.splitlines()
              if line.startswith("train_") and len(line.split()) == 2}
    assert len(trains) == len(hour.jobs) == len(hour.bundles)


def _tiny_cifar(root: Path) -> None:
    """The CIFAR-10 cache (fednorm.data.cifar) of 1,000 random training images (100 a class:
    enough for Dir(0.1) over 10 clients) and 20 test images, in the dataset's layout."""
    g = torch.Generator().manual_seed(0)
    torch.save({"train_x": torch.randint(0, 256, (1000, 3, 32, 32), dtype=torch.uint8,
                                         generator=g),
                "train_y": torch.arange(1000) % 10,
                "test_x": torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8,
                                        generator=g),
                "test_y": torch.arange(20) % 10}, root / CACHE_NAME)


@pytest.mark.parametrize("label", ["fbn-E1", "fixbn-E100", "fedtan-E5"])
def test_a_bundle_of_the_hour_trains_at_tiny_width_on_cifar_shaped_data(hour, label, tmp_path):
    """The hour's first bundle of FBN (CNN, DSGD), FixBN at E = 100 and FedTAN (ResNet-20,
    FedAvg), two of its runs at width 4 and batch 2 for one round, through the training job's
    entry point (fednorm.run.train_and_write) on a CIFAR-10 cache of 32x32 images."""
    _tiny_cifar(tmp_path)
    bundle = next(ids for b, ids in hour.bundles.items() if b.startswith(f"{label}-"))
    cfgs = [dataclasses.replace(hour.runs[r], width=4, hidden=8, batch_size=2,
                                steps=hour.runs[r].local_steps, eval_every=hour.runs[r].local_steps,
                                lr_milestones=()) for r in bundle[:2]]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        statuses = train_and_write(cfgs, [tmp_path / c.run_id for c in cfgs], data_dir=tmp_path,
                                device="cpu")
    finally:
        torch.set_num_threads(threads)
    assert statuses == ["ok", "ok"]
    for c in cfgs:
        assert (tmp_path / c.run_id / "metrics.csv").read_text().count("\n") == 3  # 0, end


def _measured_hours(plan) -> tuple[float, int]:
    """Training GPU-hours of the plan's runs whose shape the committed table holds, each at
    its bundle's size, from the CSV read here (the newest date's rows), interpolated log-log
    between measured sizes (below the smallest: its rate a run; above the largest: its rate);
    and how many runs that is."""
    rows = [r for r in csv.DictReader(x for x in TABLE.read_text().splitlines()
                                      if not x.startswith("#"))]
    curves: dict[tuple, dict[int, float]] = {}
    for r in rows:
        key = (r["model"], *(int(r[k]) for k in ("image_size", "width", "batch_size",
                                                  "participants", "local_steps")))
        curves.setdefault(key, {})[int(r["runs"])] = float(r["images_per_second"])

    def rate(curve, n):
        sizes = sorted(curve)
        if n <= sizes[0]:
            return curve[sizes[0]] * n / sizes[0]
        if n >= sizes[-1]:
            return curve[sizes[-1]]
        lo, hi = max(x for x in sizes if x <= n), min(x for x in sizes if x >= n)
        if lo == hi:
            return curve[lo]
        w = math.log(n / lo) / math.log(hi / lo)
        return curve[lo] ** (1 - w) * curve[hi] ** w

    size = {r: len(ids) for ids in plan.bundles.values() for r in ids}
    hours, count = 0.0, 0
    for r, c in plan.runs.items():
        key = (c.model, c.image_size, c.width, c.batch_size, c.participants, c.local_steps)
        if key in curves:
            hours += c.training_images / rate(curves[key], size[r]) / 3600
            count += 1
    return hours, count


def test_fednorm_plan_prices_the_hour_at_the_measured_table(capsys, monkeypatch, hour):
    """The price names the device its rates were measured on; its measured part (training
    hours not at assumed rates) is the table's rates at each run's bundle size; evaluation and
    the second stage are in the total; the README's figure is the printed total."""
    from fednorm.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["plan", "config/config.yaml", "config/hour.yaml"]) == 0
    out = capsys.readouterr().out
    head = next(x for x in out.splitlines() if x.startswith("GPU-hours on one"))
    assert "NVIDIA H100 80GB HBM3 (PyTorch 2.11.0+cu130, CUDA 13.0; measured 2026-11-27" in head
    training = re.search(r"all ([\d.]+) h, of which ([\d.]+) h at assumed rates", out)
    measured, runs = _measured_hours(hour)
    assert runs > len(hour.runs) / 2  # most of the hour's runs have a measured shape
    assert float(training[1]) - float(training[2]) == pytest.approx(measured, abs=0.02)
    evaluation = float(re.search(r"evaluation: ([\d.]+) h \(assumed", out)[1])
    stage2 = float(re.search(r"second stage: ([\d.]+) h \(the tuned methods' fresh seeds", out)[1])
    total = re.search(r"total: ([\d.]+) GPU-hours on one NVIDIA H100 80GB HBM3", out)[1]
    assert evaluation > 0 and stage2 > 0
    assert float(total) == pytest.approx(float(training[1]) + evaluation + stage2, abs=0.06)
    readme = (ROOT / "README.md").read_text()  # its cifar10-plan block (make docs-numbers)
    assert f", {total} GPU-hours on one NVIDIA H100 80GB HBM3 (`fednorm plan" in readme
    # the CPU cost table prices CPU jobs only: the hour's one more seed is priced on the GPU
    seed = next(x for x in out.splitlines() if x.startswith("one more seed"))
    assert "GPU-hours on one NVIDIA H100" in seed and "CPU" not in seed


def _hour_line(capsys, tmp_path, rates) -> tuple[str, float]:
    """fednorm plan's GPU-hours line for the CIFAR-10 profile with these
    execution.images_per_second, and its total."""
    from fednorm.cli import main

    extra = tmp_path / "rates.yaml"
    extra.write_text(yaml.safe_dump({"execution": {"images_per_second": rates}}))
    assert main(["plan", "config/config.yaml", "config/hour.yaml", str(extra)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("GPU-hours"))
    return line, float(line.rsplit("all ", 1)[1].split()[0])


def test_fednorm_plan_prices_each_part_at_its_own_rate(capsys, monkeypatch, tmp_path):
    """execution.images_per_second a dataset/model: each part's images at its rate."""
    monkeypatch.chdir(ROOT)
    rates = {"cifar10/fbn_cnn": 60_000, "cifar10/resnet20": 20_000}
    line, total = _hour_line(capsys, tmp_path, rates)
    assert line.startswith("GPU-hours at cifar10/fbn_cnn 60,000, cifar10/resnet20 20,000 "
                           "images/s (given, not measured")
    hour = _plan("config/config.yaml", "config/hour.yaml")
    want = hour.gpu_hours(lambda part: rates["/".join(part)])
    assert total == pytest.approx(want["all"], rel=1e-2)


def test_fednorm_plan_prices_each_bundle_at_its_size_given_curves(capsys, monkeypatch,
                                                                   tmp_path):
    """execution.images_per_second a curve (bundle size -> images/s, as make gpu-check writes
    it): each run at its bundle size's rate, e.g. 10 times as fast at 16 runs as at 1."""
    monkeypatch.chdir(ROOT)
    curves = {"cifar10/fbn_cnn": {1: 4_000, 16: 40_000}, "cifar10/resnet20": {1: 2_000,
                                                                             16: 20_000}}
    line, total = _hour_line(capsys, tmp_path, curves)
    assert line.startswith("GPU-hours at execution.images_per_second (given, not the "
                           "table's), each bundle at its size's rate")
    hour = _plan("config/config.yaml", "config/hour.yaml")
    size = {r: len(ids) for ids in hour.bundles.values() for r in ids}
    # at R <= 16 the log-log line through (1, a) and (16, 10a) is a * R**(log 10 / log 16);
    # above 16 (the hour's bundles hold up to 32 runs), 16's rate
    want = sum(c.training_images / (curves[f"{c.dataset}/{c.model}"][1]
                                    * min(size[r], 16) ** (math.log(10) / math.log(16)))
               for r, c in hour.runs.items()) / 3600
    assert total == pytest.approx(want, rel=1e-2)
