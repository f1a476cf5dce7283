"""Result files cut short, found before they are read, reported by path, and made to count as
unfinished so that the next ``snakemake`` makes them again.

The project never leaves half a file itself (every writer goes through :mod:`fednorm.io`), but a
copy that stopped mid-way (rsync, scp, cp) or a full disk can: an empty or cut ``metrics.csv``,
a ``run.json`` that is not JSON. Snakemake sees a run as finished when its files exist
(:meth:`fednorm.plan.Plan.is_complete`, read while the workflow is parsed, on every call and in
every cluster job, so it does not read them), and would keep such a run forever; pandas would
fail on it with a traceback, or read a cut line as a row of NaN. So the jobs that read results
check them first:

- the summary job (:func:`check_runs`) checks every run's files; a damaged run's files are
  moved into ``<run dir>/damaged/`` (kept, not deleted: a cut file may still be worth a look),
  so the run is missing and the next ``snakemake`` trains it again; the job then fails, naming
  each damaged file and what is wrong with it, so no summary (and no figure) leaves it out;
- the figure and claims jobs (:func:`read_summary`) check ``summary.csv`` the same way, and that
  it holds every run of the plan; a damaged summary is removed (the runs make it again) and the
  job fails naming it.

What counts as damaged (:func:`csv_problem`, :func:`json_problem`): an empty file; a CSV whose
last line has no line end (cut mid-line), a line with another number of fields than the header,
NUL bytes or bytes that are not text (what a crash or a full disk can leave), or another number
of rows than ``run.json`` records (``rows``, written with each run since this check exists; for
older runs the other checks only, so a copy cut exactly at a line end goes unseen there); a
``run.json`` that is not JSON, or not an object with the keys the summary reads.

:class:`DamagedResults` is an :class:`~fednorm.inputs.InputError`: the workflow scripts run
inside :func:`fednorm.inputs.user_errors`, so the report is the job's message, without a
traceback (``FEDNORM_DEBUG=1`` keeps it).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from fednorm.inputs import InputError
from fednorm.metrics import TEXT_COLUMNS
from fednorm.plan import RUN_FILES, Plan

RUN_JSON = "run.json"
RUN_CSVS = tuple(name for name in RUN_FILES if name != RUN_JSON)
RUN_JSON_KEYS = ("status", "wall_time_s")  # what the summary reads from run.json
ROWS_KEY = "rows"  # run.json: CSV name -> its number of rows (fednorm.run)
DAMAGED = "damaged"  # <run dir>/damaged/: where a damaged run's files are moved
WHAT_HAPPENS = "the next `snakemake` makes them again"


class DamagedResults(InputError):
    """Result files cut short: the message names each file and what is wrong with it, what was
    done with them, and what to do."""


def csv_problem(data: bytes, rows: int | None = None) -> str | None:
    """What is wrong with the bytes of a CSV file written whole by pandas (a header line, then
    one line per row, each ending in a line end), or None; ``rows``: the rows it must hold."""
    if not data:
        return "empty (0 bytes)"
    if not data.endswith(b"\n"):
        return "cut mid-line (the last line has no line end)"
    if b"\0" in data:  # what a crash or a full disk can leave in place of the end
        return "holds NUL bytes where text belongs"
    try:
        records = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as err:
        return f"not a CSV text file ({err})"
    header = records[0]
    for number, record in enumerate(records[1:], start=2):
        if len(record) != len(header):
            return (f"cut or garbled: line {number} has {len(record)} fields, the header "
                    f"{len(header)}")
    if rows is not None and len(records) - 1 != rows:
        return f"cut: {len(records) - 1} rows, run.json records {rows}"
    return None


def json_problem(data: bytes, keys: Iterable[str] = RUN_JSON_KEYS) -> str | None:
    """What is wrong with the bytes of a run.json, or None: it must be a JSON object with
    ``keys``."""
    if not data:
        return "empty (0 bytes)"
    try:
        meta = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        where = f" (line {err.lineno}, column {err.colno}: {err.msg})" \
            if isinstance(err, json.JSONDecodeError) else ""
        return f"not JSON{where}"
    if not isinstance(meta, dict):
        return f"not a JSON object (a {type(meta).__name__})"
    missing = [k for k in keys if k not in meta]
    return f"lacks the key(s) {', '.join(missing)}" if missing else None


def _read(path: Path) -> bytes | str:
    """The file's bytes, or what keeps it from being read, in words."""
    try:
        return path.read_bytes()
    except OSError as err:
        return f"cannot be read ({err.strerror or type(err).__name__})"


def run_problems(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Path -> what is wrong, for each damaged file of the run in ``run_dir``; {} when it is
    intact. A missing file is not damage (the run is then unfinished, and retrained anyway)."""
    run_dir = Path(run_dir)
    problems: dict[str, str] = {}
    recorded: Mapping[str, int] = {}
    if (run_dir / RUN_JSON).exists():
        data = _read(run_dir / RUN_JSON)
        problem = data if isinstance(data, str) else json_problem(data)
        if problem:
            problems[str(run_dir / RUN_JSON)] = problem
        else:
            recorded = json.loads(data).get(ROWS_KEY) or {}
    for name in RUN_CSVS:
        path = run_dir / name
        if not path.exists():
            continue
        data = _read(path)
        problem = data if isinstance(data, str) else csv_problem(data, recorded.get(name))
        if problem:
            problems[str(path)] = problem
    return problems


def set_aside(run_dir: str | os.PathLike[str]) -> Path:
    """Move the run's files into ``<run_dir>/damaged/`` (replacing what an earlier damage left
    there), so that the run counts as unfinished; returns that folder."""
    run_dir = Path(run_dir)
    aside = run_dir / DAMAGED
    aside.mkdir(exist_ok=True)
    for name in RUN_FILES:
        if (run_dir / name).exists():
            os.replace(run_dir / name, aside / name)
    return aside


def _listing(problems: Mapping[str, str]) -> str:
    return "".join(f"\n  {path}: {problem}" for path, problem in problems.items())


def check_runs(plan: Plan, run_ids: Iterable[str] | None = None) -> None:
    """Check the files of the plan's runs (default: all); DamagedResults naming every damaged
    file once each damaged run's files are set aside (:func:`set_aside`)."""
    found = {r: run_problems(plan.paths.run_dir(r)) for r in (plan.runs if run_ids is None
                                                               else run_ids)}
    damaged = {r: problems for r, problems in found.items() if problems}
    if not damaged:
        return
    for run_id in damaged:
        set_aside(plan.paths.run_dir(run_id))
    listing = _listing({p: text for problems in damaged.values() for p, text in problems.items()})
    raise DamagedResults(
        f"{len(damaged)} run(s) have files that were cut short (a copy that stopped, a full "
        f"disk?); each such run's files were moved into its folder's '{DAMAGED}/' and the run "
        f"counts as unfinished: {WHAT_HAPPENS} (train them):{listing}")


def read_summary(path: str | os.PathLike[str], run_ids: Iterable[str]) -> pd.DataFrame:
    """``summary.csv``, checked like a run's CSV and for a row of each of ``run_ids``; when it
    is damaged, it is removed and DamagedResults names it."""
    path = Path(path)
    data = _read(path)
    problem = data if isinstance(data, str) else csv_problem(data)
    frame = None
    if problem is None:
        frame = pd.read_csv(io.BytesIO(data), dtype=TEXT_COLUMNS)
        missing = sorted(set(run_ids) - set(frame.get("run_id", ())))
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            problem = (f"cut or stale: no rows of {len(missing)} run(s) of the plan "
                       f"({', '.join(missing[:3])}{more})")
    if problem is None:
        return frame
    path.unlink(missing_ok=True)
    raise DamagedResults(f"summary {path}: {problem}; removed it: {WHAT_HAPPENS} (from the "
                         f"runs)")
