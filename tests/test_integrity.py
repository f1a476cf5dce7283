"""Result files cut short (an empty or cut CSV, a run.json that is not JSON): found, named by
path, set aside so that the run counts as unfinished, never read into a summary or a figure."""

import json
from pathlib import Path

import pandas as pd
import pytest

from fednorm.config import run_config
from fednorm.fl.train import TrainResult
from fednorm.inputs import user_errors
from fednorm.integrity import (
    DAMAGED,
    DamagedResults,
    check_runs,
    csv_problem,
    json_problem,
    read_summary,
    run_problems,
)
from fednorm.metrics import METRIC_COLUMNS
from fednorm.plan import RUN_FILES, load_plan
from fednorm.run import _write_run
from fednorm.summarize import summarize


def _plan(tmp_path):
    return load_plan({"paths": {"results": str(tmp_path)},
                      "run": {"steps": 10, "eval_every": 5, "heterogeneity": 0},
                      "experiments": {"e": {"grid": {"seed": [0, 1, 2]}}}})


def _write_runs(plan):
    """Every run of the plan written as training writes it (three evaluation points)."""
    rows = [{**{c: 0.5 for c in METRIC_COLUMNS}, "step": s} for s in (0, 5, 10)]
    for run_id, cfg in plan.runs.items():
        _write_run(cfg, Path(plan.paths.run_dir(run_id)), TrainResult(rows=rows), 1.0, {})


def _csv_bytes():
    frame = pd.DataFrame({"step": [0, 5, 10], "test_accuracy": [0.1, 0.25, 0.5],
                          "scenario": ["no attack", "SF, median", "IID"]})
    return frame.to_csv(index=False).encode(), len(frame)


def test_an_intact_csv_passes_and_every_cut_that_is_not_at_a_line_end_is_found():
    data, rows = _csv_bytes()
    assert csv_problem(data, rows) is None
    line_ends = {i + 1 for i, byte in enumerate(data) if byte == ord("\n")}
    for cut in range(len(data)):
        problem = csv_problem(data[:cut])
        assert (problem is None) == (cut in line_ends), (cut, problem)
        # with the row count run.json records, a cut at a line end is found as well
        assert csv_problem(data[:cut], rows) is not None
    assert csv_problem(b"") == "empty (0 bytes)"
    two_lines = b"".join(data.splitlines(keepends=True)[:2])  # the header and one row
    assert csv_problem(two_lines, rows) == "cut: 1 rows, run.json records 3"


def test_a_garbled_csv_is_found():
    data, _ = _csv_bytes()
    assert "line 3 has 2 fields, the header 3" in csv_problem(data.replace(b"0.25,", b""))
    assert csv_problem(data + b"\0" * 40 + b"\n") == "holds NUL bytes where text belongs"
    assert csv_problem(b"step\n\xff\n").startswith("not a CSV text file")


def test_run_json_must_be_a_json_object_with_the_keys_the_summary_reads():
    text = json.dumps({"status": "ok", "wall_time_s": 1.0, "config": {"lr": [0.1]}}).encode()
    assert json_problem(text) is None
    for cut in range(len(text)):  # every cut of an object is not JSON
        assert json_problem(text[:cut]) is not None
    assert json_problem(b"") == "empty (0 bytes)"
    assert json_problem(b'{"status": ') == "not JSON (line 1, column 12: Expecting value)"
    assert json_problem(b"[1]") == "not a JSON object (a list)"
    assert json_problem(b'{"status": "ok"}') == "lacks the key(s) wall_time_s"


def test_a_written_run_is_intact_and_records_its_row_counts(tmp_path):
    plan = _plan(tmp_path)
    _write_runs(plan)
    run_dir = Path(plan.paths.run_dir(next(iter(plan.runs))))
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["rows"] == {name: len(pd.read_csv(run_dir / name))
                            for name in ("metrics.csv", "norm_error.csv", "dynamics.csv")}
    assert meta["rows"]["metrics.csv"] == 3
    assert run_config(meta["config"]) == plan.runs[meta["run_id"]]
    assert all(run_problems(plan.paths.run_dir(r)) == {} for r in plan.runs)


def test_damaged_runs_are_set_aside_named_and_retrained_the_others_kept(tmp_path):
    plan = _plan(tmp_path)
    _write_runs(plan)
    cut, empty, intact = plan.runs
    dirs = {r: Path(plan.paths.run_dir(r)) for r in plan.runs}
    metrics = (dirs[cut] / "metrics.csv").read_bytes()
    (dirs[cut] / "metrics.csv").write_bytes(metrics[:-7])  # mid-line
    (dirs[empty] / "metrics.csv").write_bytes(b"")
    (dirs[empty] / "run.json").write_text('{"status": "ok", "wall')
    kept = {n: (dirs[intact] / n).read_bytes() for n in RUN_FILES}

    with pytest.raises(DamagedResults) as err:
        summarize(plan)
    message = str(err.value)
    assert message.startswith("2 run(s) have files that were cut short")
    assert f"{dirs[cut]}/metrics.csv: cut mid-line" in message
    assert f"{dirs[empty]}/metrics.csv: empty (0 bytes)" in message
    assert f"{dirs[empty]}/run.json: not JSON (line 1, column 18: Unterminated string" in message
    assert str(dirs[intact]) not in message
    assert not Path(plan.paths.summary()).exists()  # no summary without them
    # set aside: the runs are unfinished, so the next `snakemake` trains exactly them
    assert {r for members in plan.pending_bundles().values() for r in members} == {cut, empty}
    assert (dirs[cut] / DAMAGED / "metrics.csv").read_bytes() == metrics[:-7]
    assert sorted(p.name for p in (dirs[empty] / DAMAGED).iterdir()) == sorted(RUN_FILES)
    assert {n: (dirs[intact] / n).read_bytes() for n in RUN_FILES} == kept

    _write_runs(plan)  # retrained: the summary holds every run again
    assert set(summarize(plan).run_id) == set(plan.runs)


def test_check_runs_passes_unfinished_runs_which_are_not_damage(tmp_path):
    plan = _plan(tmp_path)
    check_runs(plan)  # nothing written yet
    _write_runs(plan)
    (Path(plan.paths.run_dir(next(iter(plan.runs)))) / "run.json").unlink()
    check_runs(plan)
    assert all((Path(plan.paths.run_dir(r)) / "metrics.csv").exists() for r in plan.runs)


def test_a_damaged_summary_is_removed_and_named(tmp_path):
    plan = _plan(tmp_path)
    _write_runs(plan)
    path = Path(plan.paths.summary())
    frame = summarize(plan)
    pd.testing.assert_frame_equal(read_summary(path, plan.runs),  # a revision read as text
                                  pd.read_csv(path, dtype={"engine_revision": str}))
    whole = path.read_bytes()
    last_run = frame.run_id.iloc[-1]
    for damaged, problem in [
        (whole[:-3], "cut mid-line"),
        (b"", "empty (0 bytes)"),
        # cut at a line end before the last run's rows: a run of the plan has none
        (whole[: whole.index(last_run.encode())],
         f"cut or stale: no rows of 1 run(s) of the plan ({last_run})"),
    ]:
        path.write_bytes(damaged)
        with pytest.raises(DamagedResults, match="the next `snakemake` makes them again") as err:
            read_summary(path, plan.runs)
        assert str(err.value).startswith(f"summary {path}: {problem}")
        assert not path.exists()


def test_user_errors_make_the_report_the_job_message_without_a_traceback(tmp_path, capsys):
    plan = _plan(tmp_path)
    _write_runs(plan)
    metrics = Path(plan.paths.run_dir(next(iter(plan.runs)))) / "metrics.csv"
    metrics.write_bytes(b"")
    with pytest.raises(SystemExit) as done, user_errors():
        summarize(plan)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("fednorm: 1 run(s) have files") and f"{metrics}: empty" in err
    assert "Traceback" not in err
