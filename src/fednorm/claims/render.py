"""The claims-in-words ledger written out, after it is judged (fednorm.claims.words_ledger):
.csv, .md (what the verdicts mean, the counts, the calibration and the pre-registration, then one
table per paper) and .pdf/.png (each claim's margin and interval). Nothing here decides a
verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fednorm.claims.common import PAPERS
from fednorm.claims.words import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_RUN,
    UNDECIDABLE,
    VERDICTS,
    Words,
)
from fednorm.io import write_csv, write_text
from fednorm.plots.cells import value_label
from fednorm.plots.save import PNG_DPI, save_together
from fednorm.plots.table import escape_cell
from fednorm.results import AT


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


def words_markdown(table: pd.DataFrame, words: Words, header: Sequence[str] = ()) -> str:
    counts = table["verdict"].value_counts()
    alpha = words.rule.alpha
    lines = [
        "# Claims in words", "",
        "What the papers state in words, judged on our runs: each verdict a test at one-sided "
        f"α = {alpha:g}, one look on a design fixed before the runs, runs paired by seed, each "
        "unit tested on its own margins (the paired t: exact whatever the settings' noise and "
        "whatever runs units share; docs/claims.md). **holds**: the claim's opposite is "
        "rejected (every unit); **contradicted**: the claim's mirror holds on some unit, Holm over "
        "the claim's units (near-equalities: the interval outside ±δ); **negligible**: neither, "
        "and an equivalence test puts every unit's margin within ±sesoi, the smallest effect of "
        "interest; a claim and its mirror are judged by the same rule; **inconclusive**: "
        "none of these (`needs`: seeds, or tuning where a verdict would disfavour a side whose "
        "chosen value sits at an edge of its grid); "
        "**undecidable**: inconclusive where the power stated before the runs said its seeds "
        "could not decide it; **not run**: no runs. *detectable*: the margin its design finds "
        "with power 0.8 (near-equalities: the δ it needs), from seed noise measured on other "
        "seeds. The interval is the "
        f"{100 * (1 - 2 * alpha):g} % t interval of the deciding unit's margin; q: "
        "Benjamini–Hochberg over the ledger, q BY: Benjamini–Yekutieli (claims share runs and "
        "point both ways: BY's rate holds under any dependence).", "",
        "Verdicts: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + ".", "",
        *counts_text(table), "", *header,
    ]
    columns = ["id", "source", "the paper's words", "relation (where)", "lr", "ours",
               "margin [interval]", "seeds", "detectable", "p", "q", "q BY", "settled",
               "verdict", "detail"]
    for paper, part in table.groupby("paper", sort=False):
        lines += ["", f"## {PAPERS[paper]}", "", "| " + " | ".join(columns) + " |",
                  "|" + "---|" * 6 + "---:|" * 6 + "---|---|---|"]
        for r in part.itertuples(index=False):
            margin = _number(r.margin, "+.1f")
            if not math.isnan(r.low):
                margin += f" [{r.low:+.1f}, {r.high:+.1f}]"
            relation = r.relation + (f" ({r.where})" if r.where else "")
            relation += f"; {AT.get(r.at, r.at)} {value_label(r.metric)}"
            cells = [r.id, r.source, f"“{r.words}”", relation, r.rates or "–", r.ours or "–",
                     margin, r.n_seeds, _number(r.detectable, ".1f"), _number(r.p, ".2g"),
                     _number(r.q, ".2g"), _number(r.q_by, ".2g"), r.settled or "–",
                     f"**{r.verdict}**", r.detail]
            lines.append("| " + " | ".join(escape_cell(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


WORD_COLOURS = {HOLDS: "#2ca02c", CONTRADICTED: "#d62728", NEGLIGIBLE: "#1f77b4",
                INCONCLUSIVE: "#ff7f0e", UNDECIDABLE: "#bcbd22", NOT_RUN: "#999999"}


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


def write_words(table: pd.DataFrame, words: Words, stem: str | Path,
                header: Sequence[str] = ()) -> list[Path]:
    """Write ``stem``.csv, .md, .pdf and .png of a ledger ``table``, all or none."""
    fig = words_figure(table)
    return save_together(stem, {
        ".csv": lambda path: write_csv(path, table),
        ".md": lambda path: write_text(path, words_markdown(table, words, header)),
        ".pdf": lambda path: fig.savefig(path, metadata={"CreationDate": None}),
        ".png": lambda path: fig.savefig(path, dpi=PNG_DPI),
    })

