"""Each method at its own hyperparameters, chosen on data held out of the training set.

One learning rate for every method misleads: a method whose best step size differs from the
common recipe's looks worse than it is (the Hybrid BN authors warn of it; FBN barely learns at
the FixBN recipe's step size on the quick digits), and so does a method run at a key chosen for
another regime (FedWon's clipping λ, chosen by NFNets for batches of 4,096). So a tuning
experiment (``tune: true``, fednorm.plan.experiments) trains every method at several
``lr_scale`` factors jointly with the keys its record tunes (fednorm.methods.Tune), with
``val_fraction`` of the training images held out (fednorm.data.arrays.hold_out, stratified by
class and domain, scored as the test is: fednorm.fl.train), and :func:`choices` keeps, per cell
of a table, the combination whose final validation accuracy is best.

- The choice reads the validation column alone, on the seeds that every combination of its
  cell has (the *tuning seeds*); a run of another seed at the chosen values (the claims' second
  stage trains the chosen values on fresh seeds: fednorm.claims.stage2) never moves it, and
  only those fresh seeds judge a claim (fednorm.claims.verdicts): the choice's own seeds carry
  its winner's curse.
- A null tuned value (FedWon's λ: no clipping) is the limit λ → ∞ (:data:`NONE`).
- A choice at the largest or smallest value of a numeric key's sweep is marked (``edge``) where
  the key goes on beyond it (:func:`beyond`: one more geometric step is a value its rule
  allows): the best may lie beyond, so the claims' tuning checkpoint trains that value on the
  tuning seeds once (fednorm.claims.extension) before the fresh seeds train; a choice still at
  an edge of the extended grid stays marked. An end at a natural bound (λ none: no clipping;
  a smoothing of 1: none) is no edge: nothing lies beyond it.

The choice decides verdicts (fednorm.claims), so nothing here draws: the tuning table is
fednorm.figures'.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import pandas as pd

from fednorm.config import _RULES, RunConfig
from fednorm.methods import KEY, RATE, SYMBOLS, TUNED_KEYS
from fednorm.results import matches, seed_stats

OVER = RATE  # the hyper-parameter every method tunes
NONE = math.inf  # a null tuned value: no clipping is the limit of λ → ∞
EDGES = {"high": "↑", "low": "↓"}  # a choice at the largest / smallest value swept
COMMON = 1.0  # the lr_scale of the common recipe: every method at the recipe's own schedule


def tuned_keys(rows: pd.DataFrame) -> list[str]:
    """The tuned keys (fednorm.methods.TUNED_KEYS) that ``rows`` has as columns."""
    return [k for k in TUNED_KEYS if k in rows.columns]


def filled(rows: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """``rows`` with a null in a numeric tuned key read as :data:`NONE`."""
    out = rows.copy()
    for key in keys:
        if pd.api.types.is_numeric_dtype(out[key]) or out[key].isna().all():
            out[key] = pd.to_numeric(out[key]).fillna(NONE)
    return out


def _cell_ids(rows: pd.DataFrame, cells: Sequence[str]) -> pd.Series:
    """One label per cell (the ``cells`` columns' values together); one cell without any."""
    if not cells:
        return pd.Series("", index=rows.index)
    return rows[list(cells)].map(str).agg("\x1f".join, axis=1)


def tuning_seeds(rows: pd.DataFrame, cells: Sequence[str], over: Sequence[str]) -> pd.Series:
    """Per row, whether its seed is one that every swept combination of ``over`` in its cell
    has: the seeds a choice is made on (a seed added at one combination never moves it)."""
    cell = _cell_ids(rows, cells)
    combo = _cell_ids(rows, over)
    seeds = pd.DataFrame({"cell": cell, "combo": combo, "seed": rows["seed"]})
    per_combo = seeds.groupby(["cell", "combo"])["seed"].agg(frozenset)
    common = per_combo.groupby(level="cell").agg(lambda s: frozenset.intersection(*s))
    return pd.Series([s in common[c] for c, s in zip(cell, rows["seed"], strict=True)],
                     index=rows.index)


def choices(rows: pd.DataFrame, cells: Sequence[str], by: str = "val_accuracy",
            over: Sequence[str] | None = None) -> pd.DataFrame:
    """Per combination of the ``cells`` columns: the combination of the ``over`` values
    (default: every tuned key the rows have) whose runs' final ``by``
    (fednorm.results.run_values), averaged over the cell's tuning seeds (:func:`tuning_seeds`),
    is highest. A combination with a diverged run (status ``diverged``) or without any ``by``
    is never chosen over one without; ties go to the smaller values, key by key. Only ``by``
    is read among the metrics. Returns the ``cells`` and ``over`` columns (a null as
    :data:`NONE`), ``score`` (the mean ``by``; -inf: ruled out), ``n_seeds`` and ``edge``:
    per numeric key with two values or more in the cell, 'key:high' / 'key:low' when the
    choice is its largest / smallest, joined by ','."""
    cells = list(cells)
    over = tuned_keys(rows) if over is None else list(over)
    rows = filled(rows, over)
    rows = rows[tuning_seeds(rows, cells, over)]
    stats = seed_stats(rows, [*cells, *over], y=by)
    ruled_out = (stats["n_diverged"] > 0) | (stats["n_seeds"] == 0)
    stats["score"] = stats["mean"].where(~ruled_out, float("-inf"))
    best = stats.sort_values([*cells, "score", *over],
                             ascending=[True] * len(cells) + [False] + [True] * len(over),
                             kind="stable")
    group = (lambda f: f.groupby(cells, sort=False, dropna=False)) if cells else None
    best = group(best).head(1) if group else best.head(1)
    best = best[[*cells, *over, "score", "n_seeds"]].reset_index(drop=True)
    best["edge"] = [_edges(stats, cells, over, choice) for _, choice in best.iterrows()]
    return best


def _edges(stats: pd.DataFrame, cells: Sequence[str], over: Sequence[str],
           choice: pd.Series) -> str:
    """The numeric keys whose choice is at an end of its cell's sweep with a value beyond it
    (:func:`beyond`): 'key:high,key:low'."""
    mine = in_cell(stats, cells, choice)
    out = []
    for key in over:
        values = mine[key]
        if not pd.api.types.is_numeric_dtype(values) or values.nunique() < 2:
            continue
        for side, end in (("high", values.max()), ("low", values.min())):
            if choice[key] == end and beyond(key, values, side) is not None:
                out.append(f"{key}:{side}")
    return ",".join(out)


def beyond(key: str, values: Sequence[float] | pd.Series, side: str) -> float | None:
    """The value one step beyond the ``side`` ('high' / 'low') end of a numeric key's sweep
    ``values``, in the sweep's own geometric step: the end times the ratio of the two outermost
    finite values on that side (the rates' grids, built by × 4, extend by × 4 or ÷ 4). None
    where nothing lies beyond: an end at :data:`NONE` (λ none, the limit), fewer than two
    positive finite values, or a value the key's rule does not allow (a smoothing above 1)."""
    finite = sorted({float(v) for v in values if math.isfinite(float(v)) and float(v) > 0})
    if len(finite) < 2 or (side == "high" and max(float(v) for v in values) == NONE):
        return None
    if side == "high":
        value = finite[-1] * finite[-1] / finite[-2]
    else:
        value = finite[0] * finite[0] / finite[1]
    rule = _RULES[key] if key in _RULES else KEY[key].rule
    return value if rule(value) is None else None


def value_words(value: object) -> str:
    if value is None or value == NONE or (isinstance(value, float) and math.isnan(value)):
        return "none"
    return f"{value:g}" if isinstance(value, numbers.Real) and not isinstance(value, bool) else (
        str(value))


def chosen_text(choice: pd.Series | dict, over: Sequence[str]) -> str:
    """A choice in words, each key's edge marked: 'lr × 4↑, λ 0.16' (NONE: 'none')."""
    edges = dict(e.split(":") for e in str(choice.get("edge", "") or "").split(",") if e)
    return ", ".join(f"{SYMBOLS[k]} {value_words(choice[k])}{EDGES.get(edges.get(k, ''), '')}"
                     for k in over)


def swept(rows: pd.DataFrame, over: Sequence[str]) -> list[str]:
    """The keys of ``over`` that ``rows`` sweep (two values or more), the rate always."""
    return [k for k in over if k == OVER or rows[k].nunique(dropna=False) > 1]


def grid_text(rows: pd.DataFrame, over: Sequence[str]) -> str:
    """The values a cell swept, key by key: 'lr × 1, 4; λ 0.01 … 1.28, none (9)'."""
    rows = filled(rows, over)
    parts = []
    for key in over:
        values = sorted(rows[key].unique())
        if len(values) < 2:
            continue
        words = [value_words(v) for v in values]
        text = ", ".join(words) if len(words) <= 3 else f"{words[0]} … {words[-1]} ({len(words)})"
        parts.append(f"{SYMBOLS[key]} {text}")
    return "; ".join(parts) or "–"


def at_choice(rows: pd.DataFrame, chosen: pd.DataFrame, cells: Sequence[str],
              over: Sequence[str]) -> pd.DataFrame:
    """The rows (every evaluation point, every seed) of the runs at each cell's choice."""
    keys = [*cells, *over]
    rows = rows.reset_index(drop=True)
    full = filled(rows, over)
    kept = full.reset_index().merge(chosen[keys], on=keys, how="inner")["index"]
    return rows.loc[sorted(kept)]


def select_by_validation(rows: pd.DataFrame, cells: Sequence[str], by: str = "val_accuracy",
                         over: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows (every evaluation point) of the runs at each cell's chosen values
    (:func:`choices`)."""
    over = tuned_keys(rows) if over is None else list(over)
    return at_choice(rows, choices(rows, cells, by, over), cells, over)


def at_common(rows: pd.DataFrame, over: Sequence[str], common: float = COMMON) -> pd.DataFrame:
    """The rows at the common recipe: ``lr_scale`` = ``common`` and every other tuned key at
    its default (FedWon's λ 0.01)."""
    mask = matches(rows[OVER], common)
    for key in over:
        if key != OVER:
            mask &= matches(rows[key], getattr(RunConfig, key))
    return rows[mask]


def in_cell(rows: pd.DataFrame, cells: Sequence[str], choice: pd.Series) -> pd.DataFrame:
    mask = pd.Series(True, index=rows.index)
    for c in cells:
        mask &= matches(rows[c], choice[c])
    return rows[mask]
