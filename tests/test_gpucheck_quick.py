"""make gpu-quick's smoke mode on the CPU (fednorm.gpucheck.quick --smoke), end to end in a copy
of the repository: the wheelhouse step (here without a wheelhouse: the installed Snakemake),
images/s with and without the graph and under each precision, concurrent jobs, and the DAG
through the gpu-quick profile, whose report counts what its run.json files, its words ledger
and its calibration say; and config/gpu_quick.yaml puts every quick experiment but the tuning grids
at 8 seeds."""

import importlib.metadata
import json

import pandas as pd
import pytest
import torch
import yaml
from dag import ROOT, work_copy

from fednorm.claims import CALIBRATION_NAME, WORDS_NAME
from fednorm.gpucheck import quick
from fednorm.plan import load_plan, merge, merged_config

STEPS = ["environment", "wheelhouse", "throughput", "jobs_per_gpu", "quick_dag"]


@pytest.mark.slow
@pytest.mark.xdist_group("tiny_dag")
def test_the_smoke_check_runs_every_step_and_the_dag_and_reports_what_it_wrote(
        tmp_path, monkeypatch):
    work = work_copy(tmp_path)
    monkeypatch.chdir(work)
    out, summary_path = tmp_path / "out", tmp_path / "gpu" / "gpu_quick.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = quick.main(["--smoke", "--device", "cpu", "--out", str(out), "--summary",
                           str(summary_path), "--wheelhouse", str(tmp_path / "no-wheelhouse")])
    finally:
        torch.set_num_threads(threads)
    report = json.loads((out / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == STEPS
    assert {n: s["status"] for n, s in steps.items()} == dict.fromkeys(STEPS, "ok"), \
        [s["error"] for s in steps.values() if s["error"]]
    assert code == 0

    # no wheelhouse: the Snakemake and mlxtend installed here, at their versions
    assert steps["wheelhouse"]["result"]["versions"] == {
        name: importlib.metadata.version(name) for name in ("snakemake", "mlxtend")}

    # each bundle size eager and with the graph (on the CPU the graph's path runs eagerly),
    # and the middle size under tf32 and bf16
    rows = steps["throughput"]["result"]["rows"]
    assert [(r["runs"], r["cuda_graph"], r["precision"]) for r in rows] == [
        *((runs, graph, "float32") for runs in quick.SMOKE.sizes for graph in ("off", "auto")),
        (quick.SMOKE.precision_runs, "off", "tf32"), (quick.SMOKE.precision_runs, "off", "bf16")]
    for row in rows:
        assert row["images_per_s"] > 0, row

    # J processes at once, each its own rate; the total is their sum
    jobs = steps["jobs_per_gpu"]["result"]["rows"]
    assert [r["jobs"] for r in jobs] == list(quick.SMOKE.jobs)
    for row in jobs:
        assert len(row["per_job"]) == row["jobs"] and min(row["per_job"]) > 0
        assert row["images_per_s"] == pytest.approx(sum(row["per_job"]), abs=row["jobs"])

    # the DAG: .test/config.yaml's fbn_gamma (bn, fbn x 3 heterogeneities) and fbn_dirichlet
    # (fbn, diverging on purpose) at 2 seeds: 14 runs, every one written on the CPU in float32
    dag = steps["quick_dag"]["result"]
    plan = load_plan(merged_config(["config/config.yaml", ".test/config.yaml",
                                    str(out / "smoke_dag.yaml")]))
    assert len(plan.runs) == (2 * 3 + 1) * 2 == dag["runs"]["planned"]
    assert dag["runs"]["complete"] == 14 and dag["runs"]["devices"] == {"cpu": 14}
    assert dag["runs"]["precision"] == {"float32": 14}
    assert dag["runs"]["status"] == {"ok": 12, "diverged": 2}
    # the ledger's verdicts as its CSV has them, one per claim in words of .test/claims.yaml
    words = pd.read_csv(plan.paths.figure(WORDS_NAME, "csv"))
    assert dag["ledger"] == words["verdict"].value_counts().to_dict()
    claims = yaml.safe_load((work / ".test/claims.yaml").read_text())
    assert sum(dag["ledger"].values()) == len(claims["qualitative"]["claims"])
    calibration = pd.read_csv(plan.paths.figure(CALIBRATION_NAME, "csv"))
    pd.testing.assert_frame_equal(pd.DataFrame(dag["calibration"]), calibration, check_like=True)
    assert len(dag["calibration"]) == len(claims["qualitative"]["claims"])

    # the small JSON: the device, versions, each step's status and numbers
    summary = json.loads(summary_path.read_text())
    assert summary["torch"] == torch.__version__ and summary["device"]
    assert {n: s["status"] for n, s in summary["steps"].items()} == dict.fromkeys(STEPS, "ok")
    assert summary["steps"]["quick_dag"]["runs"] == dag["runs"]


def test_a_missing_wheelhouse_names_make_wheelhouse_when_a_package_is_missing(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(quick, "NEEDED", {"fednorm_no_such_module": "fednorm-no-such-package"})
    with pytest.raises(RuntimeError, match=r"no wheelhouse at .*make wheelhouse.* lacks "
                                           r"fednorm-no-such-package"):
        quick.wheelhouse(tmp_path / "none")


def test_the_gpu_quick_config_puts_every_quick_experiment_at_8_seeds_in_its_own_folders():
    """config/gpu_quick.yaml over config/quick.yaml (the profile's config files): every
    experiment but the tuning grids at seeds 0-7, the tuning grids on three seeds of their own
    (none of 0-7: a tuning seed never judges), no second stage, training on CUDA; the quick
    profile's judged runs among its own."""
    profile = yaml.safe_load((ROOT / quick.PROFILE / "config.yaml").read_text())
    assert profile["configfile"] == ["config/quick.yaml", "config/gpu_quick.yaml"]
    assert profile["resources"] == ["gpu=1"]
    paper = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    base = merge(paper, yaml.safe_load((ROOT / "config/quick.yaml").read_text()))
    ours = merge(base, yaml.safe_load((ROOT / "config/gpu_quick.yaml").read_text()))
    quick_plan, gpu_plan = load_plan(base), load_plan(ours)
    assert gpu_plan.stage2 is None and gpu_plan.execution.device == "cuda"
    assert gpu_plan.paths.results != quick_plan.paths.results
    for name, run_ids in gpu_plan.experiments.items():
        seeds = {gpu_plan.runs[r].seed for r in run_ids}
        tuned = "tune" in (base["experiments"][name] or {})
        if tuned and len(seeds) > 1:
            assert len(seeds) == 3 and not seeds & set(range(8)), name
        elif not tuned:
            assert seeds == set(range(8)), name
    assert set(gpu_plan.experiments) == set(quick_plan.experiments)
    judged = {r for name, ids in quick_plan.experiments.items()
              if "tune" not in (base["experiments"][name] or {}) for r in ids}
    assert judged < set(gpu_plan.runs)  # the same configs, more seeds


def test_a_dag_that_fails_or_runs_out_of_time_is_counted_and_its_log_kept(tmp_path,
                                                                         monkeypatch):
    """Snakemake's exit status in the result (None when stopped at its time), the runs it
    wrote counted (none here), the log's end kept: the step fails with its numbers."""
    monkeypatch.chdir(ROOT)
    stopped = quick.quick_dag(True, tmp_path / "a", timeout_s=0.5)
    assert stopped["exit"] is None and stopped["runs"]["complete"] == 0
    assert stopped["runs"]["planned"] == 14 and stopped["ledger"] is None
    monkeypatch.setattr(quick, "PROFILE", str(tmp_path / "no-such-profile"))
    failed = quick.quick_dag(True, tmp_path / "b", timeout_s=120)
    assert failed["exit"] not in (0, None) and "no-such-profile" in failed["text"]
    assert (tmp_path / "b/dag.log").read_text().endswith(failed["text"])
