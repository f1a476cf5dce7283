"""The window estimand (a run's mean over the last quarter of its budget, after its last lr
drop: fednorm.results.run_values at="window") against the final point, and the settled rule
as a veto only where a climb could close the margin (fednorm.claims.verdicts.veto) against
the old rule (any side behind still climbing blocks a firm verdict).

    python benchmarks/estimand.py schedule config/config.yaml [config/quick.yaml]
    python benchmarks/estimand.py measure SUMMARY.csv [--claims config/claims.yaml]

``schedule``: for a profile's planned runs, how many evaluation points fall in each run's
window (the evaluation steps the engine records: 0, each round's end that crosses a multiple of
eval_every, and the last step; fednorm.fl.train), counted by fednorm.results.window_points.

``measure``, on a summary (e.g. a copy of results/quick/stage2/summary_first.csv, the first
stage): (1) per experiment, per setting (its runs but their seeds, ≥ 2 seeds), the std over
seeds of the window value and of the final value, and the median of their ratio; the residual
sd of value ~ setting + seed (seeds as blocks: the noise the paired margins see) with each
estimand, and their ratio; (2) the words
ledger's verdict counts judged as the second stage judges the first (α/2 a look), with the
final and the window estimand, each under the old and the new veto; with ``--plan`` (the
second stage's plan.json, SUMMARY the full summary.csv), both stages judged as the claims rule
judges them (fednorm.claims.words_ledger.staged_ledger), the second stage's runs being those
the first stage's ledger chose under the rule of its own commit.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np
import pandas as pd
import yaml

from fednorm.claims import load_claims
from fednorm.claims import verdicts as verdict_module
from fednorm.claims.stage2 import read_record
from fednorm.claims.words import CONTRADICTED, HOLDS
from fednorm.claims.words_ledger import staged_ledger, words_ledger
from fednorm.plan import load_plan
from fednorm.plan.pipeline import merge
from fednorm.results import experiments, run_values, select, varying_keys, window_points
from fednorm.summarize import config_columns


def eval_steps(steps: int, local_steps: int, every: int) -> list[int]:
    """The steps a run records an evaluation at (fednorm.fl.train's loop)."""
    out = [0]
    for first in range(0, steps, local_steps):
        step = first + local_steps
        if step // every != first // every or step == steps:
            out.append(step)
    return out


def schedule(configs: list[str]) -> None:
    config: dict = {}
    for name in configs:
        with open(name) as f:
            config = merge(config, yaml.safe_load(f))
    plan = load_plan(config)
    rows = []
    for run_id, cfg in plan.runs.items():
        columns = config_columns(cfg)
        for step in eval_steps(cfg.steps, cfg.local_steps, cfg.eval_every):
            rows.append({"run_id": run_id, "status": "ok", "step": step, "test_accuracy": 0.5,
                         "lr_milestones": columns["lr_milestones"]})
    frame = pd.DataFrame(rows)
    counts = window_points(frame, "test_accuracy").groupby("run_id").size()
    counts = counts.reindex(list(plan.runs), fill_value=0)
    share = Counter(counts.tolist())
    print(f"{' + '.join(configs)}: {len(counts)} runs; points in the window: "
          + ", ".join(f"{k}: {share[k]} runs" for k in sorted(share))
          + " (0: a single point after the last drop, the window value is that point)")


def block_sd(runs: pd.DataFrame, keys: list[str]) -> tuple[float, int]:
    """The residual sd of value ~ setting + seed (seeds as blocks: the error term the verdicts'
    paired margins see) by least squares, and its degrees of freedom."""
    setting = runs.groupby(keys, dropna=False).ngroup() if keys else pd.Series(0, runs.index)
    design = np.c_[pd.get_dummies(setting).to_numpy(float),
                   pd.get_dummies(runs["seed"]).to_numpy(float)[:, 1:]]
    y = runs["value"].to_numpy(float)
    beta, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - rank
    return (math.sqrt(((y - design @ beta) ** 2).sum() / df) if df > 0 else math.nan), df


def spreads(summary: pd.DataFrame) -> pd.DataFrame:
    """Per experiment: settings with ≥ 2 seeds, the median ratio std(window) / std(final) over
    them, and the ratio of the seed-blocked residual sd (:func:`block_sd`)."""
    rows = []
    for name in experiments(summary):
        df = select(summary, name)
        keys = varying_keys(df)
        values = {at: run_values(df, [*keys, "seed"], at=at) for at in ("final", "window")}
        both = values["final"]["value"].notna() & values["window"]["value"].notna()
        values = {at: v[both] for at, v in values.items()}
        blocked = {at: block_sd(v, keys) for at, v in values.items()}
        ratios = []
        by = keys or (lambda _: 0)
        final = values["final"].groupby(by)["value"].agg(["std", "count"])
        window = values["window"].groupby(by)["value"].std()
        for setting, (std, n) in final.iterrows():
            if n >= 2 and std > 0 and not math.isnan(window.get(setting, math.nan)):
                ratios.append(window[setting] / std)
        if ratios:
            (final_sd, df), (window_sd, _) = blocked["final"], blocked["window"]
            rows.append({"experiment": name, "settings": len(ratios),
                         "median ratio": round(float(pd.Series(ratios).median()), 3),
                         "mean final std (pt)": round(100 * final["std"].mean(), 2),
                         "mean window std (pt)": round(100 * window.mean(), 2),
                         "blocked df": df, "blocked final sd (pt)": round(100 * final_sd, 2),
                         "blocked ratio": round(window_sd / final_sd, 3)})
    return pd.DataFrame(rows)


def old_veto(verdict, unit, test, claim, rule, alpha, k):
    """The rule before: any side behind (verdicts' old _behind) still climbing blocks."""
    sides = list(unit.sides)
    within = claim.kind == "within"
    if verdict == HOLDS:
        behind = sides if within or not unit.pair else sides[1:]
    elif verdict == CONTRADICTED:
        alive = [s for s in sides if not math.isnan(s.mean)]
        behind = (sides if not unit.pair else [min(alive, key=lambda s: s.mean)]
                  if within and alive else [sides[0]])
    else:
        behind = []
    blocking = [s for s in behind if s.settled is False]
    return bool(blocking), (f"else {verdict}" if blocking else "the side behind settled")


def ledgers(summary: pd.DataFrame, claims: str, looks: int, plan: str | None = None
            ) -> pd.DataFrame:
    with open(claims) as f:
        spec = yaml.safe_load(f)
    rows, verdicts = [], {}
    new_veto = verdict_module.veto
    for estimand in ("final", "window"):
        words = load_claims_at(spec, estimand)
        for name, veto in (("old", old_veto), ("new", new_veto)):
            verdict_module.veto = veto
            table = (words_ledger(words, summary, looks) if plan is None
                     else staged_ledger(words, summary, read_record(plan)))
            verdicts[(estimand, name)] = table.set_index("id")["verdict"]
            rows.append({"estimand": estimand, "veto": name,
                         **table["verdict"].value_counts().to_dict()})
    verdict_module.veto = new_veto
    out = pd.DataFrame(rows).fillna(0)
    base = verdicts[("final", "old")]
    for (estimand, name), v in verdicts.items():
        moved = base[base != v]
        if len(moved):
            print(f"{estimand} / {name} veto vs final / old: "
                  + "; ".join(f"{i}: {base[i]} -> {v[i]}" for i in moved.index))
    return out


def load_claims_at(spec: dict, estimand: str):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({**spec, "estimand": estimand}, f)
    return load_claims(f.name).words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("schedule")
    plan.add_argument("configs", nargs="+")
    measure = sub.add_parser("measure")
    measure.add_argument("summary")
    measure.add_argument("--claims", default="config/claims.yaml")
    measure.add_argument("--looks", type=int, default=2)
    measure.add_argument("--plan", help="the second stage's plan.json: judge both stages as the "
                         "claims rule does (SUMMARY: the full summary.csv)")
    args = parser.parse_args()
    if args.command == "schedule":
        schedule(args.configs)
        return
    summary = pd.read_csv(args.summary)
    table = spreads(summary)
    print(table.to_string(index=False))
    print(f"\nmedian over experiments of the median ratio: {table['median ratio'].median():.3f}; "
          f"of the blocked ratio: {table['blocked ratio'].median():.3f}")
    print(ledgers(summary, args.claims, args.looks, args.plan).to_string(index=False))


if __name__ == "__main__":
    main()
