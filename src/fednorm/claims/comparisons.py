"""A claim's units before their verdicts (:mod:`fednorm.claims.verdicts` judges them): each
unit's sides, the contrast over them that is its margin, and its margins per seed.

A claim is judged in *units* (one value of ``for_each``; a ``best`` claim one unit per other
group; a trend one unit per ``for_each`` value). A unit's *sides* are the seeds of one setting
each; its margin per seed is a contrast of the sides' runs of that seed (runs paired by seed),
measured on the experiments it was run in (the claim's, or the ``tuning`` experiment's at each
method's own learning rate). Whether each side settled (a test of its gain over the last
quarter of the budget, :func:`fednorm.results.settling`) is measured with it. A diverged run
has no value: it makes a seed count for or against the claim (:func:`margins`; the rule is in
:mod:`fednorm.claims.verdicts`' docstring).

**Each method at its own values**: a claim whose compared groups name a METHOD_KEYS key is
judged, unit by unit, at each side's rate and keys chosen on validation accuracy in a
``tuning`` experiment (:func:`fednorm.tuning.choices`), on fresh seeds the choice never saw,
where every side of the unit has a tuning cell; else at the common rate, said in ``rates``. A
side whose choice is at an edge of its (extended) grid, the rate's or a key its method tunes,
is marked (``edge``, and which: ``edges``; fednorm.claims.verdicts decides what it does to the
verdict).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from fednorm.claims.common import ambiguity, config_text, selects
from fednorm.claims.stats import trend_contrast
from fednorm.claims.words import Group, Relation, Words, resolve
from fednorm.config import FIELDS
from fednorm.methods import TUNED_KEYS, tunes_of
from fednorm.metrics import percent
from fednorm.results import in_experiments, matches, run_values, settling, values_of
from fednorm.tuning import (
    at_choice,
    choices,
    chosen_text,
    swept,
    tuned_keys,
    tuning_seeds,
)

# A claim compares methods when its compared groups name one of these keys
METHOD_KEYS = ("normalizer", "feature_norm")
# The keys on which a run and its tuning cell may differ: the seed, the values chosen and the
# held-out images the choice needs (paper scale: the comparison trains on every image)
TUNING_FREE = ("seed", *TUNED_KEYS, "val_fraction")
CHOSEN_BY = "val_accuracy"  # the tuning's choice reads the held-out images alone


@dataclass(frozen=True)
class Side:
    """The runs of one group of a unit: one per seed."""

    label: str
    runs: pd.DataFrame = field(repr=False)  # index seed; diverged, value (in points)
    rows: pd.DataFrame = field(repr=False)  # its summary rows
    gain: float = math.nan  # points the seed mean gains over the last quarter of its budget
    settled: bool | None = None  # None: not an accuracy (the rule is on accuracies)
    rate: str = "lr × 1"  # its learning rate (the recipe's times lr_scale) and tuned keys
    # at tuned values: a run at them (the second stage copies it on fresh seeds), and whether
    # every key its method tunes was swept ('' / False: at the common recipe)
    template: str = ""
    tuned: bool = False
    edge: bool = False  # at tuned values: a choice at an edge of its (extended) grid
    # which: (key, 'high' / 'low') per key at an edge (fednorm.tuning.choices' ``edge``)
    edges: tuple[tuple[str, str], ...] = ()

    @property
    def mean(self) -> float:
        return float(self.runs["value"].mean())

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.rows["run_id"].unique()))


@dataclass(frozen=True)
class Comparison:
    """One unit before its verdict: its sides and the contrast over them that is its margin
    (the claim says it is > −slack; ``within``: |margin| ≤ δ), the experiments whose variance
    pool it joins, and, at tuned rates, the same unit at the common rate."""

    label: str
    sides: tuple[Side, ...] = ()
    coefs: tuple[float, ...] = ()
    pool: tuple[str, ...] = ()
    measure: tuple[str, str] = ("test_accuracy", "final")  # the claim's metric and ``at``
    common: Comparison | None = None
    # at tuned values: the same unit on the tuning seeds (what the choice saw; the second
    # stage reads its lean, never the verdict)
    chosen: Comparison | None = None
    reason: str = ""  # why it has no sides (not run, refused)
    note: str = ""  # at the common rate where a side has no tuning cell

    @property
    def tuned(self) -> bool:
        """Whether it is judged at every side's tuned values (the rate and each key its method
        tunes) on fresh seeds: a contradiction of a paper's own method needs it."""
        return self.common is not None and all(s.tuned for s in self.sides)

    @property
    def group(self) -> tuple[Any, ...]:
        """The pool the unit's variance joins: its experiments and what it measures."""
        return (self.pool, self.measure)

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes two claims' units the same measurement (entered once in a pool)."""
        return (*self.group, *sorted((s.run_ids, c) for s, c in zip(self.sides, self.coefs,
                                                                    strict=True)))

    @property
    def pair(self) -> bool:
        return len(self.sides) == 2


@dataclass(frozen=True)
class Margins:
    """A unit's paired margins and the seeds that only count for or against the claim."""

    values: tuple[float, ...]
    n_for: int = 0
    n_against: int = 0


Sides = dict[tuple[Any, ...], Side]  # the sides already measured in one judging (a cache)


def _side(group: Group, rows: pd.DataFrame, claim: Relation, cache: Sides | None = None
          ) -> Side | str:
    """The runs of one group, one per seed; or why there are none usable (text)."""
    label = ", ".join(f"{k}={config_text(v)}" for k, v in group) or "all"
    picked = rows[selects(rows, group)]
    if picked.empty:
        return f"no run has {label}"
    ambiguous = ambiguity(picked)
    if ambiguous:
        return f"{label}: {ambiguous}"
    return side_of(label, picked, claim, cache=cache)


def side_of(label: str, picked: pd.DataFrame, claim: Relation, rate: str = "lr × 1",
            cache: Sides | None = None, template: str = "", tuned: bool = False) -> Side:
    """The side of a group whose runs are ``picked`` (the seeds of one setting; none: a side
    at tuned values whose fresh seeds are not trained yet), with its settling
    (:func:`fednorm.results.settling`) where the metric is an accuracy; ``cache`` keeps the
    sides measured so far (claims share most of their sides)."""
    key = (tuple(sorted(picked["run_id"].unique())), label, claim.metric, claim.at, rate,
           template)
    if cache is not None and key in cache:
        return cache[key]
    side = _measured(label, picked, claim, rate)
    side = replace(side, template=template, tuned=tuned)
    if cache is not None:
        cache[key] = side
    return side


def _measured(label: str, picked: pd.DataFrame, claim: Relation, rate: str) -> Side:
    if picked.empty:
        return Side(label, pd.DataFrame({"diverged": pd.Series(dtype=bool),
                                         "value": pd.Series(dtype=float)}), picked, rate=rate)
    # the columns the values and the settling read (a summary has ~90: each filter copies all)
    slim = picked[[c for c in ("run_id", "seed", "step", "status", claim.metric,
                               "lr_milestones") if c in picked.columns]]
    values = run_values(slim, ["seed"], y=claim.metric, at=claim.at)
    if not percent(claim.metric):
        return Side(label, values.set_index("seed")[["diverged", "value"]], picked, rate=rate)
    values["value"] *= 100.0
    settle = settling(slim, y=claim.metric, at=claim.at).iloc[0]
    return Side(label, values.set_index("seed")[["diverged", "value"]], picked,
                100.0 * float(settle["gain"]), bool(settle["settled"]), rate)


def compares_methods(claim: Relation) -> bool:
    """Whether the claim's compared groups differ in their method (METHOD_KEYS)."""
    groups = (claim.a, claim.b, *claim.others)
    return any(key in METHOD_KEYS for group in groups for key, _ in group)


def _tuned(side: Side, tunings: Sequence[Tuning], claim: Relation,
           cache: Sides | None = None) -> tuple[Side, str, Side] | None:
    """``side`` at its method's own values: the tuning runs that equal its runs on every
    config key but TUNING_FREE (in the first tuning experiment that has them), at the values
    the tuning chose for them on held-out data and its tuning seeds
    (:func:`fednorm.tuning.choices`). Returns the side on the *fresh* seeds, those the choice
    never saw (no runs yet: the second stage trains them, fednorm.claims.stage2), the tuning
    experiment, and the side on the tuning seeds (what the choice saw: its winner's curse);
    None where no tuning experiment has such a cell."""
    first = side.rows.iloc[0]
    found = _tuning_cell(first, tunings)
    if found is None:
        return None
    name, rows = found
    over = tuned_keys(rows)
    choice = choices(rows, [], by=CHOSEN_BY, over=over)
    picked = at_choice(rows, choice, [], over)
    seen = picked["seed"].isin(set(rows.loc[tuning_seeds(rows, [], over), "seed"]))
    shown = swept(rows, over)  # the rate and each key swept in the cell
    tuned = [k for k in shown if rows[k].nunique(dropna=False) > 1]
    missing = [t.key for t in tunes_of(first["normalizer"], bool(first["feature_norm"]))
               if t.key not in tuned]
    tuned_seeds = sorted(set(picked.loc[seen, "seed"]))
    fresh_seeds = sorted(set(picked.loc[~seen, "seed"]))
    rate = (f"{chosen_text(choice.iloc[0], shown)} (chosen on seed"
            f"{'s' if len(tuned_seeds) > 1 else ''} {', '.join(map(str, tuned_seeds))}; "
            + (f"judged on {', '.join(map(str, fresh_seeds))})" if fresh_seeds
               else "no fresh seed yet)")
            + (f"; untuned: {', '.join(missing)}" if missing else ""))
    template = str(picked["run_id"].iloc[0])
    fresh = side_of(side.label, picked[~seen], claim, rate, cache, template, tuned=not missing)
    edges = edges_of(choice.iloc[0])
    if edges:
        rate += "; at the " + ", ".join(f"{s} edge of its {k} grid" for k, s in edges)
        fresh = replace(fresh, edge=True, edges=edges, rate=rate)
    return fresh, name, side_of(side.label, picked[seen], claim, rate, cache, template)


def edges_of(chosen: pd.Series) -> tuple[tuple[str, str], ...]:
    """(key, 'high' / 'low') for each key whose choice is the largest / smallest value its cell
    swept with a value beyond it (fednorm.tuning.choices' ``edge``, after the grid's one
    extension): the optimum may lie beyond."""
    marks = [e.split(":") for e in str(chosen.get("edge", "") or "").split(",") if e]
    return tuple((key, side) for key, side in marks)


CELL_KEYS = tuple(k for k in FIELDS if k not in TUNING_FREE)  # what a tuning cell shares


def _cell_key(values: pd.Series) -> tuple[str, ...]:
    """A run's cell in a tuning experiment: its CELL_KEYS as text, the same for a value however
    a frame holds it (NumPy or Python bools, ints or floats; null for None and NaN)."""
    return tuple(_key_text(values[k]) for k in CELL_KEYS)


def _key_text(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, numbers.Real):
        return "null" if math.isnan(value) else f"{float(value):.12g}"
    return "null" if value is None else str(value)


@dataclass(frozen=True)
class Tuning:
    """One tuning experiment's rows, indexed by cell (:func:`_cell_key` of each run)."""

    name: str
    rows: pd.DataFrame = field(repr=False)
    cells: dict[tuple[str, ...], pd.Index] = field(repr=False)

    @classmethod
    def of(cls, name: str, rows: pd.DataFrame) -> Tuning:
        runs = rows.drop_duplicates("run_id")
        by_run = {r: _cell_key(v) for r, (_, v) in zip(runs["run_id"], runs.iterrows(),
                                                          strict=True)}
        keys = rows["run_id"].map(by_run)
        return cls(name, rows, {k: part.index for k, part in rows.groupby(keys, sort=False)})


def _tuning_cell(first: pd.Series, tunings: Sequence[Tuning]
                 ) -> tuple[str, pd.DataFrame] | None:
    """The first tuning experiment's runs equal to the run ``first`` on every config key but
    TUNING_FREE, and its name; None where none has any."""
    key = _cell_key(first)
    for tuning in tunings:
        if key in tuning.cells:
            return tuning.name, tuning.rows.loc[tuning.cells[key]]
    return None


def _cells(axes: Sequence[str], rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) per combination of the ``axes``' values present in ``rows`` (each axis's
    values sorted); one cell of every row without axes."""
    cells = [("", rows)]
    for axis in axes:
        cells = [(", ".join(t for t in (label, f"{axis}={config_text(v)}") if t),
                  part[matches(part[axis], v)])
                 for label, part in cells for v in values_of(part[axis])]
    return cells


def _contrasts(claim: Relation, rows: pd.DataFrame, runs: pd.DataFrame
               ) -> list[tuple[str, tuple[Group, ...], tuple[float, ...]]]:
    """(label, groups, coefficients) per unit in ``rows`` (one cell of for_each): a pair is
    (better, worse) with (1, −1); a trend is one pair per adjacent step of its values in the
    claimed direction (``steps: neighbours``), its first and last (``ends``), or all its groups
    with the least-squares change from first to last (``slope``: :func:`trend_contrast`)."""
    if claim.kind == "trend":
        assert claim.over is not None
        xs = values_of(rows[claim.over])
        if claim.direction == "decreasing":
            xs = xs[::-1]
        if claim.steps == "ends":
            xs = [xs[0], xs[-1]]
        groups = tuple(((claim.over, x),) for x in xs)
        if claim.steps == "slope" and len(xs) > 2:
            return [(" → ".join(config_text(x) for x in xs), groups,
                     tuple(float(c) for c in trend_contrast(len(xs))))]
        # each step a pair, the later value (in the claimed direction) the better
        return [(f"{config_text(x)} → {config_text(y)}", (g_y, g_x), (1.0, -1.0))
                for x, y, g_x, g_y in zip(xs, xs[1:], groups, groups[1:], strict=False)]
    a = resolve(claim.a, runs)
    if claim.kind == "best":
        return [(f"vs {', '.join(f'{k}={config_text(v)}' for k, v in g)}", (a, resolve(g, runs)),
                 (1.0, -1.0)) for g in claim.others]
    return [("", (a, resolve(claim.b, runs)), (1.0, -1.0))]


def tunings_of(summary: pd.DataFrame, tuning: Sequence[str]) -> list[Tuning]:
    """The tuning experiments ``tuning`` of ``summary``, indexed by cell (none without a
    validation accuracy: nothing to choose on)."""
    if CHOSEN_BY not in summary.columns:
        return []
    return [Tuning.of(t, summary[in_experiments(summary, [t])]) for t in tuning]


def comparisons(claim: Relation, summary: pd.DataFrame, tuning: Sequence[str] = (),
                cache: Sides | None = None, tunings: Sequence[Tuning] | None = None
                ) -> list[Comparison]:
    """Every unit of ``claim`` on ``summary``, at each side's own values on fresh seeds where
    one of the experiments ``tuning`` chose them for every side (the common rate's unit in
    ``common``, the tuning seeds' in ``chosen``); ``tunings``: those experiments already
    indexed (:func:`tunings_of`)."""
    runs = summary[in_experiments(summary, claim.experiments)]
    if not compares_methods(claim):
        tunings = []
    elif tunings is None:
        tunings = tunings_of(summary, tuning)
    # ``where`` leaves the variant keys open: each group keeps its runs at their defaults
    # unless it names one (FedFN's side names feature_norm: true, its baseline's does not)
    rows = runs[selects(runs, resolve(claim.where, runs), variants=False)]
    out = []
    for cell, cell_rows in _cells(claim.for_each, rows):
        for label, groups, coefs in _contrasts(claim, cell_rows, runs):
            label = " ".join(t for t in (cell, label) if t)
            sides = [_side(g, cell_rows, claim, cache) for g in groups]
            problems = [s for s in sides if isinstance(s, str)]
            if problems:
                out.append(Comparison(label, reason="; ".join(problems)))
                continue
            measure = (claim.metric, claim.at)
            unit = Comparison(label, tuple(sides), coefs, claim.experiments, measure)
            if tunings:
                own = [_tuned(s, tunings, claim, cache) for s in sides]
                if all(o is not None for o in own):
                    pool = tuple(dict.fromkeys(o[1] for o in own if o is not None))
                    fresh = tuple(o[0] for o in own if o is not None)
                    seen = tuple(o[2] for o in own if o is not None)
                    unit = Comparison(label, fresh, coefs, pool, measure, common=unit,
                                      chosen=Comparison(label, seen, coefs, pool, measure))
                else:
                    missing = sides[own.index(None)].label
                    unit = replace(unit, note=f" (common: no tuning run at {missing})")
            out.append(unit)
    return out


def margins(unit: Comparison, within: bool) -> Margins:
    """Per seed that every side has: the contrast of its runs, or a seed for or against the
    claim where a run diverged (see the module's docstring)."""
    seeds = sorted(set(unit.sides[0].runs.index).intersection(
        *(s.runs.index for s in unit.sides[1:])))
    values, n_for, n_against = [], 0, 0
    for seed in seeds:
        rows = [s.runs.loc[seed] for s in unit.sides]
        dead = [bool(r["diverged"]) or math.isnan(r["value"]) for r in rows]
        diverged = [bool(r["diverged"]) for r in rows]
        if not any(dead):
            values.append(float(sum(c * r["value"] for c, r in zip(unit.coefs, rows,
                                                                    strict=True))))
        elif within or not unit.pair:
            n_against += any(diverged)
        elif diverged[0] and not dead[1]:
            n_against += 1
        elif diverged[1] and not dead[0]:
            n_for += 1
    return Margins(tuple(values), n_for, n_against)


def compare_all(words: Words, summary: pd.DataFrame) -> dict[str, list[Comparison]]:
    """Every claim's units on ``summary`` (claim id -> its units), each side measured once."""
    cache: Sides = {}
    tunings = tunings_of(summary, words.tuning)
    return {c.id: comparisons(c, summary, cache=cache, tunings=tunings) for c in words.claims}
