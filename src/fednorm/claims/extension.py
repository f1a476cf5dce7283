"""The tuning grids extended where a choice sits at an edge: one more value beyond it, trained
on the tuning seeds before the fresh seeds train (a Snakemake checkpoint before the second
stage's, workflow/rules/summarize.smk).

A choice at the largest or smallest value of a swept key (the rate ``lr_scale`` or a key its
method tunes: fednorm.methods.Tune) may have its optimum beyond the grid (fednorm.tuning:
an interior optimum 1 point above the edges lands on an edge a third of the time). So each
cell of the claims' tuning experiments whose choice is at an edge (:func:`fednorm.tuning.
choices`' ``edge``: only where the key goes on) gets the value one geometric step beyond it
(:func:`fednorm.tuning.beyond`) at the choice's other values, on every tuning seed, in the
tuning experiment: the choice is then made again on the extended grid, from the same seeds,
before the second stage copies it on the fresh seeds (fednorm.claims.stage2). One step only: a
choice still at an edge after it stays marked (fednorm.claims.comparisons' ``Side.edges``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fednorm.claims.comparisons import CHOSEN_BY, tunings_of
from fednorm.claims.stage2 import Added, Request, planned_record
from fednorm.claims.words import Words
from fednorm.config import run_config
from fednorm.plan import Plan
from fednorm.tuning import at_choice, beyond, choices, filled, tuned_keys, tuning_seeds


def _extended(rows: pd.DataFrame, plan: Plan, name: str) -> tuple[Added, ...]:
    """One cell's runs one step beyond each edge of its choice: the chosen runs on the tuning
    seeds with that key at the value beyond (none where the choice is interior)."""
    over = tuned_keys(rows)
    choice = choices(rows, [], by=CHOSEN_BY, over=over)
    edges = [e.split(":") for e in str(choice["edge"].iloc[0]).split(",") if e]
    if not edges:
        return ()
    seen = rows[tuning_seeds(rows, [], over)]
    chosen = at_choice(seen, choice, [], over).drop_duplicates("run_id")
    values = filled(rows, over)
    out = []
    for key, side in edges:
        value = beyond(key, values[key].unique(), side)
        assert value is not None  # an edge is marked only where a value lies beyond it
        for run_id in sorted(chosen["run_id"]):
            cfg = plan.runs[run_id]
            moved = run_config({**cfg.identity(), key: value},
                               where=f"{name} (run {run_id} with {key} {value:g})")
            out.append(Added(moved, (name,), run_id))
    return tuple(out)


def extension_requests(words: Words, summary: pd.DataFrame, plan: Plan) -> list[Request]:
    """Per cell of each of the claims' tuning experiments (in order, cells by their first run)
    whose choice is at an edge: its runs one step beyond it (module docstring)."""
    out = []
    for tuning in tunings_of(summary, words.tuning):
        for index in tuning.cells.values():
            rows = tuning.rows.loc[index]
            if any(r not in plan.runs for r in rows["run_id"].unique()):
                continue
            added = _extended(rows, plan, tuning.name)
            if added:
                first = plan.runs[added[0].copies]
                out.append(Request("extend", tuning.name, first.setting, added))
    return out


def extension_record(words: Words, summary: pd.DataFrame, plan: Plan) -> dict[str, Any]:
    """The extension's plan (extension.json), as the second stage's (runs, why, jobs of about
    equal modelled time): nothing in it depends on a clock."""
    assert plan.stage2 is not None
    return planned_record(extension_requests(words, summary, plan), plan, plan.stage2.jobs)
