"""Figure specs: what each figure of the configuration draws (:class:`Figure`), checked against
the runs of its experiments."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fednorm.config import DERIVED, FIELDS, ConfigError, RunConfig, checked_section
from fednorm.metrics import FIGURE_METRICS

FIGURE_EXTENSIONS = ("pdf", "png", "csv")
TABLE_EXTENSIONS = ("csv", "md")  # a table is data and text, no picture
COLUMNS = FIELDS + DERIVED  # what a figure may filter on or tell its lines apart by


def extensions(kind: str) -> tuple[str, ...]:
    """The files a figure of ``kind`` is written as: <name>.<ext> for each ext."""
    return TABLE_EXTENSIONS if kind in TABLE_KINDS else FIGURE_EXTENSIONS


@dataclass(frozen=True)
class Figure:
    """One output figure: which experiments' runs, which rows, what kind of picture.

    The fields after ``title`` serve some kinds only (:func:`figure_spec` checks which)."""

    name: str
    experiments: tuple[str, ...]  # the rows of the runs of any of these experiments
    kind: str
    # (key, value): rows whose key equals value; a tuple value: rows whose key is one of them
    where: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    x: str | None = None
    y: str | tuple[str, ...] = "test_accuracy"  # curves: or several metrics, one line each
    hue: tuple[str, ...] = ("normalizer",)  # one column, or two: colour then dash
    panel: str | None = None  # one axes per value of this key, side by side
    panel_values: tuple[Any, ...] = ()
    logy: bool = False
    title: str = ""
    logx: bool | None = None  # final_vs: a log (True) or linear (False) x; None: from the values
    rows: str | None = None  # heatmap, table: the column whose values are the rows
    cols: str | None = None  # heatmap, table: the column whose values are the columns
    compare: str | None = None  # heatmap: the column whose two values A, B are compared
    compare_values: tuple[Any, ...] = ()  # (A, B): panels A, B and B - A
    # (column, values): the order of a column's values along an axis (rows, cols, bar groups)
    orders: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    parts: tuple[Figure, ...] = ()  # parts: figures side by side in one file, one axes each
    extra: tuple[str, ...] = ()  # table: metrics shown as one more column each (row means)
    # the paper's figure or table it reproduces, e.g. 'FBN Fig 3a' (the report's caption); None:
    # not in the papers
    paper: str | None = None
    note: str = ""  # what a reader must know to read it (the report's caption), if anything
    # table, heatmap: per cell, only the runs of the lr_scale whose final value of this metric
    # (a validation one), averaged over seeds, is best (fednorm.tuning); None: every run
    select: str | None = None
    # domains: the domains shown, one column each (their test_accuracy_<domain>), in this order
    domains: tuple[str, ...] = ()
    # improvement: the ``rows`` value every other one is compared with (fednorm.improvement)
    baseline: Any = None


def _resolve_value(fig: str, key: str, value: Any, present: list[Any],
                   section: str = "where") -> Any:
    """One ``where`` value checked against the values the runs have; 'min'/'max' pick."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
    if value in ("min", "max") and numeric:
        value = present[0] if value == "min" else present[-1]
    if value not in present:
        raise ConfigError(
            f"figures.{fig}.{section}: key '{key}' has value {value!r}; allowed: a value the "
            f"experiment has ({present}), or 'min'/'max'"
        )
    return value


def _present(runs: list[RunConfig], key: str) -> list[Any]:
    """The values the runs have for a column, sorted (None last)."""
    return sorted({getattr(r, key) for r in runs}, key=lambda v: (v is None, v))


def _resolve_where(fig: str, spec: Mapping[str, Any], runs: list[RunConfig]) -> tuple:
    """Check each filter against the experiments' values; 'min'/'max' pick from them, and a
    list keeps the rows whose key is any of its values."""
    where = []
    for key, value in checked_section(spec, f"figures.{fig}.where", COLUMNS).items():
        present = _present(runs, key)
        if isinstance(value, list):
            if not value:
                raise ConfigError(f"figures.{fig}.where: key '{key}' has value []; allowed: "
                                  "a value or a non-empty list of values")
            resolved = tuple(_resolve_value(fig, key, v, present) for v in value)
        else:
            resolved = _resolve_value(fig, key, value, present)
        where.append((key, resolved))
    return tuple(where)


def matches_where(cfg: RunConfig, where: tuple) -> bool:
    """Whether a run passes a figure's filters, ``((key, value), ...)``: its key equals the
    value, or is one of them (a tuple)."""
    return all(getattr(cfg, key) in value if isinstance(value, tuple) else
               getattr(cfg, key) == value for key, value in where)


def _experiments(fig: str, spec: Any, experiments: dict[str, list[RunConfig]]) -> tuple:
    """``experiment``: one experiment's name or a list of them (their runs' union)."""
    names = spec if isinstance(spec, list) and spec else [spec]
    for name in names:
        if not isinstance(name, str) or name not in experiments:
            raise ConfigError(f"figures.{fig}: key 'experiment' has value {spec!r}; allowed: "
                              f"one of {list(experiments)} or a list of them")
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# Figure keys. Every figure has the COMMON keys; each kind has its own (FIGURE_KEYS: key ->
# default, REQUIRED when it has none), each checked by one rule (_KEY_RULES) that returns the
# Figure fields it sets. A kind's keys are checked in their order here, so an order key comes
# after the key whose column it orders.

REQUIRED = "<required>"
COMMON_KEYS = ("experiment", "kind", "where", "y", "title", "paper", "note")
FIGURE_KEYS: dict[str, dict[str, Any]] = {
    "curves": {"x": None, "hue": "normalizer", "panels": None, "logy": False},
    "final_vs": {"x": None, "hue": "normalizer", "panels": None, "logy": False, "logx": None},
    "bars": {"x": REQUIRED, "hue": "normalizer", "panels": None, "x_order": None},
    "heatmap": {"rows": REQUIRED, "cols": REQUIRED, "compare": REQUIRED, "row_order": None,
                "col_order": None, "select": None},
    "table": {"rows": REQUIRED, "cols": REQUIRED, "row_order": None, "col_order": None,
              "extra": None, "select": None},
    "tuning": {"rows": REQUIRED, "cols": REQUIRED, "row_order": None, "col_order": None,
               "select": "val_accuracy"},
    "domains": {"rows": "method", "row_order": None, "domains": None},
    "parts": {"parts": REQUIRED},
    # rliable's reading (fednorm.improvement): each row's probability of improvement over the
    # baseline and its IQM, over the settings ``cols`` (a table); the performance profile
    "improvement": {"rows": "method", "cols": REQUIRED, "row_order": None,
                    "baseline": REQUIRED},
    "profile": {"rows": "method", "cols": REQUIRED, "row_order": None},
}
FIGURE_KINDS = tuple(FIGURE_KEYS)
# written as data and text (TABLE_EXTENSIONS), no picture
TABLE_KINDS = ("table", "tuning", "improvement")
# What a part of a ``parts`` figure may be: a kind drawn on one axes (no panels of its own).
PART_KINDS = ("curves", "final_vs", "bars")
# The x a kind's axis may show: curves also the steps and the x computed from them
# (fednorm.plots.curves.COMPUTED_X: round = step / local_steps, progress = step / steps).
CURVE_X = ("step", "round", "progress")
X_CHOICES = {"curves": (*CURVE_X, *FIELDS), "final_vs": FIELDS, "bars": COLUMNS}
MAX_HUES = {"curves": 2, "final_vs": 2, "bars": 1}
ORDER_OF = {"row_order": "rows", "col_order": "cols", "x_order": "x"}  # order key -> its axis
DEFAULT_Y = {"domains": "domain_accuracy"}  # a kind's y when the figure gives none


@dataclass
class _FigureSpec:
    """What a key's rule needs: the figure, its runs, and the fields checked so far."""

    name: str
    kind: str
    runs: list[RunConfig]  # the runs that pass the figure's filters
    fields: dict[str, Any]
    raw: Mapping[str, Any] = field(default_factory=dict)  # the figure's keys as configured
    experiments: dict[str, list[RunConfig]] = field(default_factory=dict)  # all of them

    def error(self, key: str, value: Any, allowed: str) -> ConfigError:
        return ConfigError(f"figures.{self.name}: key '{key}' has value {value!r}; allowed: "
                           f"{allowed}")


def _x(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    allowed = X_CHOICES[spec.kind]
    if value is not None and value not in allowed:
        raise spec.error("x", value, f"one of {list(allowed)}")
    return {"x": value}


def _hue(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``hue``: a column or two (colour, then dash) that tell a figure's lines apart."""
    most = MAX_HUES[spec.kind]
    hue = [value] if isinstance(value, str) else value
    if not (isinstance(hue, list) and 1 <= len(hue) <= most and all(h in COLUMNS for h in hue)):
        count = "one" if most == 1 else "one or two"
        raise spec.error("hue", value, f"{count} of {list(COLUMNS)}")
    return {"hue": tuple(hue)}


def _panels(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``{key: [values]}`` -> (key, values), each value checked like a ``where`` filter."""
    if value is None:
        return {}
    value = checked_section(value, f"figures.{spec.name}.panels", COLUMNS)
    if len(value) != 1 or not isinstance(next(iter(value.values())), list):
        raise spec.error("panels", dict(value), "one key with a list of values")
    key, values = next(iter(value.items()))
    resolved = tuple(_resolve_where(spec.name, {key: v}, spec.runs)[0][1] for v in values)
    return {"panel": key, "panel_values": resolved}


def _flag(key: str, optional: bool = False) -> Callable[[_FigureSpec, Any], dict[str, Any]]:
    def rule(spec: _FigureSpec, value: Any) -> dict[str, Any]:
        if not (isinstance(value, bool) or (optional and value is None)):
            raise spec.error(key, value, "true or false")
        return {key: value}

    return rule


def _column(key: str) -> Callable[[_FigureSpec, Any], dict[str, Any]]:
    """``rows`` / ``cols``: a column (run key or derived), not the one another axis uses."""
    def rule(spec: _FigureSpec, value: Any) -> dict[str, Any]:
        taken = [spec.fields[k] for k in ("rows", "cols") if k in spec.fields]
        if value not in COLUMNS or value in taken:
            raise spec.error(key, value, f"one of {list(COLUMNS)}, other than {taken}"
                             if taken else f"one of {list(COLUMNS)}")
        return {key: value}

    return rule


def _compare(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``{key: [A, B]}``: two values of one column; the figure keeps the runs with either."""
    where = f"figures.{spec.name}.compare"
    value = checked_section(value, where, COLUMNS)
    if len(value) != 1:
        raise spec.error("compare", dict(value), "one column with a list of two values, "
                         "e.g. {normalizer: [bn, gn]}")
    key, values = next(iter(value.items()))
    if key in (spec.fields["rows"], spec.fields["cols"]):
        raise ConfigError(f"{where}: key '{key}' is the figure's rows or cols; allowed: "
                          "another column")
    if not (isinstance(values, list) and len(values) == 2 and values[0] != values[1]):
        raise ConfigError(f"{where}: key '{key}' has value {values!r}; allowed: a list of two "
                          "different values")
    present = _present(spec.runs, key)
    pair = tuple(_resolve_value(spec.name, key, v, present, "compare") for v in values)
    spec.runs = [r for r in spec.runs if getattr(r, key) in pair]
    return {"compare": key, "compare_values": pair}


def _parts(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``parts``: figures drawn side by side in one file, each a mapping of a figure's keys of
    one of PART_KINDS (its own ``experiment``, default the parent's; ``where``, ``y``,
    ``title`` and its kind's keys but ``panels``)."""
    if not (isinstance(value, list) and value and all(isinstance(p, Mapping) for p in value)):
        raise spec.error("parts", value, f"a non-empty list of figures (mappings of figure "
                         f"keys), each of kind {list(PART_KINDS)}")
    parts = []
    for i, part in enumerate(value):
        where = f"{spec.name}.parts[{i}]"
        if part.get("kind") not in PART_KINDS:
            raise ConfigError(f"figures.{where}: key 'kind' has value {part.get('kind')!r}; "
                              f"allowed: {list(PART_KINDS)}")
        if "panels" in part:
            raise ConfigError(f"figures.{where}: key 'panels' is not allowed in a part (one "
                              f"axes each); allowed keys: those of kind '{part['kind']}'")
        if "paper" in part:
            raise ConfigError(f"figures.{where}: key 'paper' is not allowed in a part; allowed: "
                              f"'paper' of the figure '{spec.name}' (one caption per file)")
        inherited = {k: spec.raw[k] for k in ("experiment", "where") if k in spec.raw}
        parts.append(figure_spec(where, {**inherited, **part}, spec.experiments))
    return {"parts": tuple(parts)}


def _extra(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``extra``: metrics shown as one more column each (per row, its runs' final mean)."""
    if value is None:
        return {}
    if not (isinstance(value, list) and all(v in FIGURE_METRICS for v in value)):
        raise spec.error("extra", value, f"a list of metrics from {list(FIGURE_METRICS)}")
    return {"extra": tuple(value)}


def _select(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``select``: a validation metric; per cell, the runs of the best ``lr_scale`` by it
    (fednorm.tuning). Every run of the figure must hold out a validation set."""
    if value is None and spec.kind != "tuning":
        return {}
    if value != "val_accuracy":
        raise spec.error("select", value, "'val_accuracy' (a learning rate is chosen on the "
                         "validation split, never on the test set), or null")
    without = sorted({r.run_id for r in spec.runs if r.val_fraction == 0})
    if without:
        raise spec.error("select", value, f"only with runs that hold out a validation set "
                         f"(val_fraction > 0); {len(without)} do not, e.g. {without[0]}")
    return {"select": value}


def _order(key: str) -> Callable[[_FigureSpec, Any], dict[str, Any]]:
    """``row_order`` / ``col_order`` / ``x_order``: every value of the axis's column that the
    figure's runs have, once each, in the order to draw them."""
    def rule(spec: _FigureSpec, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        column = spec.fields[ORDER_OF[key]]
        present = list(dict.fromkeys(getattr(r, column) for r in spec.runs))
        same = isinstance(value, list) and len(value) == len(present)
        if not (same and all(v in value for v in present)):
            raise spec.error(key, value, f"each value of '{column}' that the runs have, once, "
                             f"in any order: {present}")
        orders = spec.fields.get("orders", ())
        return {"orders": (*orders, (column, tuple(value)))}

    return rule


def _domains(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``domains`` (kind domains): the domains shown, one column each, in this order; null:
    every domain of the figure's runs (their ``domains`` key), in the order the runs list them.
    """
    present = list(dict.fromkeys(d for r in spec.runs for d in r.domains))
    if not present:
        raise spec.error("kind", spec.kind, f"runs with domains (feature shift: a run's key "
                         f"'domains'); none of the figure's {len(spec.runs)} runs has any")
    if value is None:
        value = present
    if not (isinstance(value, list) and value and len(set(value)) == len(value)
            and set(value) <= set(present)):
        raise spec.error("domains", value, f"a list of different domains of the figure's "
                         f"runs, from {present}; or null (all of them)")
    return {"domains": tuple(value)}


def _baseline(spec: _FigureSpec, value: Any) -> dict[str, Any]:
    """``baseline`` (kind improvement): a value of the rows' column that the runs have."""
    present = list(dict.fromkeys(getattr(r, spec.fields["rows"]) for r in spec.runs))
    if value not in present:
        raise spec.error("baseline", value, f"a value of '{spec.fields['rows']}' that the "
                         f"runs have: {present}")
    return {"baseline": value}


_KEY_RULES: dict[str, Callable[[_FigureSpec, Any], dict[str, Any]]] = {
    "x": _x,
    "hue": _hue,
    "panels": _panels,
    "logy": _flag("logy"),
    "logx": _flag("logx", optional=True),
    "rows": _column("rows"),
    "cols": _column("cols"),
    "compare": _compare,
    "parts": _parts,
    "extra": _extra,
    "select": _select,
    **{key: _order(key) for key in ORDER_OF},
    "domains": _domains,
    "baseline": _baseline,
}
assert {k for keys in FIGURE_KEYS.values() for k in keys} == set(_KEY_RULES)


def figure_spec(name: str, spec: Any, experiments: dict[str, list[RunConfig]]) -> Figure:
    """The figure ``figures.<name>`` of the configuration, each key checked against the runs
    of its experiments (``experiments``: name -> runs)."""
    where = f"figures.{name}"
    spec = checked_section(spec, where, (*COMMON_KEYS, *dict.fromkeys(
        k for keys in FIGURE_KEYS.values() for k in keys)))
    kind = spec.get("kind")
    if kind not in FIGURE_KINDS:
        raise ConfigError(f"{where}: key 'kind' has value {kind!r}; allowed: {FIGURE_KINDS}")
    own = FIGURE_KEYS[kind]
    for key in spec:
        if key not in COMMON_KEYS and key not in own:
            raise ConfigError(f"{where}: key '{key}' is not one of kind '{kind}'; allowed keys: "
                              f"{[*COMMON_KEYS, *own]}")
    if kind == "parts":  # the parts have the experiments, filters and metrics
        if "y" in spec:
            raise ConfigError(f"{where}: key 'y' is not one of kind 'parts' (each part has "
                              f"its own); allowed keys: {['experiment', 'where', 'title', *own]}")
        checked = _FigureSpec(name, kind, [], {}, spec, experiments)
        checked.fields.update(_parts(checked, spec.get("parts")))
        names = tuple(dict.fromkeys(e for part in checked.fields["parts"]
                                    for e in part.experiments))
        return Figure(name=name, experiments=names, kind=kind, **_caption_keys(where, spec),
                      **checked.fields)
    names = _experiments(name, spec.get("experiment"), experiments)
    runs = [cfg for n in names for cfg in experiments[n]]
    y = _y(where, kind, spec.get("y", DEFAULT_Y.get(kind, "test_accuracy")))
    filters = _resolve_where(name, spec.get("where"), runs)
    checked = _FigureSpec(name, kind, [r for r in runs if matches_where(r, filters)], {})
    for key, default in own.items():
        if key not in spec and default == REQUIRED:
            raise ConfigError(f"{where}: key '{key}' is missing; kind '{kind}' needs "
                              f"{[k for k, d in own.items() if d == REQUIRED]}")
        checked.fields.update(_KEY_RULES[key](checked, spec.get(key, default)))
    if isinstance(y, tuple) and len(checked.fields["hue"]) > 1:
        raise ConfigError(f"{where}: key 'hue' has value {list(checked.fields['hue'])}; "
                          f"allowed: one column with a list of metrics as y (the metric is "
                          f"the lines' colour, the hue their dash)")
    return Figure(name=name, experiments=names, kind=kind, where=filters, y=y,
                  **_caption_keys(where, spec), **checked.fields)


def _caption_keys(where: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The keys that only label a figure: ``title`` (drawn on it), ``paper`` and ``note`` (the
    report's caption)."""
    note = spec.get("note", "")
    if not isinstance(note, str):
        raise ConfigError(f"{where}: key 'note' has value {note!r}; allowed: a text that the "
                          f"report's caption adds (what a reader must know to read the figure)")
    return {"title": str(spec.get("title", "")), "paper": _paper(where, spec.get("paper")),
            "note": " ".join(note.split())}


def _paper(where: str, value: Any) -> str | None:
    """``paper``: the figure or table of a paper that the figure reproduces, as the report's
    caption names it (e.g. 'FixBN Table 5'); left out (or null) for one not in the papers."""
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    raise ConfigError(f"{where}: key 'paper' has value {value!r}; allowed: a paper's figure or "
                      "table, e.g. 'FBN Fig 3a', or null for a figure not in the papers")


def _y(where: str, kind: str, value: Any) -> str | tuple[str, ...]:
    """``y``: a metric; curves also take a list of different metrics, one line each."""
    if isinstance(value, list) and kind == "curves":
        if value and len(set(value)) == len(value) and all(v in FIGURE_METRICS for v in value):
            return tuple(value)
    elif value in FIGURE_METRICS:
        return value
    lists = " (curves: or a list of different ones)"
    raise ConfigError(f"{where}: key 'y' has value {value!r}; allowed: one of "
                      f"{list(FIGURE_METRICS)}{lists}")
