"""The Snakemake DAG end to end on the smallest grid (.test/), and a dry run at paper scale."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _snakemake(*args, cwd=ROOT):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def test_paper_dry_run_counts_the_training_jobs():
    out = _snakemake("--dry-run", "--quiet", "rules", "--cores", "1")
    assert out.returncode == 0, out.stderr
    counts = dict(line.split()[:2] for line in out.stdout.splitlines()
                  if len(line.split()) == 2 and line.split()[1].isdigit())
    # Fig 3 (4 x 7 x 3) + Fig 5 (4 x 5 x 3) + the Byzantine runs (Figs 4, 6-13; tests/test_plan.py)
    assert counts["train"] == str(144 + 72 + 144 + 72)
    assert counts["cifar10"] == "1" and counts["figure"] == "18" and counts["toy"] == "1"


@pytest.mark.parametrize(("experiment", "message"), [
    ({"fbn_gamma": {"grid": {"heterogeneity": [0, 1.5]}}}, "key 'heterogeneity' has value 1.5"),
    ({"fbn_byzantine_gamma": {"set": {"f": 5}}}, "key 'f' has value 5"),  # not < n/2 = 5
    ({"fbn_byzantine_gamma": {"set": {"f": -1}}}, "key 'f' has value -1"),
    ({"fbn_byzantine_gamma": {"grid": {"attack": ["sf", "lie"]}}}, "key 'attack' has value 'lie'"),
])
def test_bad_config_fails_before_any_job(tmp_path, experiment, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "paths": {"results": str(tmp_path / "results")}, "experiments": experiment}))
    out = _snakemake("--cores", "1", "--configfile", str(bad))
    assert out.returncode != 0
    assert message in out.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_tiny_dag_builds_every_figure_and_records_divergence(tmp_path):
    work = tmp_path / "repo"
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(
        ".git", ".snakemake", "results", "figures", ".venv", "*.egg-info", "__pycache__",
        ".test"))
    shutil.copytree(ROOT / ".test", work / ".test", ignore=shutil.ignore_patterns(
        "results", "figures", "data"))
    out = _snakemake("--cores", "2", "--configfile", ".test/config.yaml", cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = work / ".test/figures/fbn"
    for name in ("fig3a", "fig3b", "fig3c", "fig5a", "fig5b", "fig5c", "norm_error_curves",
                 "norm_error_vs_heterogeneity", "fig4", *(f"fig{n}" for n in range(6, 14)),
                 "byzantine_norm_error"):
        for ext in ("pdf", "png", "csv"):
            assert (figures / f"{name}.{ext}").stat().st_size > 0

    for name in ("fig1a", "fig1b", "fig2a", "fig2b", "fig2c"):  # the 2-D toy
        for ext in ("pdf", "png", "csv"):
            assert (figures / f"{name}.{ext}").stat().st_size > 0
    toy = pd.read_csv(figures / "fig2c.csv")
    assert set(toy.scheme) == {"bn", "fbn", "fixbn"} and set(toy.gamma) == {0, 1}

    summary = pd.read_csv(work / ".test/results/summary.csv")
    for column in ("run_id", "figure_group", "model", "normalizer", "partition",
                   "heterogeneity", "local_steps", "attack", "f", "aggregator", "nnm",
                   "scenario", "seed", "step", "test_accuracy", "test_loss", "train_loss",
                   "status"):
        assert column in summary.columns
    assert summary["run_id"].nunique() == 7 + 3 + 12 + 4  # .test/config.yaml's grids
    ok = summary[summary.status == "ok"]
    assert ok.test_accuracy.between(0, 1).all()
    assert sorted(ok.step.unique()) == [0, 10, 20]
    diverged = summary[summary.status == "diverged"]
    assert diverged.run_id.nunique() == 1 and diverged.partition.eq("dirichlet").all()
    meta = json.loads(next((work / ".test/results/runs").glob("fbn-dirichlet*-E1-s0-*/run.json"))
                      .read_text())
    assert meta["status"] == "diverged" and meta["config"]["lr"] == [1e6]
    for key in ("git_commit", "versions", "device", "wall_time_s", "seed"):
        assert key in meta
    panels = pd.read_csv(figures / "norm_error_curves.csv")
    assert list(panels.heterogeneity.unique()) == [0.01, 0.0]  # one panel per gamma, in order
    assert (panels[panels.normalizer == "fbn"]["mean"] >= 0).all()
    plotted = pd.read_csv(figures / "fig5a.csv")
    assert plotted["n_diverged"].sum() == 1  # the diverged run is shown, not dropped
    sf_median = pd.read_csv(figures / "fig6.csv")  # lines: scenario x normalizer
    lines = set(zip(sf_median.scenario, sf_median.normalizer, strict=True))
    assert lines == {("no attack", "bn"), ("no attack", "fbn"), ("SF, no defense", "fbn"),
                     ("SF, median + NNM", "bn"), ("SF, median + NNM", "fbn")}
    dirichlet = pd.read_csv(figures / "fig13.csv")
    assert set(dirichlet.scenario) == {"no attack", "SF, trimmed mean + NNM"}
    leftovers = [p for p in (work / ".test").rglob(".*") if p.is_file()]
    assert leftovers == []  # no temporary file left behind
