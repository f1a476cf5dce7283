"""Qualitative claims: what the papers state in words, judged on our runs with the seed noise.

The claims file's section ``qualitative:`` (beside the numeric ``claims:`` of
:mod:`fednorm.claims.numbers`)::

    qualitative:
      single_seed_spread: 5          # points: the spread assumed when a margin has one seed
      min_spread: 5                  # points: the least spread a sign relation takes (0)
      diverged_seeds: 2              # seeds whose diverged runs alone decide (2)
      family_wise: true              # a claim of k units: its contradicting unit must pass
                                     # a bar raised for k chances (false)
      tuning: tuning                 # optional: the experiment that chooses each method's lr
                                     # (the default; null: every claim at the common rate)
      claims:
        - id: fixbn-s4-gn-falls-with-E       # unique; names the claim in every message
          paper: fixbn                       # a key of fednorm.claims.PAPERS
          source: "§9, (a) fixed 128 epochs" # the section, figure or table
          words: "... in which GN degrades monotonically ..."   # the paper's sentence, quoted
          experiment: fixbn_epochs           # a name or a list: the runs it is judged on
          where: {partition: shards, normalizer: gn}  # keys every compared run has
          relation: trend                    # greater | best | within | trend
          over: local_steps                  # trend: the axis, ...
          direction: decreasing              # ... and the way the value goes along it
          steps: neighbours                  # trend, optional: neighbours | ends
          for_each: split                    # optional: the relation holds at each value
                                             # (a list of columns: at each combination)
          metric: test_accuracy              # optional, a summary metric (the default)
          at: final                          # optional: final | max (the best point)
          note: ""                           # optional

A *group* (``where``, ``a``, ``b``, each of ``others``) maps summary columns (RunConfig keys and
``scenario``, ``split``, ``regime``) to one value each; ``min`` / ``max`` on a numeric column
is the smallest / largest value that column takes among the experiment's runs (``local_steps:
max`` is E = 2500 at paper scale, 25 in the quick profile). The relations, each a *margin*
per seed that the claim says is positive (in points for an accuracy):

- ``greater``: ``a`` − ``b`` > −slack (``slack`` optional, default 0);
- ``best``: ``a`` − max(each of ``others``) > −slack (a ranking: a above every other);
- ``trend``: along ``over`` (its values sorted), each neighbour pair moves the claimed way
  (``direction``: increasing | decreasing): the larger (or smaller) value's run − the
  other's > −slack; ``steps: ends`` compares only the smallest value with the largest (a
  paper that says "falls as E grows" without "monotonically");
- ``within``: |``a`` − ``b``| ≤ ``delta`` (points): near-equality.

A *unit* is one comparison: one value of ``for_each`` (all of them when it is absent) and, for
a trend, one neighbour pair. Its runs are paired **by seed** (the same seed is the same
partition and initialization stream), so the margin m_s of seed s is a difference of two runs
that share their randomness. Verdict of a unit, with mean m̄ and spread σ (the std of the m_s,
ddof 1; with a single seed σ is unknown and ``single_seed_spread`` stands in, and the detail
says '1 seed'):

- sign relations: ``holds`` when m̄ > σ and every m_s > 0; ``contradicted`` when m̄ < −σ and
  every m_s < 0; else ``inconclusive`` (the margin is within the seed noise, or the seeds
  disagree). Here σ is taken at least ``min_spread`` (default 0): two or three seeds' std is
  often far below the true spread (with two seeds, under 0.3 of it a quarter of the time), so
  a margin of a few points on two seeds that happen to agree is no verdict;
- ``within``: ``holds`` when |m̄| + σ ≤ δ; ``contradicted`` when |m̄| − σ > δ; else
  ``inconclusive``. Where |m̄| > δ, σ is taken at least ``min_spread`` (a gap beyond δ is a
  sign); holding keeps the seeds' own σ, which a floor would make unreachable for every δ
  below it;
- ``not run``: a compared group has no run in the summary.

**A diverged run** (status ``diverged``) has no value: it is left out of the means and counted
in the detail. In a sign relation a diverged run on the side the claim says is better is a seed
*against* the claim (the claim cannot hold; it is contradicted when every seed is against it),
and a diverged run on the other side is a seed *for* it (it cannot be contradicted); when every
run of one side diverged the seed counts for the side that did not. Diverged runs alone (no seed
with a margin) make a verdict only from ``diverged_seeds`` (2) on: one is one draw (FBN under an
undefended sign flip diverges or falls to chance on some quick seeds and trains on others).
In ``within`` a diverged run on either side is a seed against equality.

**A claim of several units** (``family_wise: true``) is contradicted by one of them, so it has
k chances to be contradicted by the noise alone where a one-unit claim has one: with two seeds
and a true margin of zero, m̄ < −σ happens with probability α = Φ(−√2) = 7.9 % (m̄'s std is
σ/√2), and a claim of 10 such units would be contradicted 56 % of the time. So a unit of a
claim with k units contradicts only beyond the bar b_k σ (:func:`family_bar`: b_k =
z(α/k) / z(α), Bonferroni: k chances at α/k each; b_1 = 1, b_3 = 1.37, b_10 = 1.71), in the
sign relations (m̄ < −b_k σ) and in ``within`` (|m̄| − b_k σ > δ); a unit that would
contradict alone but not beyond the bar is ``inconclusive`` and its detail says so (diverged
runs alone, with no margin to raise, keep their rule). ``holds``
needs every unit to hold, which k units make harder, not easier: its rule is unchanged.

**Settled runs** (:func:`fednorm.results.settling`): a group has settled when its accuracy
``at`` the end gains at most max(1 point, its seed spread) over the last quarter of its budget.
A unit's verdict rests on the sides behind having settled (:func:`_behind`: ``holds``, the
worse sides; ``contradicted``, the side the claim says is better; ``within`` that holds, both);
where one has not, the unit is ``inconclusive`` and its detail names the group, its gain and
the verdict it would have had. Trends too: each compares final accuracies along an axis.

**Each method at its own rate**: a claim whose compared groups name a METHOD_KEYS key is judged,
unit by unit, on the ``tuning`` experiment's runs at each side's ``lr_scale`` chosen on
validation accuracy (:func:`fednorm.tuning.choices`), where every side of the unit has a tuning
cell (its runs' config but for TUNING_FREE); else at the common rate, said in ``rates``. The
common rate's outcome stays in the detail.

A claim's verdict: ``not run`` when no unit has runs; ``inconclusive`` (refused) when a group's
runs differ in more than their seed (the reason names the keys the claim should add: a user may
widen a grid, so this is no plan-time error); else ``contradicted`` when any unit is, ``holds``
when every unit holds (and none is not run), ``inconclusive`` otherwise. The ledger row shows
the deciding unit's margin ± spread: the weakest of the claim's units (the smallest m̄ − σ; for
``within`` the largest |m̄| + σ), or the contradicting unit with the most negative m̄ + σ.

Checked at the door (:func:`parse_words`, then :func:`check_plan` when
:func:`fednorm.claims.load_claims` is given the plan): unknown or missing keys, a relation that
is not one of the kinds, keys of another kind, an unknown experiment, a column the summary does
not have, a value no run of the experiment has, ``min`` / ``max`` on a column that is not
numeric, an axis (``over``, ``for_each``) that takes a single value in the experiment: each a
ConfigError naming the claim, the key, the value and what is allowed.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fednorm.claims.common import PAPERS, ambiguity, config_text, selects
from fednorm.config import FIELDS, Boolean, ConfigError, Finite, IntIn, OneOf, check, fail
from fednorm.io import write_csv, write_text
from fednorm.plan import COLUMNS, FIGURE_METRICS, Plan
from fednorm.plots.cells import DIVERGED_MARK, percent, value_label
from fednorm.plots.save import PNG_DPI, save_together
from fednorm.plots.table import escape_cell
from fednorm.results import AT, in_experiments, matches, run_values, settling, values_of
from fednorm.summarize import config_columns
from fednorm.tuning import OVER, choices

HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_RUN = "holds", "contradicted", "inconclusive", "not run"
VERDICTS = (HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_RUN)
RELATIONS = ("greater", "best", "trend", "within")
DIRECTIONS = ("increasing", "decreasing")
SYMBOLIC = ("min", "max")
SINGLE_SEED_SPREAD = 5.0  # points, when the file does not say
MIN_SPREAD = 0.0  # points: the least spread of a sign relation, when the file does not say
DIVERGED_SEEDS = 2  # seeds whose diverged runs alone make a firm verdict (one is one draw)
TUNING = "tuning"  # the experiment whose learning rates, chosen on held-out data, method claims use
SECTION = "qualitative"
SECTION_KEYS = ("claims", "single_seed_spread", "min_spread", "diverged_seeds", "family_wise",
                "tuning")
# A unit's chance of contradicting a claim by noise alone (two seeds, a true margin of zero:
# m̄ < −σ where m̄'s std is σ/√2), which family_bar keeps for a claim of k units
FAMILY_ALPHA = NormalDist().cdf(-math.sqrt(2))
# A claim compares methods when its compared groups name one of these keys
METHOD_KEYS = ("normalizer", "feature_norm")
# The keys on which a run and its tuning cell may differ: the seed, the rate chosen and the
# held-out images the choice needs (paper scale: the comparison trains on every image)
TUNING_FREE = ("seed", OVER, "val_fraction")
CHOSEN_BY = "val_accuracy"  # the tuning's choice reads the held-out images alone
_REQUIRED = ("id", "paper", "source", "words", "experiment", "relation")
_OPTIONAL = {"where": {}, "for_each": None, "slack": 0.0, "metric": "test_accuracy",
             "at": "final", "note": ""}
_KIND_KEYS = {"greater": ("a", "b"), "best": ("a", "others"), "trend": ("over", "direction"),
              "within": ("a", "b", "delta")}
_KIND_OPTIONAL = {"greater": ("slack",), "best": ("slack",), "trend": ("slack", "steps"),
                  "within": ()}
STEPS = ("neighbours", "ends")

Group = tuple[tuple[str, Any], ...]  # column -> a value, or 'min' / 'max'


@dataclass(frozen=True)
class Relation:
    """One qualitative claim: a relation between groups of runs of some experiments."""

    id: str
    paper: str
    source: str
    words: str
    experiments: tuple[str, ...]
    kind: str
    where: Group = ()
    a: Group = ()
    b: Group = ()
    others: tuple[Group, ...] = ()
    over: str | None = None
    direction: str | None = None
    steps: str = "neighbours"
    for_each: tuple[str, ...] = ()
    delta: float | None = None
    slack: float = 0.0
    metric: str = "test_accuracy"
    at: str = "final"
    note: str = ""

    def groups(self) -> tuple[Group, ...]:
        """Every group the claim names (``where`` first)."""
        return (self.where, self.a, self.b, *self.others)


@dataclass(frozen=True)
class Noise:
    """How a verdict reads the seed noise (the qualitative section's keys of the same names)."""

    single_seed_spread: float = SINGLE_SEED_SPREAD  # the spread assumed with one seed
    min_spread: float = MIN_SPREAD  # the least spread a sign relation takes
    diverged_seeds: int = DIVERGED_SEEDS  # seeds whose diverged runs alone decide
    family_wise: bool = False  # a claim of k units contradicts only beyond family_bar(k) σ


@dataclass(frozen=True)
class Words:
    """The qualitative section of a claims file."""

    claims: tuple[Relation, ...] = ()
    noise: Noise = Noise()
    tuning: str | None = TUNING  # None: every claim at the common recipe's learning rate


# ---------------------------------------------------------------------------------------------
# Reading and checking.


def _text(where: str, key: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str) or not (empty or value):
        raise fail(where, key, value, "text" if empty else "a non-empty text")
    return value


def _group(where: str, key: str, value: Any) -> Group:
    """A mapping of summary columns to single values ('min'/'max' allowed), as pairs."""
    if not isinstance(value, Mapping) or (key != "where" and not value):
        raise fail(where, key, value, "a mapping of summary columns to values"
                   + ("" if key == "where" else " (at least one)"))
    for column, one in value.items():
        if column not in COLUMNS:
            raise ConfigError(f"{where}, {key}: unknown key '{column}'; allowed keys: "
                              f"{list(COLUMNS)}")
        if not (one is None or isinstance(one, str | numbers.Real)):
            raise fail(f"{where}, {key}", column, one, "a single value (text, number, true/"
                       "false, null) or 'min'/'max'")
    return tuple(value.items())


def _axis(where: str, key: str, value: Any) -> str | None:
    if value not in COLUMNS:
        raise fail(where, key, value, f"a summary column: one of {list(COLUMNS)}")
    return value


def _axes(where: str, value: Any) -> tuple[str, ...]:
    """``for_each``: a column or a list of them (none: null)."""
    names = [] if value is None else value if isinstance(value, list) and value else [value]
    for name in names:
        if not isinstance(name, str) or name not in COLUMNS:
            raise fail(where, "for_each", value, f"a summary column or a list of them: "
                       f"{list(COLUMNS)}")
    return tuple(names)


def _experiments(where: str, value: Any) -> tuple[str, ...]:
    names = value if isinstance(value, list) and value else [value]
    if not all(isinstance(n, str) and n for n in names):
        raise fail(where, "experiment", value, "an experiment's name or a list of them")
    return tuple(dict.fromkeys(names))


def parse_relation(spec: Any, index: int) -> Relation:
    """One entry of ``qualitative.claims``, checked; errors name the claim's id (or index)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{SECTION}.claims[{index}]: expected a mapping of claim keys, got "
                          f"{spec!r}")
    named = isinstance(spec.get("id"), str) and spec["id"]
    where = f"{SECTION}: claim '{spec['id']}'" if named else f"{SECTION}.claims[{index}]"
    kind = spec.get("relation")
    allowed = [*_REQUIRED, *_OPTIONAL,
               *dict.fromkeys(k for keys in _KIND_KEYS.values() for k in keys), "steps"]
    for key in spec:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key '{key}'; allowed keys: {allowed}")
    missing = [k for k in _REQUIRED if k not in spec]
    if missing:
        raise ConfigError(f"{where}: key '{missing[0]}' is missing; a claim needs {_REQUIRED}")
    check(where, "relation", kind, OneOf(RELATIONS))
    own = (*_REQUIRED, *_OPTIONAL, *_KIND_KEYS[kind], *_KIND_OPTIONAL[kind])
    for key in spec:
        if key not in own or (key == "slack" and key not in _KIND_OPTIONAL[kind]):
            raise ConfigError(f"{where}: key '{key}' is not a key of relation '{kind}'; its "
                              f"keys: {[*_KIND_KEYS[kind], *_KIND_OPTIONAL[kind]]}")
    absent = [k for k in _KIND_KEYS[kind] if k not in spec]
    if absent:
        raise ConfigError(f"{where}: key '{absent[0]}' is missing; relation '{kind}' needs "
                          f"{list(_KIND_KEYS[kind])}")
    f = {**_OPTIONAL, **spec}
    others = f.get("others", [])
    if kind == "best" and (not isinstance(others, list) or not others):
        raise fail(where, "others", others, "a non-empty list of groups (mappings)")
    return Relation(
        id=_text(where, "id", f["id"]),
        paper=check(where, "paper", f["paper"], OneOf(tuple(PAPERS))),
        source=_text(where, "source", f["source"]),
        words=_text(where, "words", f["words"]),
        experiments=_experiments(where, f["experiment"]),
        kind=kind,
        where=_group(where, "where", f["where"]),
        a=_group(where, "a", f["a"]) if "a" in f else (),
        b=_group(where, "b", f["b"]) if "b" in f else (),
        others=tuple(_group(where, f"others[{i}]", g) for i, g in enumerate(others)),
        over=_axis(where, "over", f["over"]) if kind == "trend" else None,
        direction=(check(where, "direction", f["direction"], OneOf(DIRECTIONS))
                   if kind == "trend" else None),
        steps=check(where, "steps", f.get("steps", "neighbours"), OneOf(STEPS)),
        for_each=_axes(where, f["for_each"]),
        delta=float(check(where, "delta", f["delta"], Finite(0))) if kind == "within" else None,
        slack=float(check(where, "slack", f["slack"], Finite(0))),
        metric=check(where, "metric", f["metric"], OneOf(FIGURE_METRICS)),
        at=check(where, "at", f["at"], OneOf(tuple(AT))),
        note=_text(where, "note", f["note"], empty=True),
    )


def parse_words(spec: Any) -> Words:
    """The ``qualitative`` section (None: no qualitative claims), checked."""
    if spec is None:
        return Words()
    if not isinstance(spec, Mapping):
        raise fail("claims file", SECTION, spec, "a mapping with 'claims' (and "
                   "'single_seed_spread')")
    for key in spec:
        if key not in SECTION_KEYS:
            raise ConfigError(f"{SECTION}: unknown key '{key}'; allowed keys: "
                              f"{list(SECTION_KEYS)}")
    tuning = spec.get("tuning", TUNING)
    if tuning is not None:
        _text(SECTION, "tuning", tuning)
    entries = spec.get("claims")
    if not isinstance(entries, list) or not entries:
        raise fail(SECTION, "claims", entries, "a non-empty list of claims")
    claims = tuple(parse_relation(entry, i) for i, entry in enumerate(entries))
    ids = [c.id for c in claims]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise fail(SECTION, "id", twice[0], "an id no other qualitative claim has")
    spread = spec.get("single_seed_spread", SINGLE_SEED_SPREAD)
    least = spec.get("min_spread", MIN_SPREAD)
    diverged = spec.get("diverged_seeds", DIVERGED_SEEDS)
    noise = Noise(float(check(SECTION, "single_seed_spread", spread, Finite(0))),
                  float(check(SECTION, "min_spread", least, Finite(0))),
                  check(SECTION, "diverged_seeds", diverged, IntIn(1)),
                  check(SECTION, "family_wise", spec.get("family_wise", False), Boolean()))
    return Words(claims, noise, tuning)


def planned_runs(plan: Plan) -> pd.DataFrame:
    """The plan's runs as the summary's columns (one row each, no metric), with their
    ``figure_group``: what a claim selects from, before any run exists."""
    return pd.DataFrame([{**config_columns(cfg), "run_id": run_id,
                          "figure_group": plan.groups(run_id)}
                         for run_id, cfg in plan.runs.items()])


def _numeric(column: pd.Series) -> bool:
    present = column.dropna()
    return not present.empty and pd.api.types.is_numeric_dtype(present.infer_objects())


def resolve(group: Group, runs: pd.DataFrame) -> Group:
    """``group`` with 'min' / 'max' replaced by the smallest / largest value of its column
    among ``runs`` (the experiment's runs)."""
    out = []
    for key, value in group:
        if value in SYMBOLIC and _numeric(runs[key]):
            numbers_ = pd.to_numeric(runs[key], errors="coerce").dropna()
            value = float(numbers_.min() if value == "min" else numbers_.max())
        out.append((key, value))
    return tuple(out)


def check_relation(claim: Relation, runs: pd.DataFrame, experiments: Sequence[str]) -> None:
    """Check one claim against the planned runs (:func:`planned_runs`)."""
    where = f"{SECTION}: claim '{claim.id}'"
    for name in claim.experiments:
        if name not in experiments:
            raise fail(where, "experiment", name, f"one of {list(experiments)}")
    rows = runs[in_experiments(runs, claim.experiments)]
    names = ["where", "a", "b", *(f"others[{i}]" for i in range(len(claim.others)))]
    for name, group in zip(names, claim.groups(), strict=False):
        for key, value in group:
            present = values_of(rows[key])
            if value in SYMBOLIC and not _numeric(rows[key]):
                raise fail(f"{where}, {name}", key, value, f"a value the experiment has "
                           f"({present}); 'min'/'max' only on a numeric column")
            if value not in SYMBOLIC and not matches(rows[key], value).any():
                raise fail(f"{where}, {name}", key, value, f"a value the experiment has "
                           f"({present}), or 'min'/'max' on a numeric column")
    axes = [("over", claim.over)] if claim.over else []
    for key, axis in [*axes, *(("for_each", a) for a in claim.for_each)]:
        if rows[axis].nunique(dropna=False) < 2:
            varying = [k for k in COLUMNS if k != "seed" and rows[k].nunique(dropna=False) > 1]
            raise fail(where, key, axis, f"an axis of the experiment's grid: one of {varying}")


def check_plan(words: Words, plan: Plan) -> None:
    """Every qualitative claim against the plan's experiments and their runs; a claim whose
    experiments an override dropped (set to null: ``Plan.dropped``) all is left unchecked (its
    verdict: not run)."""
    if not words.claims:
        return
    runs = planned_runs(plan)
    for claim in words.claims:
        if not set(claim.experiments) <= plan.dropped:
            check_relation(claim, runs, list(plan.experiments))


# ---------------------------------------------------------------------------------------------
# Judging: paired margins per unit, a verdict per unit, one per claim.


@dataclass(frozen=True)
class Unit:
    """One comparison of a claim and its outcome."""

    label: str  # the for_each value and/or the trend's pair, '' for the only one
    verdict: str
    values: str = ""  # each group's mean over its seeds, in words
    mean: float = math.nan  # the margin, mean over seeds
    spread: float = math.nan  # std over seeds (ddof 1), or the single-seed floor
    n_seeds: int = 0  # seeds with a margin
    n_for: int = 0  # seeds whose only value is a diverged run on the worse side
    n_against: int = 0  # seeds with a diverged run on the better side (within: either side)
    n_diverged: int = 0  # diverged runs in all
    reason: str = ""
    settled: bool | None = None  # every group settled (None: no accuracy measured)
    unsettled: str = ""  # the groups still climbing and what that does to the verdict
    rates: str = ""  # the learning rate each side used
    common: str = ""  # at tuned rates: the outcome at the common recipe's rate
    family: str = ""  # a unit that contradicts alone but not beyond its claim's family bar

    def weakness(self, within: bool) -> float:
        """How near the unit is to failing: larger is weaker."""
        if math.isnan(self.mean):
            return math.inf
        return abs(self.mean) + self.spread if within else self.spread - self.mean


@dataclass(frozen=True)
class _Side:
    label: str
    runs: pd.DataFrame = field(repr=False)  # seed, diverged, value (in points)
    rows: pd.DataFrame = field(repr=False)  # its summary rows
    gain: float = math.nan  # points the seed mean gained over the last quarter of its budget
    settled: bool | None = None  # None: not an accuracy (the rule is on accuracies)
    rate: str = "lr × 1"  # its learning rate: the recipe's times lr_scale

    @property
    def mean(self) -> float:
        return float(self.runs["value"].mean())


def _side(group: Group, rows: pd.DataFrame, claim: Relation) -> _Side | str:
    """The runs of one group, one per seed; or why there are none usable (text)."""
    label = ", ".join(f"{k}={config_text(v)}" for k, v in group) or "all"
    picked = rows[selects(rows, group)]
    if picked.empty:
        return f"no run has {label}"
    ambiguous = ambiguity(picked)
    if ambiguous:
        return f"{label}: {ambiguous}"
    return _side_of(label, picked, claim)


def _side_of(label: str, picked: pd.DataFrame, claim: Relation, rate: str = "lr × 1") -> _Side:
    """The side of a group whose runs are ``picked`` (the seeds of one setting), with its
    settling (:func:`fednorm.results.settling`) where the metric is an accuracy."""
    values = run_values(picked, ["seed"], y=claim.metric, at=claim.at)
    if not percent(claim.metric):
        return _Side(label, values.set_index("seed")[["diverged", "value"]], picked, rate=rate)
    values["value"] *= 100.0
    settle = settling(picked, y=claim.metric, at=claim.at).iloc[0]
    return _Side(label, values.set_index("seed")[["diverged", "value"]], picked,
                 100.0 * float(settle["gain"]), bool(settle["settled"]), rate)


def compares_methods(claim: Relation) -> bool:
    """Whether the claim's compared groups differ in their method (METHOD_KEYS)."""
    groups = (claim.a, claim.b, *claim.others)
    return any(key in METHOD_KEYS for group in groups for key, _ in group)


def _tuned(side: _Side, tuning: pd.DataFrame, claim: Relation) -> _Side | None:
    """``side`` at its method's own learning rate: the tuning runs that equal its runs on
    every config key but TUNING_FREE, at the lr_scale the tuning chose for them on held-out
    data (:func:`fednorm.tuning.choices`); None where the tuning has no such cell."""
    first = side.rows.iloc[0]
    cell = pd.Series(True, index=tuning.index)
    for key in (k for k in FIELDS if k not in TUNING_FREE):
        value = first[key]
        cell &= tuning[key].isna() if pd.isna(value) else matches(tuning[key], value)
    rows = tuning[cell]
    if rows.empty:
        return None
    choice = choices(rows.assign(tuning_cell=0), ["tuning_cell"], by=CHOSEN_BY).iloc[0]
    edge = {"high": "↑", "low": "↓"}.get(choice["edge"], "")
    rate = f"lr × {choice[OVER]:g}{edge} (chosen)"
    return _side_of(side.label, rows[matches(rows[OVER], choice[OVER])], claim, rate)


def _values_text(sides: Sequence[_Side]) -> str:
    parts = []
    for side in sides:
        diverged = int(side.runs["diverged"].sum())
        mean = side.runs["value"].mean()
        text = "–" if math.isnan(mean) else f"{mean:.1f}"
        parts.append(f"{side.label}: {text}" + (f" {DIVERGED_MARK}{diverged}" if diverged else ""))
    return "; ".join(parts)


def _margins(better: _Side, worse: Sequence[_Side], within: bool
             ) -> tuple[list[float], int, int]:
    """Per seed of both sides: the margins, the seeds for and against (diverged runs)."""
    seeds = sorted(set(better.runs.index).intersection(*(w.runs.index for w in worse)))
    margins, n_for, n_against = [], 0, 0
    for seed in seeds:
        b = better.runs.loc[seed]
        others = [w.runs.loc[seed] for w in worse]
        alive = [o["value"] for o in others if not o["diverged"] and not math.isnan(o["value"])]
        if within and (b["diverged"] or any(o["diverged"] for o in others)):
            n_against += 1
        elif b["diverged"]:
            n_against += 1 if alive else 0
        elif not alive:
            n_for += 1 if any(o["diverged"] for o in others) else 0
        elif not math.isnan(b["value"]):
            margins.append(float(b["value"] - max(alive)))
    return margins, n_for, n_against


def unit_verdict(margins: Sequence[float], n_for: int, n_against: int, *, slack: float = 0.0,
                 delta: float | None = None, floor: float = SINGLE_SEED_SPREAD,
                 least: float = MIN_SPREAD, diverged_seeds: int = DIVERGED_SEEDS,
                 bar: float = 1.0) -> tuple[str, float, float]:
    """(verdict, mean, spread) of paired margins (see the module's docstring). ``delta``:
    near-equality within it; else the claim is margin > −``slack``, its spread taken at least
    ``least`` (a claims file's ``min_spread``); diverged runs alone decide from
    ``diverged_seeds`` seeds on; ``contradicted`` needs the margin beyond ``bar`` spreads
    (:func:`family_bar`)."""
    if not margins:  # diverged runs alone: one is one draw (a run may diverge on some seeds)
        if n_against >= diverged_seeds and not n_for:
            return CONTRADICTED, math.nan, math.nan
        if n_for >= diverged_seeds and not n_against and delta is None:
            return HOLDS, math.nan, math.nan
        return INCONCLUSIVE, math.nan, math.nan
    m = np.asarray(margins, dtype=float)
    mean = float(m.mean())
    spread = float(m.std(ddof=1)) if len(m) > 1 else floor
    if delta is not None:
        if n_against == 0 and abs(mean) + spread <= delta:
            return HOLDS, mean, spread
        if abs(mean) > delta:  # a gap beyond δ is a sign: it takes a sign's least spread
            spread = max(spread, least)
            if abs(mean) - bar * spread > delta:
                return CONTRADICTED, mean, spread
        return INCONCLUSIVE, mean, spread
    spread = max(spread, least)  # a sign needs the mean beyond the least spread
    shifted = m + slack
    if n_against == 0 and mean + slack > spread and (shifted > 0).all():
        return HOLDS, mean, spread
    if n_for == 0 and mean + slack < -bar * spread and (shifted < 0).all():
        return CONTRADICTED, mean, spread
    return INCONCLUSIVE, mean, spread


def family_bar(units: int) -> float:
    """How many spreads a unit's margin must pass to contradict a claim of ``units`` units:
    z(α/k) / z(α) with α = FAMILY_ALPHA (Bonferroni: the claim's k chances to be contradicted
    by noise alone, at α/k each, keep its chance at most α); 1 for one unit."""
    if units <= 1:
        return 1.0
    z = NormalDist().inv_cdf
    return z(1 - FAMILY_ALPHA / units) / z(1 - FAMILY_ALPHA)


def _comparisons(claim: Relation, rows: pd.DataFrame, runs: pd.DataFrame
                 ) -> list[tuple[str, Group, tuple[Group, ...]]]:
    """(label, better, worse) per comparison in ``rows`` (one value of for_each): for a trend
    each neighbour pair along ``over``; ``within`` has a and b as better and worse."""
    if claim.kind == "trend":
        assert claim.over is not None
        xs = values_of(rows[claim.over])
        pairs = list(itertools.pairwise(xs)) if claim.steps == "neighbours" else [
            (xs[0], xs[-1])][:len(xs) - 1]
        if claim.direction == "decreasing":
            return [(f"{config_text(x)} → {config_text(y)}", ((claim.over, x),),
                     (((claim.over, y),),)) for x, y in pairs]
        return [(f"{config_text(x)} → {config_text(y)}", ((claim.over, y),),
                 (((claim.over, x),),)) for x, y in pairs]
    worse = claim.others if claim.kind == "best" else (claim.b,)
    return [("", resolve(claim.a, runs), tuple(resolve(g, runs) for g in worse))]


def _cells(axes: Sequence[str], rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) per combination of the ``axes``' values present in ``rows`` (each axis's
    values sorted); one cell of every row without axes."""
    cells = [("", rows)]
    for axis in axes:
        cells = [(", ".join(t for t in (label, f"{axis}={config_text(v)}") if t),
                  part[matches(part[axis], v)])
                 for label, part in cells for v in values_of(part[axis])]
    return cells


def _behind(verdict: str, sides: Sequence[_Side], within: bool) -> list[_Side]:
    """The sides a verdict rests on having settled: those behind. A side ahead that is still
    climbing only widens its lead; one behind may yet catch up. ``holds``: the worse sides
    (``within``: both); ``contradicted``: the side the claim says is better (``within``: the
    lower one); ``inconclusive``: none."""
    if verdict == HOLDS:
        return list(sides) if within else list(sides[1:])
    if verdict == CONTRADICTED:
        alive = [s for s in sides if not math.isnan(s.mean)]
        return [min(alive, key=lambda s: s.mean)] if within and alive else [sides[0]]
    return []


def _judged(label: str, sides: Sequence[_Side], claim: Relation, noise: Noise,
            units: int = 1) -> Unit:
    """A unit's outcome on its sides, one of ``units`` of its claim: the verdict of the
    paired margins (contradicting beyond :func:`family_bar` where ``noise.family_wise``), made
    ``inconclusive`` where a side it rests on (:func:`_behind`) has not settled."""
    within = claim.kind == "within"
    margins, n_for, n_against = _margins(sides[0], sides[1:], within)
    bar = family_bar(units) if noise.family_wise else 1.0

    def verdict_at(b: float) -> tuple[str, float, float]:
        return unit_verdict(margins, n_for, n_against, slack=claim.slack, delta=claim.delta,
                            floor=noise.single_seed_spread, least=noise.min_spread,
                            diverged_seeds=noise.diverged_seeds, bar=b)

    verdict, mean, spread = verdict_at(bar)
    family = ""
    if bar > 1 and verdict == INCONCLUSIVE and verdict_at(1.0)[0] == CONTRADICTED:
        family = (f"contradicted alone; one of {units} units, it must pass {bar:.2f} σ "
                  "to contradict the claim")
    climbing = [s for s in sides if s.settled is False]
    blocking = [s for s in _behind(verdict, sides, within) if s.settled is False]
    unsettled = ""
    if climbing:
        gains = ", ".join(f"{s.label} +{s.gain:.1f}" for s in climbing)
        unsettled = (f"not settled: {gains} points over the last quarter of the budget; "
                     + (f"else {verdict}" if blocking else "the side behind settled"))
    measured = [s.settled for s in sides if s.settled is not None]
    return Unit(label, INCONCLUSIVE if blocking else verdict, _values_text(sides), mean,
                spread, len(margins), n_for, n_against,
                sum(int(s.runs["diverged"].sum()) for s in sides),
                settled=all(measured) if measured else None, unsettled=unsettled,
                rates="; ".join(f"{s.label}: {s.rate}" for s in sides), family=family)


def _outcome(unit: Unit) -> str:
    margin = "" if math.isnan(unit.mean) else f"{unit.mean:+.1f} ± {unit.spread:.1f}, "
    return f"{margin}{unit.verdict}" + (f" ({unit.unsettled})" if unit.unsettled else "")


def judge_units(claim: Relation, summary: pd.DataFrame, noise: Noise,
                tuning: str | None = None) -> list[Unit]:
    """Every unit of ``claim`` on ``summary`` (see the module's docstring); a claim that
    compares methods is judged at each side's own learning rate where the experiment
    ``tuning`` chose one for every side of a unit."""
    runs = summary[in_experiments(summary, claim.experiments)]
    chosen = tuning and compares_methods(claim) and CHOSEN_BY in summary.columns
    tuned = summary[in_experiments(summary, [tuning])] if chosen else None
    # ``where`` leaves the variant keys open: each group keeps its runs at their defaults
    # unless it names one (FedFN's side names feature_norm: true, its baseline's does not)
    rows = runs[selects(runs, resolve(claim.where, runs), variants=False)]
    compared = [(" ".join(t for t in (cell, pair) if t),
                 [_side(g, cell_rows, claim) for g in (better, *worse)])
                for cell, cell_rows in _cells(claim.for_each, rows)
                for pair, better, worse in _comparisons(claim, cell_rows, runs)]
    k = len(compared)  # the claim's chances to be contradicted (family_wise)
    units = []
    for label, sides in compared:
        problems = [s for s in sides if isinstance(s, str)]
        if problems:
            verdict = NOT_RUN if all(p.startswith("no run") for p in problems) else None
            units.append(Unit(label, verdict or INCONCLUSIVE, reason="; ".join(problems)))
            continue
        unit = _judged(label, sides, claim, noise, k)
        if tuned is not None:
            own = [_tuned(s, tuned, claim) for s in sides]
            if all(s is not None for s in own):
                unit = replace(_judged(label, own, claim, noise, k),
                               common=f"at lr × 1 (common): {_outcome(unit)}")
            else:
                unit = replace(unit, rates=unit.rates + " (common: no tuning run at "
                               f"{sides[own.index(None)].label})")
        units.append(unit)
    return units


def claim_verdict(units: Sequence[Unit]) -> str:
    """A claim's verdict from its units' (see the module's docstring)."""
    verdicts = [u.verdict for u in units]
    if not units or all(v == NOT_RUN for v in verdicts):
        return NOT_RUN
    if any(u.verdict == INCONCLUSIVE and u.reason for u in units):
        return INCONCLUSIVE  # refused: a selection that is not the seeds of one setting
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def _deciding(units: Sequence[Unit], verdict: str, within: bool) -> Unit | None:
    numeric = [u for u in units if not math.isnan(u.mean)]
    if verdict == CONTRADICTED:
        against = [u for u in numeric if u.verdict == CONTRADICTED]
        key = (lambda u: abs(u.mean) - u.spread) if within else (lambda u: -(u.mean + u.spread))
        return max(against, key=key) if against else None
    return max(numeric, key=lambda u: u.weakness(within)) if numeric else None


def _detail(units: Sequence[Unit], noise: Noise) -> str:
    parts = []
    for u in units:
        head = f"{u.label}: " if u.label else ""
        if u.reason:
            parts.append(head + u.reason)
            continue
        counts = [f"{u.n_seeds} seed{'s' if u.n_seeds != 1 else ''}"]
        if u.n_seeds == 1:
            counts[0] += f" (spread: the {noise.single_seed_spread:g}-point floor)"
        elif noise.min_spread and u.spread == noise.min_spread:
            counts[0] += f" (spread: at least {noise.min_spread:g} points)"
        if u.n_diverged:
            counts.append(f"{u.n_diverged} run{'s' if u.n_diverged > 1 else ''} diverged "
                          f"({u.n_against} seed(s) against, {u.n_for} for)")
        margin = "" if math.isnan(u.mean) else f"{u.mean:+.1f} ± {u.spread:.1f}, "
        notes = [n for n in (u.family, u.unsettled, u.common) if n]
        parts.append(f"{head}{margin}{', '.join(counts)}: {u.verdict}"
                     + (f" ({'; '.join(notes)})" if notes else ""))
    return "; ".join(parts)


def _relation_text(claim: Relation) -> str:
    def text(group: Group) -> str:
        return ", ".join(f"{k}={config_text(v)}" for k, v in group)
    slack = f" − {claim.slack:g}" if claim.slack else ""
    if claim.kind == "greater":
        relation = f"[{text(claim.a)}] > [{text(claim.b)}]{slack}"
    elif claim.kind == "best":
        relation = (f"[{text(claim.a)}] > max(" + ", ".join(f"[{text(g)}]" for g in claim.others)
                    + f"){slack}")
    elif claim.kind == "within":
        relation = f"|[{text(claim.a)}] − [{text(claim.b)}]| ≤ {claim.delta:g}"
    else:
        relation = f"{claim.direction} along {claim.over}" + (f" (slack {claim.slack:g})"
                                                              if claim.slack else "")
    if claim.kind == "trend" and claim.steps == "ends":
        relation += ", first to last"
    return relation + (f", for each {' × '.join(claim.for_each)}" if claim.for_each else "")


WORDS_COLUMNS = ("id", "paper", "source", "words", "experiment", "where", "relation", "metric",
                 "at", "rates", "ours", "margin", "spread", "delta", "n_units", "n_seeds",
                 "n_diverged", "settled", "verdict", "detail", "note")


def _settled_text(units: Sequence[Unit]) -> str:
    """'yes' when every compared group settled, 'no' when one did not, '' when none was
    measured (no runs, or not an accuracy)."""
    measured = [u.settled for u in units if u.settled is not None]
    return "" if not measured else "yes" if all(measured) else "no"


def _rates_text(units: Sequence[Unit]) -> str:
    """The learning rate of each side, once when every unit has the same, else per unit."""
    rated = [u for u in units if u.rates]
    if len({u.rates for u in rated}) <= 1:
        return rated[0].rates if rated else ""
    return " | ".join(f"{u.label}: {u.rates}" for u in rated)


def words_row(claim: Relation, summary: pd.DataFrame, noise: Noise,
              tuning: str | None = None) -> dict[str, Any]:
    """The ledger's row of one qualitative claim (see WORDS_COLUMNS)."""
    units = judge_units(claim, summary, noise, tuning)
    verdict = claim_verdict(units)
    deciding = _deciding(units, verdict, claim.kind == "within")
    values = "; ".join(f"{u.label}: {u.values}" if u.label else u.values
                       for u in units if u.values)
    return {
        "id": claim.id, "paper": claim.paper, "source": claim.source, "words": claim.words,
        "experiment": ", ".join(claim.experiments),
        "where": ", ".join(f"{k}={config_text(v)}" for k, v in claim.where),
        "relation": _relation_text(claim), "metric": claim.metric, "at": claim.at,
        "rates": _rates_text(units),
        "ours": values,
        "margin": deciding.mean if deciding else math.nan,
        "spread": deciding.spread if deciding else math.nan,
        "delta": math.nan if claim.delta is None else claim.delta,
        "n_units": len(units), "n_seeds": min((u.n_seeds for u in units), default=0),
        "n_diverged": sum(u.n_diverged for u in units), "settled": _settled_text(units),
        "verdict": verdict,
        "detail": _detail(units, noise), "note": claim.note,
    }


def words_ledger(words: Words, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per qualitative claim, in file order."""
    rows = [words_row(c, summary, words.noise, words.tuning) for c in words.claims]
    return pd.DataFrame(rows, columns=list(WORDS_COLUMNS))


# ---------------------------------------------------------------------------------------------
# Writing it: .csv, .md (counts first, then one table per paper), .pdf/.png (margins).


def counts_text(table: pd.DataFrame) -> list[str]:
    """Markdown lines: the count of each verdict, in all and per paper."""
    lines = ["| paper | claims | " + " | ".join(VERDICTS) + " |",
             "|---|---:|" + "---:|" * len(VERDICTS)]
    for paper in [*PAPERS, "all"]:
        part = table if paper == "all" else table[table["paper"] == paper]
        counts = part["verdict"].value_counts()
        name = "**all**" if paper == "all" else PAPERS[paper].split(":")[0]
        lines.append(f"| {name} | {len(part)} | "
                     + " | ".join(str(counts.get(v, 0)) for v in VERDICTS) + " |")
    return lines


def words_markdown(table: pd.DataFrame, noise: Noise) -> str:
    counts = table["verdict"].value_counts()
    floor, least, diverged_seeds = (noise.single_seed_spread, noise.min_spread,
                                    noise.diverged_seeds)
    lines = [
        "# Claims in words", "",
        "What the papers state in words, judged on our runs (`src/fednorm/claims/words.py` has "
        "the rules). Each relation is a margin per seed that the claim says is positive "
        "(points of the metric), runs paired by seed; m̄ ± σ is its mean ± std over seeds "
        f"(one seed: σ = {floor:g} points, assumed; σ of a sign, and of a gap beyond δ, at "
        f"least {least:g} points). "
        "**holds**: m̄ > σ and every seed's margin "
        "> 0 (within δ: |m̄| + σ ≤ δ); **contradicted**: m̄ < −σ and every seed's < 0 (within "
        "δ: |m̄| − σ > δ); **inconclusive**: within the seed noise, seeds that disagree, or a "
        "selection that is not the seeds of one setting; **not run**: no runs. A diverged run "
        "counts against the side the claim says is better; diverged runs alone decide from "
        f"{diverged_seeds} seed{'s' if diverged_seeds > 1 else ''} on. **Settled**: a group "
        "(the seed mean "
        "of a setting's runs) has settled when its accuracy gains at most max(1 point, its seed "
        "spread) over the last quarter of its budget; a verdict stands only where the side "
        "behind has settled (holds: the worse side; contradicted: the side the claim says is "
        "better; within: both), else it is inconclusive (the detail names the group and its "
        "gain). **lr**: a claim that compares methods is judged at each method's learning rate "
        "chosen on held-out data (the tuning experiment) where it has a run at that setting, "
        "the common rate's verdict in the detail; elsewhere at the common recipe's (lr × 1). "
        "A claim with several units "
        "(`for each`, a trend's neighbour pairs) holds when all hold and is contradicted when "
        "any is" + (" beyond a bar raised for its k units' chances to contradict it by noise "
                    f"(m̄ < −b_k σ, Bonferroni: b_3 = {family_bar(3):.2f}, b_10 = "
                    f"{family_bar(10):.2f})" if noise.family_wise else "")
        + "; the margin shown is the deciding unit's.", "",
        "Verdicts: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + ".", "",
        *counts_text(table),
    ]
    header = ["id", "source", "the paper's words", "relation (where)", "lr", "ours",
              "margin ± σ", "settled", "verdict", "detail"]
    for paper, part in table.groupby("paper", sort=False):
        lines += ["", f"## {PAPERS[paper]}", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * 6 + "---:|---|---|---|"]
        for r in part.itertuples(index=False):
            margin = "–" if math.isnan(r.margin) else f"{r.margin:+.1f} ± {r.spread:.1f}"
            relation = r.relation + (f" ({r.where})" if r.where else "")
            relation += f"; {'best' if r.at == 'max' else 'final'} {value_label(r.metric)}"
            cells = [r.id, r.source, f"“{r.words}”", relation, r.rates or "–", r.ours or "–",
                     margin, r.settled or "–", f"**{r.verdict}**", r.detail]
            lines.append("| " + " | ".join(escape_cell(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


WORD_COLOURS = {HOLDS: "#2ca02c", CONTRADICTED: "#d62728", INCONCLUSIVE: "#ff7f0e",
                NOT_RUN: "#999999"}


def words_figure(table: pd.DataFrame) -> Figure:
    """One row per claim: the deciding margin ± spread, against 0 (a sign relation) or the
    ±δ band (within), coloured by verdict; claims without a margin are named at 0, hollow."""
    n = max(len(table), 1)
    fig = Figure(figsize=(7.0, 1.2 + 0.22 * n), layout="constrained")
    ax = fig.subplots()
    ax.axvline(0, color="#444444", lw=0.8)
    for y, r in enumerate(table.itertuples(index=False)):
        colour = WORD_COLOURS[r.verdict]
        if not math.isnan(r.delta):
            ax.plot([-r.delta, r.delta], [y, y], color=colour, lw=6, alpha=0.2,
                    solid_capstyle="butt")
        if math.isnan(r.margin):
            ax.plot(0, y, marker="o", mfc="none", color=colour, ms=5)
        else:
            ax.errorbar(r.margin, y, xerr=r.spread, marker="o", color=colour, capsize=2,
                        lw=0.8, ms=4)
    ax.set_yticks(range(len(table)), [f"{r.id} ({r.paper})" for r in
                                      table.itertuples(index=False)], fontsize=5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("margin the claim says is > 0 (within: |margin| ≤ δ, band), points")
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], ls="none", marker="o", color=c, label=v)
               for v, c in WORD_COLOURS.items()]
    ax.legend(handles=handles, fontsize="small", loc="lower right")
    held = int(table["verdict"].eq(HOLDS).sum())
    ax.set_title(f"Claims in words: {held} of {len(table)} hold (mean ± spread over seeds)",
                 fontsize="medium")
    if table.empty:
        ax.text(0.5, 0.5, "no qualitative claims", ha="center", va="center",
                transform=ax.transAxes)
    return fig


def words_writers(words: Words, summary: pd.DataFrame) -> dict[str, Any]:
    """The writers of claims_words.csv, .md, .pdf, .png (for
    :func:`fednorm.plots.save.save_together`)."""
    table = words_ledger(words, summary)
    fig = words_figure(table)
    return {
        ".csv": lambda path: write_csv(path, table),
        ".md": lambda path: write_text(path, words_markdown(table, words.noise)),
        ".pdf": lambda path: fig.savefig(path, metadata={"CreationDate": None}),
        ".png": lambda path: fig.savefig(path, dpi=PNG_DPI),
    }


def write_words(words: Words, summary: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``stem``.csv, .md, .pdf and .png, all or none."""
    return save_together(stem, words_writers(words, summary))


assert set(FIELDS) <= set(COLUMNS)
