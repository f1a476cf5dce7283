"""results/summary.csv from run files: one tidy row per run x evaluation point."""

import json

import pandas as pd

from fednorm.metrics import METRIC_COLUMNS, SUMMARY_METRICS
from fednorm.plan import load_plan
from fednorm.summarize import FIRST_COLUMNS, summarize


def test_summary_carries_every_key_and_the_scenario_of_each_run(tmp_path):
    plan = load_plan({
        "paths": {"results": str(tmp_path)},
        "run": {"steps": 10, "eval_every": 5, "heterogeneity": 0, "f": 3},
        "experiments": {"e": {"grid": {"attack": ["none", "sf"],
                                       "aggregator": ["mean", "trimmed_mean"]}}}})
    for run_id in plan.runs:
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        metrics = pd.DataFrame({c: [0.5, 0.25] for c in METRIC_COLUMNS}).assign(step=[0, 10])
        metrics.to_csv(run_dir / "metrics.csv", index=False)
        (run_dir / "run.json").write_text(json.dumps({"status": "ok", "wall_time_s": 1.0}))
    frame = summarize(plan)
    assert list(frame.columns[: len(FIRST_COLUMNS)]) == list(FIRST_COLUMNS)
    assert len(frame) == 2 * len(plan.runs)
    on_disk = pd.read_csv(tmp_path / "summary.csv")
    pairs = set(zip(on_disk.attack, on_disk.aggregator, on_disk.scenario, strict=True))
    assert pairs == {("none", "mean", "no attack"), ("sf", "mean", "SF, no defense"),
                     ("none", "trimmed_mean", "trimmed mean"),
                     ("sf", "trimmed_mean", "SF, trimmed mean")}
    assert list(on_disk.columns[-len(SUMMARY_METRICS):]) == list(SUMMARY_METRICS)


def test_summary_carries_each_runs_engine_revision_read_back_as_text(tmp_path):
    """run.json's engine_revision on every row of its run, empty for a run.json without one;
    a revision of digits alone ('0123456') stays text where the summary is read."""
    from fednorm.integrity import read_summary
    from fednorm.results import load_summary, run_table

    plan = load_plan({"paths": {"results": str(tmp_path)},
                      "run": {"steps": 10, "eval_every": 5},
                      "experiments": {"e": {"grid": {"seed": [0, 1, 2]}}}})
    revisions = dict(zip(plan.runs, ["0123456", "2cf004e", None], strict=True))
    for run_id, revision in revisions.items():
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        pd.DataFrame({c: [0.5, 0.25] for c in METRIC_COLUMNS}).assign(step=[0, 10]).to_csv(
            run_dir / "metrics.csv", index=False)
        meta = {"status": "ok", "wall_time_s": 1.0,
                **({"engine_revision": revision} if revision else {})}
        (run_dir / "run.json").write_text(json.dumps(meta))
    summarize(plan)
    for frame in (load_summary(tmp_path), read_summary(tmp_path / "summary.csv", plan.runs)):
        got = run_table(frame).set_index("run_id")["engine_revision"]
        assert {r: None if pd.isna(v) else v for r, v in got.items()} == revisions
