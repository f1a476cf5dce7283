"""make gpu-check's smoke run (fednorm.gpucheck --smoke on the CPU): every step is in the
report and its JSON with numbers, and a step that fails is recorded, traceback included,
without stopping the others."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from fednorm.gpucheck import main
from tests.fl.test_compile import TRACES

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["environment", "cuda_tests", "peak_matmul", "throughput fbn_cnn",
         "throughput resnet20_E1", "throughput resnet20_E2", "throughput resnet20_E4",
         "throughput resnet18", "compile", "bundle_size_auto", "gpu_hours", "launches"]


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
    for name in STEPS[3:8]:  # the engine beside the plain loop and the floor
        result = steps[name]["result"]
        assert result["plain_images_per_s"] > 0 and result["floor_images_per_s"] > 0
        assert result["engine"][0]["runs"] == 1
        assert all(r["images_per_s"] > 0 and r["vs_plain"] > 0 for r in result["engine"])
    # a local step profiled: the plain loop and the engine at the smallest and middle sizes
    launched = steps["launches"]["result"]["rows"]
    assert [(r["shape"], r["runs"]) for r in launched] == [
        ("fbn_cnn", 1), ("fbn_cnn", 1), ("fbn_cnn", 2),
        ("resnet20_E2", 1), ("resnet20_E2", 1), ("resnet20_E2", 2)]
    assert all(r["aten_ops"] > 0 and r["wall_ms"] > 0 for r in launched)
    compiled = steps["compile"]["result"]["rows"]
    assert {r["what"] for r in compiled} >= {"plain, eager", "plain, torch.compile"}
    assert any(r["images_per_s"] for r in compiled)
    # the engine's gradient step compiles (one graph: fullgraph) and trains under the check
    engine = [r for r in compiled if r["what"].startswith("engine")]
    assert len(engine) == 2 and engine[0]["images_per_s"]
    if TRACES:  # else its row records the error (torch 2.4.1: Dynamo's Unsupported)
        assert engine[1]["images_per_s"] and not engine[1]["error"]
    hours = steps["gpu_hours"]["result"]["rows"]
    parts = {(r["config"].split()[0], r["part"]) for r in hours}
    assert {("config/hour.yaml", p) for p in ("fbn", "fixbn", "fedtan", "compare", "all")} <= parts
    assert all(r["gpu_hours_measured"] > 0 for r in hours)
    text = (tmp_path / "report.md").read_text()
    assert all(f"## {name}: " in text for name in STEPS)
    assert "failed on purpose" in text and "| engine |" in text


def _report(path: Path, throughput: dict[str, list[tuple[int, float]]]) -> Path:
    """A report.json as the check writes it, with these (runs, images/s) engine rows a shape;
    the first report of the first lent GPU named no part (found from the shape's name)."""
    steps = [{"name": f"throughput {shape}", "status": "ok", "seconds": 1.0, "error": "",
              "result": {"engine": [{"runs": r, "images_per_s": v} for r, v in rows]}}
             for shape, rows in throughput.items()]
    path.write_text(json.dumps({"title": "t", "context": {}, "seconds": 1.0, "steps": steps}))
    return path


def test_a_check_prices_the_hour_from_earlier_reports_at_each_parts_slowest_shapes_best(
        tmp_path, monkeypatch):
    """--from-report: the rates of two leases together, each shape at its fastest bundle, each
    part at its slowest shape; --only runs no other step and counts none as failed."""
    from fednorm.plan import load_plan, merge

    monkeypatch.chdir(ROOT)
    first = _report(tmp_path / "a.json", {"fbn_cnn": [(1, 2000.0), (16, 9000.0)],
                                          "resnet20_E2": [(4, 1000.0), (64, 4000.0)],
                                          "resnet20_E100": [(4, 500.0)],
                                          "resnet18": [(4, 700.0)]})
    second = _report(tmp_path / "b.json", {"resnet20_E100": [(16, 2000.0), (64, 3000.0)],
                                           "resnet20_E1": [(64, 8000.0)]})
    out = tmp_path / "out"
    code = main(["--device", "cpu", "--only", "gpu_hours", "--out", str(out),
                 "--from-report", str(first), "--from-report", str(second)])
    assert code == 0
    steps = {s["name"]: s for s in json.loads((out / "report.json").read_text())["steps"]}
    assert {n for n, s in steps.items() if s["status"] == "ok"} == {"environment", "gpu_hours"}
    assert all(s["result"]["summary"] == "not requested (--only)"
               for n, s in steps.items() if n not in ("environment", "gpu_hours"))
    result = steps["gpu_hours"]["result"]
    want = {("cifar10", "fbn_cnn"): 9000.0, ("cifar10", "resnet20"): 3000.0,
            ("tinyimagenet", "resnet18"): 700.0}

    def rate(part):  # ImageNet at Tiny-ImageNet's rate scaled by pixels
        return want.get(part, 700.0 * 64**2 / 224**2)

    paper = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    hour = load_plan(merge(paper, yaml.safe_load((ROOT / "config/hour.yaml").read_text())))
    got = {r["part"]: r["gpu_hours_measured"] for r in result["rows"]
           if r["config"].startswith("config/hour.yaml")}
    assert got == pytest.approx(hour.gpu_hours(rate))
    # its curves, pasted into the paper scale's config, price it as it did (rates rounded)
    curves = yaml.safe_load(result["text"].split("\n\n", 1)[1])
    measured = {part: {int(r): v for r, v in curve.items()}  # JSON keys are strings
                for part, curve in result["images_per_second"].items()}
    assert curves == {"execution": {"images_per_second": measured}}
    # ResNet-20 a size, its slowest shape among those timed at that size or below: at 1 none
    # was (E = 2's 1,000 at 4 and E = 100's 500 a quarter each; E = 1's 8,000 at 64 a 64th),
    # at 4 E = 100's 500, at 16 E = 2's log-log midpoint of 1,000 and 4,000 and E = 100's
    # 2,000, at 64 E = 100's 3,000
    assert curves["execution"]["images_per_second"]["cifar10/resnet20"] == {
        1: 125, 4: 500, 16: 2000, 64: 3000}
    rated = load_plan(merge(paper, curves))
    paper_row = next(r for r in result["rows"]
                     if r["config"].startswith("config/config.yaml") and r["part"] == "all")
    assert rated.gpu_hours_in_bundles(rated.execution.rate)["all"] == pytest.approx(
        paper_row["gpu_hours_in_its_bundles"], rel=1e-3)
    sizes = {r["shape"]: r["best_runs"] for r in result["bundle_sizes"]}
    assert sizes == {"fbn_cnn": 16, "resnet20_E2": 64, "resnet20_E100": 64, "resnet20_E1": 64,
                     "resnet18": 4}


def test_a_check_refuses_bad_bundle_sizes_and_a_missing_report(tmp_path, capsys):
    for argv, words in ((["--sizes", "16,x"], "'16,x': bundle sizes are integers >= 1"),
                        (["--sizes", "0,4"], "'0,4': bundle sizes are integers >= 1"),
                        (["--from-report", str(tmp_path / "none.json")],
                         "none.json: no such file")):
        with pytest.raises(SystemExit):
            main(["--device", "cpu", "--out", str(tmp_path / "out"), *argv])
        assert words in capsys.readouterr().err


def test_a_bundles_rate_is_interpolated_between_measured_sizes_log_log():
    from fednorm.plan.jobs import rate_at

    curve = {1: 1000.0, 4: 4000.0, 16: 8000.0}
    assert rate_at(curve, 4) == 4000.0
    assert rate_at(curve, 2) == pytest.approx(2000.0)  # halfway in log R, rate x R
    assert rate_at(curve, 8) == pytest.approx(8000.0 / 2**0.5)  # sqrt(4000 * 8000)
    assert rate_at(curve, 64) == 8000.0  # above the largest: the largest's
    assert rate_at({16: 8000.0}, 4) == pytest.approx(2000.0)  # below: no run faster than at 16
