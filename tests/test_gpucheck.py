"""make gpu-check's smoke run (fednorm.gpucheck --smoke on the CPU): every step is in the
report and its JSON with numbers, and a step that fails is recorded, traceback included,
without stopping the others."""

import json
from pathlib import Path

import pytest
import torch

from fednorm.gpucheck import main

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["environment", "cuda_tests", "peak_matmul", "throughput fbn_cnn",
         "throughput resnet20_E2", "throughput resnet20_E4", "throughput resnet18", "compile",
         "bundle_size_auto", "gpu_hours"]


@pytest.mark.slow
def test_the_smoke_check_records_every_step_and_a_failure_without_stopping(tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(ROOT)  # tests/fl/test_cuda.py and config/ are found from here
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["--device", "cpu", "--smoke", "--out", str(tmp_path), "--fail",
                     "bundle_size_auto"])
    finally:
        torch.set_num_threads(threads)
    assert code == 1  # a step failed
    report = json.loads((tmp_path / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == STEPS
    assert {n: s["status"] for n, s in steps.items()} == {
        **{n: "ok" for n in STEPS}, "bundle_size_auto": "failed"}
    failed = steps["bundle_size_auto"]
    assert "Traceback" in failed["error"] and "failed on purpose" in failed["error"]
    assert all(s["seconds"] > 0 for s in steps.values())
    # CUDA tests skipped on the CPU, each of them
    assert steps["cuda_tests"]["result"]["counts"]["skipped"] >= 20
    assert steps["peak_matmul"]["result"]["flops_per_s"] > 0
    for name in STEPS[3:7]:  # the engine beside the plain loop and the floor
        result = steps[name]["result"]
        assert result["plain_images_per_s"] > 0 and result["floor_images_per_s"] > 0
        assert result["engine"][0]["runs"] == 1
        assert all(r["images_per_s"] > 0 and r["vs_plain"] > 0 for r in result["engine"])
    compiled = steps["compile"]["result"]["rows"]
    assert {r["what"] for r in compiled} >= {"plain, eager", "plain, torch.compile"}
    assert any(r["images_per_s"] for r in compiled)
    hours = steps["gpu_hours"]["result"]["rows"]
    parts = {(r["config"].split()[0], r["part"]) for r in hours}
    assert {("config/hour.yaml", p) for p in ("fbn", "fixbn", "fedtan", "compare", "all")} <= parts
    assert all(r["gpu_hours_measured"] > 0 for r in hours)
    text = (tmp_path / "report.md").read_text()
    assert all(f"## {name}: " in text for name in STEPS)
    assert "failed on purpose" in text and "| engine |" in text
