"""``results/summary.csv``: one tidy row per run x evaluation point.

Columns: ``run_id``, ``figure_group`` (the experiments the run belongs to, joined by '|'), every
run-config key (lists written as text), ``scenario`` (the Byzantine setting in words: 'no attack',
'SF, no defense', 'SF, median + NNM', ...; see :attr:`fednorm.config.RunConfig.scenario`),
``split`` (the data split in words: 'IID', 'γ=0.1', 'Dir(0.6)', 'Shards(2)'), ``regime`` (the
split and E: 'Dir(0.1), E=100'), the metrics (fednorm.metrics.SUMMARY_METRICS:
``step``, ``test_accuracy`` as a fraction, ``test_loss``, ``train_loss``,
``norm_error_mean``, ``norm_error_var``: the normalization error averaged over BN layers, NaN
without BN; ``stat_change``, ``stat_deviation``, ``stat_variance``: the FixBN paper's training
dynamics summed over BN layers, fednorm.fl.dynamics, NaN unless the run recorded them;
``comm_rounds``: client-server exchanges so far, fednorm.fl.round; ``local_test_accuracy``:
the accuracy on each client's own label distribution, averaged over the clients;
``val_accuracy``: on the images held out of the training set (``val_fraction``), NaN without;
with FedBN and
SiloBN, ``test_accuracy`` is the mean of the clients' models on the global test set,
fednorm.fl.train.evaluate), and the run's ``status``, ``wall_time_s`` and ``engine_revision``
(the engine's revision that trained it, fednorm.ENGINE_REVISION; empty where its run.json
names none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from fednorm.config import DERIVED, FIELDS, RunConfig
from fednorm.integrity import check_runs
from fednorm.io import write_csv
from fednorm.metrics import SUMMARY_METRICS
from fednorm.plan import Plan

FIRST_COLUMNS = ("run_id", "figure_group", "model", "normalizer", "partition", "heterogeneity",
                 "local_steps", "attack", "f", "aggregator", "nnm", "scenario", "split", "seed")


def config_columns(cfg: RunConfig) -> dict[str, Any]:
    """A run's config as the summary writes it: every key (lists as text, e.g. '[0.1, 0.05]')
    and the DERIVED columns."""
    columns = {key: str(value) if isinstance(value, list) else value
               for key, value in cfg.identity().items()}
    return {**columns, **{key: getattr(cfg, key) for key in DERIVED}}


def run_rows(plan: Plan, run_id: str) -> pd.DataFrame:
    run_dir = Path(plan.paths.run_dir(run_id))
    rows = pd.read_csv(run_dir / "metrics.csv")
    meta = json.loads((run_dir / "run.json").read_text())
    for key, value in config_columns(plan.runs[run_id]).items():
        rows[key] = value
    rows["run_id"] = run_id
    rows["figure_group"] = plan.groups(run_id)
    rows["status"] = meta["status"]
    rows["wall_time_s"] = meta["wall_time_s"]
    rows["engine_revision"] = meta.get("engine_revision")
    return rows


def summarize(plan: Plan, out: str | Path | None = None) -> pd.DataFrame:
    """Write the summary of every run of the plan; first, the runs' files are checked: a run
    cut short is set aside and reported (fednorm.integrity.check_runs), never left out."""
    check_runs(plan)
    frame = pd.concat([run_rows(plan, r) for r in plan.runs], ignore_index=True)
    rest = [c for c in (*FIELDS, *DERIVED) if c not in FIRST_COLUMNS]
    # reindex: a run written before a metric existed (val_accuracy) has NaN there
    frame = frame.reindex(columns=[*FIRST_COLUMNS, *rest, *SUMMARY_METRICS])
    write_csv(out or plan.paths.summary(), frame)
    return frame
