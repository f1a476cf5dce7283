"""The ledger of the claims in words: one row per claim with its estimate, interval, seeds,
degrees of freedom, p, q and verdict (:mod:`fednorm.claims.verdicts`), written as .csv, .md
(counts, the ledger's own permutation null, then one table per paper) and .pdf/.png.

Across the ledger two q-values stand beside each verdict, each over the ledger's claims and
computed separately for p_for and p_against: Benjamini–Hochberg's (``q``), whose false
discovery rate holds for independent or positively dependent p-values, and
Benjamini–Yekutieli's (``q_by``, :func:`q_by`), which holds under any dependence. The ledger's
claims share runs (one run in several claims' units) and point both ways (a claim and its
reverse, a trend and a pair along it), so their p-values may be negatively dependent, where
BH's assumption fails: BY's is the q that keeps its promise here, at the cost of the factor
Σ 1/i (4.7 over 63 claims)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fednorm.claims.common import PAPERS, config_text
from fednorm.claims.stats import bh, per_look
from fednorm.claims.verdicts import (
    Judged,
    Unit,
    compare_all,
    deciding,
    judge,
    judge_compared,
    twin_comparisons,
)
from fednorm.claims.words import (
    BUDGET_LIMITED,
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NOT_RUN,
    VERDICTS,
    Group,
    Relation,
    Words,
)
from fednorm.io import write_csv, write_text
from fednorm.plots.cells import value_label
from fednorm.plots.save import PNG_DPI, save_together
from fednorm.plots.table import escape_cell
from fednorm.results import AT

WORDS_COLUMNS = ("id", "paper", "source", "words", "experiment", "where", "relation", "metric",
                 "at", "rates", "ours", "margin", "low", "high", "se", "df", "n_units",
                 "n_seeds", "n_diverged", "sesoi", "delta", "p", "q", "q_by", "p_for",
                 "q_for", "q_by_for", "p_against", "q_against", "q_by_against", "settled",
                 "own_method", "needs", "verdict", "detail", "note")


def relation_text(claim: Relation) -> str:
    def text(group: Group) -> str:
        return ", ".join(f"{k}={config_text(v)}" for k, v in group)
    slack = f" − {claim.slack:g}" if claim.slack else ""
    if claim.kind == "greater":
        relation = f"[{text(claim.a)}] > [{text(claim.b)}]{slack}"
    elif claim.kind == "best":
        relation = (f"[{text(claim.a)}] > each of (" + ", ".join(f"[{text(g)}]"
                                                                 for g in claim.others)
                    + f"){slack}")
    elif claim.kind == "within":
        relation = f"|[{text(claim.a)}] − [{text(claim.b)}]| ≤ {claim.delta:g}"
    else:
        relation = f"{claim.direction} along {claim.over}" + (f" (slack {claim.slack:g})"
                                                              if claim.slack else "")
    if claim.kind == "trend" and claim.steps == "ends":
        relation += ", first to last"
    return relation + (f", for each {' × '.join(claim.for_each)}" if claim.for_each else "")


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


def outcome(unit: Unit) -> str:
    """A unit in words: its estimate, interval, seeds, df, p's and verdict."""
    head = f"{unit.label}: " if unit.label else ""
    if unit.reason:
        return head + unit.reason
    parts = []
    t = unit.test
    if t is not None:
        interval = "" if math.isnan(t.se) else f" [{t.low:+.1f}, {t.high:+.1f}]"
        parts.append(f"{t.estimate:+.1f}{interval}")
    seeds = f"{unit.n_seeds} seed{'s' if unit.n_seeds != 1 else ''}"
    if t is not None and t.df:
        seeds += f", df {t.df:.0f}, p_for {t.p_for:.2g}, p_against {unit.p_against:.2g}"
    parts.append(seeds)
    if unit.n_diverged:
        parts.append(f"{unit.n_diverged} run{'s' if unit.n_diverged > 1 else ''} diverged "
                     f"({unit.n_against} seed(s) against, {unit.n_for} for)")
    notes = [n for n in (unit.unsettled, unit.common) if n]
    return (head + ", ".join(parts) + f": {unit.verdict}"
            + (f" ({'; '.join(notes)})" if notes else ""))


def q_by(p: Sequence[float]) -> np.ndarray:
    """Benjamini–Yekutieli q-values (the false discovery rate under any dependence: stats.bh
    with method 'by'); NaN stays NaN and is not counted."""
    return bh(p, "by")


def _with_q(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its q-values over its p_for and p_against (BH's and BY's), then those of
    each verdict's side (:func:`_verdict_side`)."""
    for side in ("for", "against"):
        p = table[f"p_{side}"].astype(float).to_numpy()
        table[f"q_{side}"], table[f"q_by_{side}"] = bh(p), q_by(p)
    return _verdict_side(table)


def _row(judged: Judged, sesoi: float) -> dict[str, Any]:
    """The ledger's row of one judged claim (see WORDS_COLUMNS)."""
    claim, units = judged.claim, judged.units
    shown = deciding(units, judged.verdict)
    test = shown.test if shown else None
    common = {u.label: outcome(u) for u in judged.common}
    units = tuple(u if u.label not in common else
                  replace(u, common=f"at the common recipe: {common[u.label]}") for u in units)
    values = "; ".join(f"{u.label}: {u.values}" if u.label else u.values
                       for u in units if u.values)
    needs = sorted({u.needs for u in units if u.needs})
    return {
        "id": claim.id, "paper": claim.paper, "source": claim.source, "words": claim.words,
        "experiment": ", ".join(claim.experiments),
        "where": ", ".join(f"{k}={config_text(v)}" for k, v in claim.where),
        "relation": relation_text(claim), "metric": claim.metric, "at": claim.at,
        "rates": _rates_text(units), "ours": values,
        "margin": test.estimate if test else math.nan,
        "low": test.low if test else math.nan, "high": test.high if test else math.nan,
        "se": test.se if test else math.nan, "df": test.df if test else math.nan,
        "n_units": len(units), "n_seeds": shown.n_seeds if shown else 0,
        "n_diverged": sum(u.n_diverged for u in units),
        "sesoi": sesoi if claim.kind != "within" else math.nan,
        "delta": math.nan if claim.delta is None else claim.delta,
        "p_for": judged.p_for, "p_against": judged.p_against, "settled": _settled_text(units),
        "own_method": claim.own_method,
        "needs": "" if judged.verdict in (HOLDS, CONTRADICTED, NOT_RUN) else ",".join(needs),
        "verdict": judged.verdict, "detail": "; ".join(outcome(u) for u in units),
        "note": claim.note,
    }


def ledger_of(words: Words, judged: Sequence[Judged]) -> pd.DataFrame:
    """One row per judged claim, in file order, with the ledger's q-values."""
    rows = [_row(j, words.rule.sesoi_of(j.claim)) for j in judged]
    return _with_q(pd.DataFrame(rows, columns=list(WORDS_COLUMNS)))


def _verdict_side(table: pd.DataFrame) -> pd.DataFrame:
    """``p``, ``q`` and ``q_by``: those of the verdict's side (contradicted, budget-limited:
    against; otherwise for)."""
    against = table["verdict"].isin([CONTRADICTED, BUDGET_LIMITED])
    table["p"] = table["p_against"].where(against, table["p_for"])
    for q in ("q", "q_by"):
        table[q] = table[f"{q}_against"].where(against, table[f"{q}_for"])
    return table


def words_ledger(words: Words, summary: pd.DataFrame, looks: int = 1) -> pd.DataFrame:
    """One row per qualitative claim, in file order, judged at α / ``looks``."""
    return ledger_of(words, judge(words, summary, looks))


def budget_checked(first: pd.DataFrame, doubled: pd.DataFrame) -> pd.DataFrame:
    """``first`` with its verdicts checked at a multiple of the budget (``doubled``: the same
    claims judged on the runs at that budget, where the second stage trained them):

    - a ``contradicted`` claim stays so only where the doubled runs contradict it too, else
      it is ``budget-limited``, both margins in its detail; with no doubled runs it keeps its
      verdict, and its detail says it was not rechecked, unless it is about its paper's own
      method: that one is ``inconclusive`` (needs budget) until twice the budget confirms it;
    - an ``inconclusive`` claim that waited on a side still climbing (``needs`` budget) takes
      the doubled runs' verdict where that is firm.

    The q-values (BH's and BY's) are computed again over the final p's."""
    out = first.copy()
    again = doubled.set_index("id")
    for i, row in out.iterrows():
        other = again.loc[row["id"]] if row["id"] in again.index else None
        rechecked = other is not None and other["verdict"] != NOT_RUN
        margins = (f"at 1× the budget: {_number(row['margin'], '+.1f')}, {row['verdict']}; at "
                   f"2×: {_number(other['margin'], '+.1f')}, {other['verdict']}"
                   if rechecked else "")
        if row["verdict"] == CONTRADICTED:
            if not rechecked and row["own_method"]:
                out.loc[i, ["verdict", "needs"]] = [INCONCLUSIVE, "budget"]
                out.loc[i, "detail"] = (f"contradicted at 1× the budget, not rechecked at twice "
                                        f"it (a paper's own method): {row['detail']}")
                continue
            if not rechecked:
                out.loc[i, "detail"] = f"{row['detail']} (not rechecked at twice the budget)"
                continue
            if other["verdict"] != CONTRADICTED:
                out.loc[i, "verdict"] = BUDGET_LIMITED
            out.loc[i, "detail"] = f"{margins} ({other['detail']}); 1×: {row['detail']}"
        elif (row["verdict"] == INCONCLUSIVE and "budget" in str(row["needs"]) and rechecked
              and other["verdict"] in (HOLDS, CONTRADICTED)):
            for column in ("margin", "low", "high", "se", "df", "n_seeds", "p_for", "p_against",
                           "settled", "verdict", "needs"):
                out.loc[i, column] = other[column]
            out.loc[i, "detail"] = f"{margins} ({other['detail']}); 1×: {row['detail']}"
    return _with_q(out)


def staged_ledger(words: Words, summary: pd.DataFrame,
                  record: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """The ledger of a one-stage plan (``record`` None), or of a two-stage one: every claim
    judged on both stages' runs at α / looks, its contradictions and its waits on a side still
    climbing checked on the second stage's runs at a multiple of the budget
    (:func:`budget_checked`; fednorm.claims.stage2 has the record)."""
    if record is None:
        return words_ledger(words, summary)
    looks = int(record["looks"])
    twins = {e["source"]: e["run_id"] for e in record["runs"] if e.get("source")}
    compared = compare_all(words, summary)  # no claim selects an '@x' twin
    first = ledger_of(words, judge_compared(words, compared, looks))
    twinned = twin_comparisons(words, compared, summary, twins, f"@x{record['budget']}")
    doubled = ledger_of(words, judge_compared(words, twinned, looks))
    return budget_checked(first, doubled)


# ---------------------------------------------------------------------------------------------
# Writing it: .csv, .md (counts first, the null, then one table per paper), .pdf/.png.


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


def _number(x: float, spec: str) -> str:
    return "–" if isinstance(x, float) and math.isnan(x) else format(x, spec)


def words_markdown(table: pd.DataFrame, words: Words, looks: int = 1,
                   null_lines: Sequence[str] = ()) -> str:
    counts = table["verdict"].value_counts()
    alpha = words.rule.alpha
    per = per_look(alpha, looks)
    look = f" (α = {per:g} a look, {looks} looks)" if looks > 1 else ""
    lines = [
        "# Claims in words", "",
        "What the papers state in words, judged on our runs: each verdict a test at one-sided "
        f"α = {alpha:g}{look}, runs paired by seed, each unit tested on its own margins (the "
        "paired t: exact whatever the settings' noise and whatever runs units share; "
        "docs/claims.md, The rule). **holds**: the claim's opposite is rejected; "
        "**contradicted**: the claim is rejected by at least its smallest effect of interest "
        "(sesoi; near-equalities: the interval outside ±δ); **budget-limited**: contradicted, "
        "but not at twice the budget; **inconclusive**: neither (`needs`: more seeds, or more "
        "budget for a side still climbing); **not run**: no runs. The interval is the "
        f"{100 * (1 - 2 * per):g} % t interval of the deciding unit's margin; q: "
        "Benjamini–Hochberg over the ledger, q BY: Benjamini–Yekutieli (claims share runs and "
        "point both ways: BY's rate holds under any dependence).", "",
        "Verdicts: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + ".", "",
        *counts_text(table), "", *null_lines,
    ]
    header = ["id", "source", "the paper's words", "relation (where)", "lr", "ours",
              "margin [interval]", "seeds", "p", "q", "q BY", "settled", "verdict", "detail"]
    for paper, part in table.groupby("paper", sort=False):
        lines += ["", f"## {PAPERS[paper]}", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * 6 + "---:|" * 5 + "---|---|---|"]
        for r in part.itertuples(index=False):
            margin = _number(r.margin, "+.1f")
            if not math.isnan(r.low):
                margin += f" [{r.low:+.1f}, {r.high:+.1f}]"
            relation = r.relation + (f" ({r.where})" if r.where else "")
            relation += f"; {AT.get(r.at, r.at)} {value_label(r.metric)}"
            cells = [r.id, r.source, f"“{r.words}”", relation, r.rates or "–", r.ours or "–",
                     margin, r.n_seeds, _number(r.p, ".2g"), _number(r.q, ".2g"),
                     _number(r.q_by, ".2g"), r.settled or "–", f"**{r.verdict}**", r.detail]
            lines.append("| " + " | ".join(escape_cell(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


WORD_COLOURS = {HOLDS: "#2ca02c", CONTRADICTED: "#d62728", BUDGET_LIMITED: "#9467bd",
                INCONCLUSIVE: "#ff7f0e", NOT_RUN: "#999999"}


def words_figure(table: pd.DataFrame) -> Figure:
    """One row per claim: the deciding margin and its interval, against 0 (a sign relation)
    or the ±δ band (within), coloured by verdict; claims without a margin are named at 0,
    hollow."""
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
        elif math.isnan(r.low):
            ax.plot(r.margin, y, marker="o", mfc="none", color=colour, ms=4)
        else:
            ax.errorbar(r.margin, y, xerr=[[r.margin - r.low], [r.high - r.margin]],
                        marker="o", color=colour, capsize=2, lw=0.8, ms=4)
    ax.set_yticks(range(len(table)), [f"{r.id} ({r.paper})" for r in
                                      table.itertuples(index=False)], fontsize=5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("margin the claim says is > 0 (within: |margin| ≤ δ, band), points")
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], ls="none", marker="o", color=c, label=v)
               for v, c in WORD_COLOURS.items()]
    ax.legend(handles=handles, fontsize="small", loc="lower right")
    held = int(table["verdict"].eq(HOLDS).sum())
    ax.set_title(f"Claims in words: {held} of {len(table)} hold (estimate, t interval)",
                 fontsize="medium")
    if table.empty:
        ax.text(0.5, 0.5, "no qualitative claims", ha="center", va="center",
                transform=ax.transAxes)
    return fig


def write_words(table: pd.DataFrame, words: Words, stem: str | Path, *, looks: int = 1,
                null_lines: Sequence[str] = ()) -> list[Path]:
    """Write ``stem``.csv, .md, .pdf and .png of a ledger ``table``, all or none."""
    fig = words_figure(table)
    return save_together(stem, {
        ".csv": lambda path: write_csv(path, table),
        ".md": lambda path: write_text(path, words_markdown(table, words, looks, null_lines)),
        ".pdf": lambda path: fig.savefig(path, metadata={"CreationDate": None}),
        ".png": lambda path: fig.savefig(path, dpi=PNG_DPI),
    })

