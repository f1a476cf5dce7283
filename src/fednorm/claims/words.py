"""Qualitative claims: what the papers state in words, as relations between groups of runs;
this module reads and checks them (:mod:`fednorm.claims.verdicts` judges them).

The claims file's section ``qualitative:`` (beside the numeric ``claims:`` of
:mod:`fednorm.claims.numbers`)::

    qualitative:
      alpha: 0.05                    # one-sided error rate of each verdict (0.05)
      sesoi: {default: 2, fixbn: 2}  # points: the smallest effect of interest, a number or per
                                     # paper (default: 2); a claim may set its own
      min_seeds: 2                   # seeds with a margin a firm verdict needs (2)
      lattice: 0.2                   # points: the values' lattice (accuracies on a fixed test
                                     # set), which floors a margin's sd (0: none)
      noise: config/claims_noise.csv # optional: each claim's seed noise, measured on other
                                     # seeds, that states its power before the runs
      tuning: [tuning, tuning_batch] # optional: the experiments that choose each method's
                                     # rate and own keys (a name or a list; default 'tuning';
                                     # null: every claim at the common recipe)
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
          at: final                          # optional: final | max (the best point) |
                                             # window (the mean over the last quarter);
                                             # default: the file's ``estimand``
          sesoi: 2                           # optional: this claim's smallest effect
          note: ""                           # optional

A *group* (``where``, ``a``, ``b``, each of ``others``) maps summary columns (RunConfig keys and
``scenario``, ``split``, ``regime``) to one value each; ``min`` / ``max`` on a numeric column
is the smallest / largest value that column takes among the experiment's runs (``local_steps:
max`` is E = 2500 at paper scale, 25 in the quick profile). The relations, each a *margin*
per seed that the claim says is positive (in points for an accuracy), runs paired by seed:

- ``greater``: ``a`` − ``b`` > −slack (``slack`` optional, default 0);
- ``best``: ``a`` − each of ``others`` > −slack (one comparison per other group);
- ``trend``: along ``over`` (its values sorted, in the claimed ``direction``: increasing |
  decreasing), each adjacent pair's step > −slack, one unit a pair (``steps: neighbours``, the
  default: the claim holds when every step does, an intersection–union test); ``steps: ends``
  compares only the first value with the last; ``steps: slope`` the least-squares change from
  the first value to the last over their ranks (:func:`fednorm.claims.stats.trend_contrast`),
  for words that say "on average";
- ``within``: |``a`` − ``b``| ≤ ``delta`` (points): near-equality.

The verdicts, with their stated error rates, are :mod:`fednorm.claims.verdicts`' and
:mod:`fednorm.claims.stats`'. Checked at the door (:func:`parse_words`, then :func:`check_plan`
when :func:`fednorm.claims.load_claims` is given the plan): unknown or missing keys, a relation
that is not one of the kinds, keys of another kind, an unknown experiment, a column the summary
does not have, a value no run of the experiment has, ``min`` / ``max`` on a column that is not
numeric, an axis (``over``, ``for_each``) that takes a single value in the experiment: each a
ConfigError naming the claim, the key, the value and what is allowed.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fednorm.claims.common import OWN_METHODS, PAPERS
from fednorm.claims.stats import ALPHA, MIN_SEEDS, SESOI
from fednorm.config import ConfigError, Finite, IntIn, NumberIn, OneOf, check, fail
from fednorm.plan import COLUMNS, FIGURE_METRICS, Plan
from fednorm.results import AT, in_experiments, matches, values_of
from fednorm.summarize import config_columns

HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_RUN = "holds", "contradicted", "inconclusive", "not run"
# neither way: the margin within ±sesoi by an equivalence test (fednorm.claims.rule)
NEGLIGIBLE = "negligible"
# inconclusive where the power stated before the runs said its design could not decide it
UNDECIDABLE = "undecidable"
VERDICTS = (HOLDS, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE, UNDECIDABLE, NOT_RUN)
FIRM = (HOLDS, CONTRADICTED, NEGLIGIBLE)  # the verdicts a claim's seeds decided
RELATIONS = ("greater", "best", "trend", "within")
DIRECTIONS = ("increasing", "decreasing")
SYMBOLIC = ("min", "max")
TUNING = "tuning"  # the experiment whose learning rates, chosen on held-out data, method claims use
SECTION = "qualitative"
SECTION_KEYS = ("claims", "alpha", "sesoi", "min_seeds", "lattice", "noise", "tuning")
_REQUIRED = ("id", "paper", "source", "words", "experiment", "relation")
_OPTIONAL = {"where": {}, "for_each": None, "slack": 0.0, "metric": "test_accuracy",
             "at": "final", "sesoi": None, "note": ""}
_KIND_KEYS = {"greater": ("a", "b"), "best": ("a", "others"), "trend": ("over", "direction"),
              "within": ("a", "b", "delta")}
_KIND_OPTIONAL = {"greater": ("slack",), "best": ("slack",), "trend": ("slack", "steps"),
                  "within": ()}
STEPS = ("neighbours", "ends", "slope")

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
    sesoi: float | None = None  # points; None: the file's for the claim's paper
    note: str = ""

    def groups(self) -> tuple[Group, ...]:
        """Every group the claim names (``where`` first)."""
        return (self.where, self.a, self.b, *self.others)

    @property
    def own_method(self) -> bool:
        """Whether the claim is about its paper's own method (a group names it)."""
        own = OWN_METHODS.get(self.paper)
        return own in {pair for group in self.groups() for pair in group}


@dataclass(frozen=True)
class Rule:
    """How the verdicts are decided (the qualitative section's keys of the same names)."""

    alpha: float = ALPHA  # one-sided error rate of each verdict
    sesoi: tuple[tuple[str, float], ...] = ()  # paper -> points ('default': the rest)
    min_seeds: int = MIN_SEEDS  # seeds with a margin a firm verdict needs
    lattice: float = 0.0  # points: the values' lattice, which floors a margin's sd

    def sesoi_of(self, claim: Relation) -> float:
        """The claim's smallest effect of interest: its own, its paper's, the default."""
        if claim.sesoi is not None:
            return claim.sesoi
        table = dict(self.sesoi)
        return table.get(claim.paper, table.get("default", SESOI))


@dataclass(frozen=True)
class Words:
    """The qualitative section of a claims file."""

    claims: tuple[Relation, ...] = ()
    rule: Rule = Rule()
    # the tuning experiments, searched in order for a side's cell; (): every claim at the
    # common recipe
    tuning: tuple[str, ...] = (TUNING,)
    noise: str | None = None  # the noise table (fednorm.claims.power); None: power not stated


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


def parse_relation(spec: Any, index: int, at: str = "final") -> Relation:
    """One entry of ``qualitative.claims``, checked, its ``at`` ``at`` unless it names one (the
    claims file's ``estimand``); errors name the claim's id (or index)."""
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
    f = {**_OPTIONAL, "at": at, **spec}
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
        sesoi=None if f["sesoi"] is None else float(check(where, "sesoi", f["sesoi"], Finite(0))),
        note=_text(where, "note", f["note"], empty=True),
    )


def parse_words(spec: Any, at: str = "final") -> Words:
    """The ``qualitative`` section (None: no qualitative claims), checked; ``at``: the value of
    a run where a claim names none (the claims file's ``estimand``,
    :func:`fednorm.claims.numbers.parse_estimand`)."""
    if spec is None:
        return Words()
    if not isinstance(spec, Mapping):
        raise fail("claims file", SECTION, spec, f"a mapping of {list(SECTION_KEYS)}")
    for key in spec:
        if key not in SECTION_KEYS:
            raise ConfigError(f"{SECTION}: unknown key '{key}'; allowed keys: "
                              f"{list(SECTION_KEYS)}")
    tuning = spec.get("tuning", TUNING)
    tuning = [] if tuning is None else [tuning] if isinstance(tuning, str) else tuning
    if not isinstance(tuning, list):
        raise fail(SECTION, "tuning", tuning, "an experiment's name, a list of them, or null")
    for name in tuning:
        _text(SECTION, "tuning", name)
    entries = spec.get("claims")
    if not isinstance(entries, list) or not entries:
        raise fail(SECTION, "claims", entries, "a non-empty list of claims")
    claims = tuple(parse_relation(entry, i, at) for i, entry in enumerate(entries))
    ids = [c.id for c in claims]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise fail(SECTION, "id", twice[0], "an id no other qualitative claim has")
    alpha = check(SECTION, "alpha", spec.get("alpha", ALPHA),
                  NumberIn(0, 0.5, low_open=True, high_open=True))
    rule = Rule(float(alpha), _sesoi(spec.get("sesoi", SESOI)),
                check(SECTION, "min_seeds", spec.get("min_seeds", MIN_SEEDS), IntIn(2)),
                float(check(SECTION, "lattice", spec.get("lattice", 0.0), Finite(0))))
    noise = spec.get("noise")
    if noise is not None:
        _text(SECTION, "noise", noise)
    return Words(claims, rule, tuple(tuning), noise)


def _sesoi(value: Any) -> tuple[tuple[str, float], ...]:
    """``sesoi``: points for every claim, or a mapping of papers (and 'default') to points."""
    allowed = "points (a number >= 0), or a mapping of papers and 'default' to points"
    table = value if isinstance(value, Mapping) else {"default": value}
    for paper, points in table.items():
        if paper not in (*PAPERS, "default"):
            raise fail(SECTION, "sesoi", paper, f"{allowed}; papers: {list(PAPERS)}")
        check(f"{SECTION}, sesoi", str(paper), points, Finite(0))
    return tuple((str(k), float(v)) for k, v in table.items())


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
