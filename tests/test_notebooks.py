"""The notebooks (notebooks/*.py, Jupytext percent scripts) executed against the .test/ DAG's
results, so that they never rot: each cell runs, and what they show is the folder's numbers."""

import importlib
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fednorm.results import load_summary, select

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _module(name):
    """The module of the notebooks extra: skip without it, unless under CI (CI=true) where it
    must be installed (.ci/run) and its absence fails."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(name)
    return pytest.importorskip(name, reason="pip install -e '.[notebooks]' (make install)")


def execute(name, cwd):
    """Run notebooks/<name>.py as a notebook in ``cwd`` (a kernel with this process's
    environment); raises nbclient's CellExecutionError naming the failing cell."""
    jupytext, nbclient = _module("jupytext"), _module("nbclient")
    notebook = jupytext.read(NOTEBOOKS / f"{name}.py")
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}).execute()
    return notebook


def outputs(notebook, kind):
    """Every output of the code cells of MIME type ``kind`` ('stream': printed text)."""
    found = []
    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            if kind == "stream" and out["output_type"] == "stream":
                found.append(out["text"])
            elif kind in out.get("data", {}):
                found.append(out["data"][kind])
    return found


@pytest.mark.slow
@pytest.mark.xdist_group("tiny_dag")
def test_the_tour_shows_the_folders_numbers(tiny_dag, monkeypatch):
    test = tiny_dag.work / ".test"
    monkeypatch.setenv("FEDNORM_RESULTS", str(test / "results"))
    monkeypatch.setenv("FEDNORM_FIGURES", str(test / "figures"))
    notebook = execute("results_tour", tiny_dag.work / "notebooks")
    summary = load_summary(test / "results")
    assert f"{summary.run_id.nunique()} runs" in outputs(notebook, "stream")[0]
    # FBN's table: each cell's mean over seeds of its runs' last accuracy in % (one seed a
    # cell in .test/, six where the claims' second stage added five)
    last = select(summary, "fbn_gamma").sort_values("step").groupby("run_id").tail(1)
    (fbn_table,) = [t for t in outputs(notebook, "text/plain") if "heterogeneity" in t
                    and t.lstrip().startswith("heterogeneity")]
    cells = last.groupby(["normalizer", "heterogeneity"])["test_accuracy"]
    assert cells.size().max() > 1  # the second stage's seeds are in the tour too
    for accuracy in cells.mean():
        assert f"{100 * accuracy:.2f}" in fbn_table
    assert len(outputs(notebook, "image/png")) == 3  # heatmap, redrawn figure, norm error


def _run_files(folder):
    return {p.parent.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in (folder / "runs").glob("*/run.json")}


@pytest.mark.slow
@pytest.mark.xdist_group("tiny_dag")
def test_a_new_question_trains_only_its_new_runs(tiny_dag, tmp_path, monkeypatch):
    work = tmp_path / "repo"
    shutil.copytree(tiny_dag.work, work, symlinks=True)  # the DAG's outputs stay as they were
    results = work / ".test/results"
    before = _run_files(results)
    for key, value in {"CONFIGS": ".test/config.yaml", "EXPERIMENT": "fbn_gamma",
                       "AXIS": "heterogeneity", "VALUE": "0.5",
                       "QUESTION": ".test/question.yaml", "CORES": "2"}.items():
        monkeypatch.setenv(f"FEDNORM_{key}", value)
    notebook = execute("new_question", work / "notebooks")
    after = _run_files(results)
    new = set(after) - set(before)
    assert {r: after[r] for r in before} == before  # old runs not retrained, not rewritten
    summary = load_summary(results)
    added = select(summary, "fbn_gamma", heterogeneity=0.5)
    assert set(added.run_id) == new and sorted(added.normalizer.unique()) == ["bn", "fbn"]
    assert all(json.loads((results / "runs" / r / "run.json").read_text())["status"] == "ok"
               for r in new)
    streamed = "".join(outputs(notebook, "stream"))
    assert "2 new runs" in streamed
    # Snakemake's own progress, streamed into the cell rather than captured
    assert "steps (100%) done" in streamed
    shown = outputs(notebook, "text/plain")[-2]  # the comparison's statistics
    assert "0.5" in shown and pd.notna(added.test_accuracy).all()
