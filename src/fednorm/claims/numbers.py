"""The claims ledger: each number a paper states, beside ours, with a verdict.

A claims file (the config's ``claims:``, e.g. ``config/claims.yaml``) has two sections of
numeric claims (this module) and one of claims in words, ``qualitative:``
(:mod:`fednorm.claims.words`: relations between groups of runs, judged with the seed noise)::

    estimand: window           # optional: a run's value where a claim names no ``at`` (both
                               # ledgers; default final), stated before the runs
    recipes:                   # named settings that claims share (a paper's scale and recipe)
      fbn_paper: {dataset: cifar10, model: fbn_cnn, width: 64, steps: 3000, ...}
    claims:
      - id: fbn-fig3a-bn-gamma0.01      # unique; names the claim in every message
        paper: fbn                      # fbn | fixbn | fedtan
        source: Fig 3a                  # the figure or table
        recipe: fbn_paper               # optional: its keys, under the claim's own setting
        setting: {normalizer: bn, partition: gamma, heterogeneity: 0.01}
        metric: test_accuracy           # a summary metric (default test_accuracy)
        at: final                       # optional: final (the last evaluation point), max
                                        # (the best one), window (the mean over the last
                                        # quarter); default: the file's ``estimand``
        value: 40                       # the paper's number (in % for an accuracy)
        spread: null                    # its ± when the paper gives one
        tolerance: 2                    # optional: points within which a number reproduces
        note: "§4 Results: ..."         # where the paper says it

A setting is RunConfig keys (and the budget keys ``epochs``, ``rounds``, ``lr_decay_at``) as a
config writes them; it is validated by :func:`fednorm.config.run_config` over RunConfig's
defaults, so a key or value the config cannot express is a :class:`ConfigError` naming the
claim, the key, the value and what is allowed. A run *matches* a claim when it equals the
setting on every key the setting names (budgets resolved to ``steps``, ``lr_milestones``).

Ours is the mean ± std (over seeds) of the matching runs' value ``at`` their final (or best)
evaluation point, or their mean over the last quarter of the budget (``window``:
:func:`fednorm.results.run_values`), in ``results/summary.csv``. Verdicts:

- ``reproduced``: no seed diverged and |ours − paper| ≤ max(tolerance, √(σ_paper² + σ_ours²));
- ``differs``: otherwise; a diverged seed (status ``diverged``) is left out of the mean, as in
  every figure, and makes the verdict ``differs``: the paper reports no diverged run;
- ``not comparable``: no run matches, but runs match the setting's keys outside SCALE_KEYS
  (the same method at another scale, e.g. the quick profile's synthetic data);
- ``not run``: not even those.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fednorm.claims.common import PAPERS, Pairs, ambiguity, config_text, selects
from fednorm.config import (
    ConfigError,
    Finite,
    OneOf,
    check,
    fail,
    resolve_budget,
    run_config,
)
from fednorm.io import write_csv, write_text
from fednorm.plan import FIGURE_METRICS
from fednorm.plots.cells import percent, value_label
from fednorm.plots.save import PNG_DPI, save_together
from fednorm.plots.table import cell_text, escape_cell
from fednorm.results import AT, seed_stats, settling
from fednorm.summarize import config_columns

# The keys that set a run's scale, not its method: what the quick profile shrinks to fit a CPU.
# The data (dataset, n_train, n_test, image_size, synthetic_separation) and its augmentation
# (augment, crop_padding: the quick digits are not flipped), the model's size (model, width,
# hidden), the budget and its schedule (batch_size, local_steps, steps, lr, lr_milestones) and
# the evaluation grid (eval_every).
SCALE_KEYS = ("dataset", "n_train", "n_test", "image_size", "synthetic_separation", "augment",
              "crop_padding", "model", "width", "hidden", "batch_size", "local_steps", "steps",
              "lr", "lr_milestones", "eval_every")
TOLERANCE = 2.0  # points (of the metric as shown: % for an accuracy) within which ours agrees
REPRODUCED, DIFFERS, NOT_COMPARABLE, NOT_RUN = "reproduced", "differs", "not comparable", "not run"
VERDICTS = (REPRODUCED, DIFFERS, NOT_COMPARABLE, NOT_RUN)
SECTIONS = ("estimand", "recipes", "claims", "qualitative")  # a claims file's keys
ESTIMAND = "final"  # a run's value where neither the claim (``at``) nor the file names one
_REQUIRED = ("id", "paper", "source", "setting", "value")
_OPTIONAL = {"recipe": None, "metric": "test_accuracy", "at": "final", "spread": None,
             "tolerance": TOLERANCE, "note": ""}

@dataclass(frozen=True)
class Claim:
    """One number of a paper and the runs that reproduce it."""

    id: str
    paper: str
    source: str
    setting: Pairs  # the keys a run must equal, values as the summary writes them
    written: Pairs  # the claim's own setting as written (its recipe's keys left out)
    value: float
    recipe: str | None = None
    metric: str = "test_accuracy"
    at: str = "final"
    spread: float | None = None
    tolerance: float = TOLERANCE
    note: str = ""

    @property
    def method(self) -> Pairs:
        """The setting without its SCALE_KEYS: what a run at another scale must still equal."""
        return tuple((k, v) for k, v in self.setting if k not in SCALE_KEYS)


# ---------------------------------------------------------------------------------------------
# Reading and checking the claims file.


def _resolved(where: str, values: Mapping[str, Any]) -> Pairs:
    """The keys a run must equal (budgets resolved), as the summary writes their values."""
    cfg = run_config(values, where=where)  # every key, value and cross-check, or ConfigError
    columns = config_columns(cfg)
    return tuple((key, columns[key]) for key in resolve_budget(values, where))


def parse_estimand(spec: Mapping[str, Any], where: str = "claims file") -> str:
    """A claims file's ``estimand`` (a key of fednorm.results.AT; absent: ESTIMAND): the value
    of a run that its claims, numeric and in words, use where they name no ``at``."""
    return check(where, "estimand", spec.get("estimand", ESTIMAND), OneOf(tuple(AT)))


def parse_claim(spec: Any, recipes: Mapping[str, Mapping[str, Any]], index: int,
                at: str = ESTIMAND) -> Claim:
    """One entry of ``claims``, checked, its ``at`` ``at`` unless it names one; errors name the
    claim's id (or its index)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"claims[{index}]: expected a mapping of claim keys, got {spec!r}")
    named = isinstance(spec.get("id"), str) and spec["id"]
    where = f"claims: claim '{spec['id']}'" if named else f"claims[{index}]"
    for key in spec:
        if key not in (*_REQUIRED, *_OPTIONAL):
            raise ConfigError(f"{where}: unknown key '{key}'; allowed keys: "
                              f"{[*_REQUIRED, *_OPTIONAL]}")
    missing = [k for k in _REQUIRED if k not in spec]
    if missing:
        raise ConfigError(f"{where}: key '{missing[0]}' is missing; a claim needs {_REQUIRED}")
    fields = {**_OPTIONAL, "at": at, **spec}
    for key in ("id", "source", "note"):
        if not isinstance(fields[key], str) or (key != "note" and not fields[key]):
            raise fail(where, key, fields[key], "a non-empty text" if key != "note" else "text")
    recipe = fields["recipe"]
    if recipe is not None:
        check(where, "recipe", recipe, OneOf(tuple(recipes)))
    written = fields["setting"]
    if not isinstance(written, Mapping) or not written:
        raise fail(where, "setting", written, "a non-empty mapping of run keys to values")
    values = {**(recipes[recipe] if recipe else {}), **written}
    spread = fields["spread"]
    return Claim(
        id=fields["id"],
        paper=check(where, "paper", fields["paper"], OneOf(tuple(PAPERS))),
        source=fields["source"],
        setting=_resolved(f"{where}, " + (f"recipe '{recipe}' + " if recipe else "") + "setting",
                          values),
        written=tuple(written.items()),
        value=float(check(where, "value", fields["value"], Finite())),
        recipe=recipe,
        metric=check(where, "metric", fields["metric"], OneOf(FIGURE_METRICS)),
        at=check(where, "at", fields["at"], OneOf(tuple(AT))),
        spread=None if spread is None else float(check(where, "spread", spread, Finite(0))),
        tolerance=float(check(where, "tolerance", fields["tolerance"], Finite(0))),
        note=fields["note"],
    )


def parse_claims(spec: Any, where: str = "claims file") -> tuple[Claim, ...]:
    """A claims file's numeric claims (``recipes``, ``claims``) checked, in file order, at its
    ``estimand`` (:func:`parse_estimand`) where a claim names no ``at`` (its ``qualitative``
    section is :func:`fednorm.claims.words.parse_words`')."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a mapping with 'claims' (and 'recipes', "
                          f"'qualitative'), got {spec!r}")
    for key in spec:
        if key not in SECTIONS:
            raise ConfigError(f"{where}: unknown key '{key}'; allowed keys: {list(SECTIONS)}")
    at = parse_estimand(spec, where)
    recipes = spec.get("recipes") or {}
    if not isinstance(recipes, Mapping) or not all(
            isinstance(r, Mapping) for r in recipes.values()):
        raise fail(where, "recipes", recipes, "a mapping of names to mappings of run keys")
    entries = spec.get("claims")
    if not isinstance(entries, list) or not entries:
        raise fail(where, "claims", entries, "a non-empty list of claims")
    claims = tuple(parse_claim(entry, recipes, i, at) for i, entry in enumerate(entries))
    ids = [c.id for c in claims]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise fail(where, "id", twice[0], "an id no other claim has")
    return claims


# ---------------------------------------------------------------------------------------------
# The ledger: ours beside the paper's, and the verdict.


def verdict(claim: Claim, mean: float, std: float, n_diverged: int) -> tuple[str, float]:
    """(verdict, threshold) for ours = mean ± std: ``reproduced`` when no seed diverged and
    |mean − value| ≤ threshold = max(tolerance, √(spread² + std²)) (a missing spread, or the std
    of a single seed, counts 0), else ``differs``."""
    spread = claim.spread or 0.0
    threshold = max(claim.tolerance, math.hypot(spread, 0.0 if math.isnan(std) else std))
    ok = n_diverged == 0 and not math.isnan(mean) and abs(mean - claim.value) <= threshold
    return (REPRODUCED if ok else DIFFERS), threshold


def setting_text(pairs: Pairs) -> str:
    """'key=value, ...' (null, true/false, numbers as :g)."""
    return ", ".join(f"{k}={config_text(v)}" for k, v in pairs)


def _other_scale(claim: Claim, like: pd.DataFrame) -> str:
    """The scale keys on which the runs of the claim's method differ from it, in words."""
    parts = []
    for key, value in claim.setting:
        if key in SCALE_KEYS and not selects(like, ((key, value),)).all():
            ours = sorted({config_text(v) for v in like[key]}, key=lambda t: (len(t), t))
            parts.append(f"{key} {'/'.join(ours)} (claim: {config_text(value)})")
    return "ours at another scale: " + "; ".join(parts)


def ledger_row(claim: Claim, summary: pd.DataFrame) -> dict[str, Any]:
    """The ledger's row of one claim (see LEDGER_COLUMNS)."""
    scale = 100.0 if percent(claim.metric) else 1.0
    row: dict[str, Any] = {
        "id": claim.id, "paper": claim.paper, "source": claim.source, "recipe": claim.recipe,
        "setting": setting_text(claim.written), "metric": claim.metric, "at": claim.at,
        "paper_value": claim.value,
        "paper_spread": math.nan if claim.spread is None else claim.spread, "ours_mean": math.nan,
        "ours_std": math.nan, "n_seeds": 0, "n_diverged": 0, "difference": math.nan,
        "threshold": math.nan, "settled": "", "note": claim.note}
    rows = summary[selects(summary, claim.setting)]
    if rows.empty:
        like = summary[selects(summary, claim.method)]
        if like.empty:
            return {**row, "verdict": NOT_RUN, "detail": "no run has its method's keys"}
        return {**row, "verdict": NOT_COMPARABLE, "detail": _other_scale(claim, like)}
    ambiguous = ambiguity(rows)
    if ambiguous:
        return {**row, "verdict": NOT_COMPARABLE, "detail": ambiguous}
    stats = seed_stats(rows, [], y=claim.metric, at=claim.at).iloc[0]
    mean, std = float(stats["mean"]) * scale, float(stats["std"]) * scale
    n_seeds, n_diverged = int(stats["n_seeds"]), int(stats["n_diverged"])
    outcome, threshold = verdict(claim, mean, std, n_diverged)
    detail = (f"{n_diverged} of {rows['run_id'].nunique()} seeds diverged (left out of the "
              "mean)" if n_diverged else "" if n_seeds else f"its runs have no {claim.metric}")
    settled = ""
    if percent(claim.metric):  # the settling rule is on accuracies (fednorm.results.settling)
        settle = settling(rows, y=claim.metric, at=claim.at).iloc[0]
        settled = "yes" if settle["settled"] else "no"
        if not settle["settled"]:
            detail = "; ".join(t for t in (detail, f"not settled: +{100 * settle['gain']:.1f} "
                                           "points over the last quarter of the budget") if t)
    return {**row, "ours_mean": mean, "ours_std": std, "n_seeds": n_seeds,
            "n_diverged": n_diverged, "difference": mean - claim.value,
            "threshold": threshold, "settled": settled, "verdict": outcome, "detail": detail}


LEDGER_COLUMNS = ("id", "paper", "source", "recipe", "setting", "metric", "at", "paper_value",
                  "paper_spread", "ours_mean", "ours_std", "n_seeds", "n_diverged",
                  "difference", "threshold", "settled", "verdict", "detail", "note")


def ledger(claims: Sequence[Claim], summary: pd.DataFrame) -> pd.DataFrame:
    """One row per claim, in file order: the paper's number, ours, their difference (ours −
    paper), the threshold of the verdict and the verdict (see the module's docstring)."""
    return pd.DataFrame([ledger_row(c, summary) for c in claims], columns=list(LEDGER_COLUMNS))


# ---------------------------------------------------------------------------------------------
# Writing it: .csv (the numbers), .md (the ledger as read), .pdf/.png (paper vs ours).


def _paper_text(value: float, spread: float) -> str:
    return f"{value:g}" if math.isnan(spread) else f"{value:g} ± {spread:g}"


def _metric_text(metric: str, at: str) -> str:
    return f"{AT[at]} {value_label(metric)}"


def markdown(table: pd.DataFrame) -> str:
    """The ledger as Markdown: the verdict rule, the count of each verdict, one table per
    paper (its own setting keys and recipe; ours as mean ± std, † where seeds diverged)."""
    counts = table["verdict"].value_counts()
    lines = [
        "# Claims ledger", "",
        "Each number a paper states beside ours: the mean ± std over seeds of the matching "
        "runs' value in the summary (`at`: `final`, the last evaluation point; `max`, the best; "
        "`window`, the mean over the last quarter of the budget). **reproduced**: no "
        "seed diverged and |ours − paper| ≤ max(tolerance, √(σ_paper² + σ_ours²)) (tolerance: "
        f"{TOLERANCE:g} points unless the claim says); **differs**: otherwise; **not "
        "comparable**: runs of the claim's method exist only at another scale (keys "
        f"{', '.join(SCALE_KEYS)}); **not run**: none. `src/fednorm/claims/numbers.py` has the "
        "rules.",
        "",
        "Verdicts: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + ".",
    ]
    header = ["id", "source", "setting", "metric", "paper", "ours", "ours − paper", "verdict",
              "detail"]
    for paper, part in table.groupby("paper", sort=False):
        lines += ["", f"## {PAPERS[paper]}", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * 4 + "---:|" * 3 + "---|---|"]
        for r in part.itertuples(index=False):
            setting = r.setting + (f" ({r.recipe})" if isinstance(r.recipe, str) else "")
            ours = cell_text(r.ours_mean, r.ours_std, r.n_seeds, r.n_diverged, y=r.metric)
            diff = "–" if math.isnan(r.difference) else f"{r.difference:+.2f}"
            cells = [r.id, r.source, setting, _metric_text(r.metric, r.at),
                     _paper_text(r.paper_value, r.paper_spread), ours, diff, r.verdict,
                     r.detail if isinstance(r.detail, str) else ""]
            lines.append("| " + " | ".join(escape_cell(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


VERDICT_COLOURS = {REPRODUCED: "#2ca02c", DIFFERS: "#d62728"}
PAPER_MARKERS = {"fbn": "o", "fixbn": "s", "fedtan": "^"}


def ledger_figure(table: pd.DataFrame) -> Figure:
    """Ours against the paper's number, one point per claim with ours (error bars: the paper's
    spread and ours over seeds), the diagonal and the ±tolerance band around it."""
    shown = table[table["ours_mean"].notna()]
    fig = Figure(figsize=(5.6, 5.2), layout="constrained")
    ax = fig.subplots()
    values = pd.concat([shown["paper_value"], shown["ours_mean"]])
    low, high = (values.min(), values.max()) if len(values) else (0.0, 100.0)
    pad = max(TOLERANCE, 0.05 * (high - low))
    limits = np.array([low - pad, high + pad])
    ax.fill_between(limits, limits - TOLERANCE, limits + TOLERANCE, color="#dddddd", lw=0)
    ax.plot(limits, limits, color="#444444", lw=0.8)
    for r in shown.itertuples(index=False):
        ax.errorbar(r.paper_value, r.ours_mean, xerr=np.nan_to_num(r.paper_spread),
                    yerr=np.nan_to_num(r.ours_std), marker=PAPER_MARKERS[r.paper],
                    color=VERDICT_COLOURS[r.verdict], capsize=2, lw=0.8, ms=5)
        ax.annotate(r.id, (r.paper_value, r.ours_mean), fontsize=5, xytext=(3, 3),
                    textcoords="offset points")
    if shown.empty:
        ax.text(0.5, 0.5, "no claim has runs at this scale\n(see claims.md)", ha="center",
                va="center", transform=ax.transAxes)
    ax.set_xlim(*limits)
    ax.set_ylim(*limits)
    ax.set_aspect("equal")
    ax.set_xlabel("paper")
    ax.set_ylabel("ours (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    handles = [Line2D([], [], ls="none", marker="o", color=c, label=v)
               for v, c in VERDICT_COLOURS.items()]
    handles += [Line2D([], [], ls="none", marker=m, color="#444444", label=p)
                for p, m in PAPER_MARKERS.items() if p in set(shown["paper"])]
    handles.append(Line2D([], [], color="#dddddd", lw=6, label=f"±{TOLERANCE:g} points"))
    ax.legend(handles=handles, fontsize="small", loc="upper left")
    reproduced = int(shown["verdict"].eq(REPRODUCED).sum())
    ax.set_title(f"Paper vs ours: {len(shown)} of {len(table)} claims compared, "
                 f"{reproduced} reproduced", fontsize="medium")
    return fig


def write_ledger(claims: Sequence[Claim], summary: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``stem``.csv, .md, .pdf and .png, all or none (see
    :func:`fednorm.plots.save.save_together`)."""
    table = ledger(claims, summary)
    fig = ledger_figure(table)
    return save_together(stem, {
        ".csv": lambda path: write_csv(path, table),
        ".md": lambda path: write_text(path, markdown(table)),
        ".pdf": lambda path: fig.savefig(path, metadata={"CreationDate": None}),
        ".png": lambda path: fig.savefig(path, dpi=PNG_DPI),
    })
