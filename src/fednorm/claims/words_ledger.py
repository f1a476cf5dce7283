"""The ledger of the claims in words: one row per claim with its estimate, interval, seeds,
degrees of freedom, p, q, its power stated before the runs and its verdict
(:mod:`fednorm.claims.verdicts`), judged once at α on every run of the design (both stages'
runs where it has two). :mod:`fednorm.claims.render` writes it as .csv, .md and .pdf/.png.

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
from typing import Any

import numpy as np
import pandas as pd

from fednorm.claims.common import config_text
from fednorm.claims.power import Power
from fednorm.claims.stats import bh
from fednorm.claims.verdicts import Judged, Unit, deciding, judge
from fednorm.claims.words import (
    CONTRADICTED,
    INCONCLUSIVE,
    NEGLIGIBLE,
    UNDECIDABLE,
    Group,
    Relation,
    Words,
)

WORDS_COLUMNS = ("id", "paper", "source", "words", "experiment", "where", "relation", "metric",
                 "at", "rates", "ours", "margin", "low", "high", "se", "df", "n_units",
                 "n_seeds", "n_diverged", "sesoi", "delta", "p", "q", "q_by", "p_for",
                 "q_for", "q_by_for", "p_against", "q_against", "q_by_against", "p_negligible",
                 "q_negligible", "q_by_negligible", "flip_p", "outlier_seeds", "settled",
                 "own_method", "design_seeds", "noise_sd", "detectable", "needs", "verdict",
                 "detail", "note")


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
        seeds += (f", df {t.df:.0f}, p_for {unit.p_for:.2g}, p_against {unit.p_against:.2g}"
                  f", p_negligible {unit.p_negligible:.2g}"
                  f", sign-flip p {unit.flip_for:.2g} / {unit.flip_against:.2g}")
    parts.append(seeds)
    if unit.outliers:
        parts.append(f"{unit.outliers} seed{'s' if unit.outliers > 1 else ''} > 3 MADs from "
                     "the median margin")
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


def with_q(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its q-values over its p_for and p_against (BH's and BY's), then those of
    each verdict's side (:func:`_verdict_side`)."""
    for side in ("for", "against", "negligible"):
        p = table[f"p_{side}"].astype(float).to_numpy()
        table[f"q_{side}"], table[f"q_by_{side}"] = bh(p), q_by(p)
    return _verdict_side(table)


def _row(judged: Judged, sesoi: float, power: Power | None) -> dict[str, Any]:
    """The ledger's row of one judged claim (see WORDS_COLUMNS); ``power``: its power stated
    before the runs (fednorm.claims.power), an inconclusive claim that could not be decided at
    its design ``undecidable``."""
    claim, units = judged.claim, judged.units
    shown = deciding(units, judged.verdict)
    test = shown.test if shown else None
    common = {u.label: outcome(u) for u in judged.common}
    units = tuple(u if u.label not in common else
                  replace(u, common=f"at the common recipe: {common[u.label]}") for u in units)
    values = "; ".join(f"{u.label}: {u.values}" if u.label else u.values
                       for u in units if u.values)
    needs = sorted({u.needs for u in units if u.needs})
    verdict = judged.verdict
    flip = (shown.flip_against if verdict == CONTRADICTED else shown.flip_for) if shown else 1.0
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
        "p_for": judged.p_for, "p_against": judged.p_against,
        "p_negligible": judged.p_negligible, "flip_p": flip,
        "outlier_seeds": sum(u.outliers for u in units), "settled": _settled_text(units),
        "own_method": claim.own_method,
        "design_seeds": power.seeds if power else math.nan,
        "noise_sd": power.sigma if power else math.nan,
        "detectable": power.detectable if power else math.nan,
        "needs": "" if verdict not in (INCONCLUSIVE, UNDECIDABLE) else ",".join(needs),
        "verdict": verdict, "detail": "; ".join(outcome(u) for u in units),
        "note": claim.note,
    }


def ledger_of(words: Words, judged: Sequence[Judged],
              powers: Mapping[str, Power] | None = None) -> pd.DataFrame:
    """One row per judged claim, in file order, with the ledger's q-values and each claim's
    power (``powers``: claim id -> its power stated before the runs)."""
    powers = powers or {}
    rows = [_row(j, words.rule.sesoi_of(j.claim), powers.get(j.claim.id)) for j in judged]
    return with_q(pd.DataFrame(rows, columns=list(WORDS_COLUMNS)))


def _verdict_side(table: pd.DataFrame) -> pd.DataFrame:
    """``p``, ``q`` and ``q_by``: those of the verdict's side (contradicted: against;
    negligible: p_negligible and its q's; otherwise for)."""
    against = table["verdict"].eq(CONTRADICTED)
    table["p"] = table["p_against"].where(against, table["p_for"])
    negligible = table["verdict"] == NEGLIGIBLE
    table["p"] = table["p_negligible"].where(negligible, table["p"])
    for q in ("q", "q_by"):
        table[q] = table[f"{q}_against"].where(against, table[f"{q}_for"])
        table[q] = table[f"{q}_negligible"].where(negligible, table[q])
    return table


def words_ledger(words: Words, summary: pd.DataFrame,
                 powers: Mapping[str, Power] | None = None) -> pd.DataFrame:
    """One row per qualitative claim, in file order, judged once at α on every run of
    ``summary`` (a two-stage plan's: both stages' runs)."""
    decidable = {cid: p.decidable for cid, p in (powers or {}).items()}
    return ledger_of(words, judge(words, summary, decidable), powers)
