"""Verdicts of the claims in words (:mod:`fednorm.claims.words`), each a test with a stated
error rate (:mod:`fednorm.claims.stats` has the statistics; docs/claims.md the rule on a page).

A claim is judged in *units*, each a contrast over its *sides*, the seeds of one setting each
(:mod:`fednorm.claims.comparisons` measures them). A unit's margin is a contrast of one linear
model of the experiments it was measured on (the claim's, or the ``tuning`` experiment's at
each method's own learning rate) and its measure: settings + seeds as blocks (:func:`pools`,
:func:`fednorm.claims.stats.fit_contrasts`), tested on its own margins (the paired t: exact
whatever it shares with other units and whatever each setting's noise; stats' docstring says
why, by simulation); a unit that two claims share enters once.

A unit's verdict is the rule's (:mod:`fednorm.claims.rule`, one page: the claim and its mirror
judged alike, one look at α). **A diverged run** has no value: in a sign relation a diverged
run on the side the claim says is better is a seed *against* the claim, one on the worse side
a seed *for* it; in ``within``, a diverged run is a seed against. Whether each side settled (a
test of its gain over the last quarter of the budget, :func:`fednorm.results.settling`) is
reported, never a veto; no verdict is rechecked at another budget.

**Each method at its own values** (:mod:`fednorm.claims.comparisons`): a claim whose compared
groups name a method key is judged at each side's values chosen on validation accuracy, on
fresh seeds the choice never saw; a side whose chosen value is at an edge of its (extended) grid
withholds a verdict that disfavours it (``inconclusive``, needs: tuning). A paper's own method
is judged as any other, at the rates its row names.

A claim's verdict: ``not run`` when no unit has runs; ``inconclusive`` (refused) when a group's
runs differ in more than their seed; else the rule's (:func:`fednorm.claims.rule.claim_verdict`).
Its ``p_for`` and ``p_negligible`` are the largest unit's (intersection-union tests), its
``p_against`` the smallest Holm-adjusted one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fednorm.claims.comparisons import (
    Comparison,
    Margins,
    Side,
    compare_all,
    margins,
)
from fednorm.claims.rule import CONTRADICTED as CONTRADICTED_CODE
from fednorm.claims.rule import HOLDS as HOLDS_CODE
from fednorm.claims.rule import INCONCLUSIVE as INCONCLUSIVE_CODE
from fednorm.claims.rule import NEGLIGIBLE as NEGLIGIBLE_CODE
from fednorm.claims.rule import UNDECIDABLE as UNDECIDABLE_CODE
from fednorm.claims.rule import claim_verdict as rule_claim_verdict
from fednorm.claims.rule import decide, floored, outlier_seeds, sign_flip_ps
from fednorm.claims.stats import Test, equivalence_test, fit_contrasts, sign_test
from fednorm.claims.words import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_RUN,
    UNDECIDABLE,
    Relation,
    Rule,
    Words,
)
from fednorm.metrics import DIVERGED_MARK


@dataclass(frozen=True)
class Unit:
    """One comparison of a claim and its outcome."""

    label: str  # the for_each value and/or the pair, '' for the only one
    verdict: str
    values: str = ""  # each side's mean over its seeds, in words
    test: Test | None = None
    p_for: float = 1.0  # the p of the claim's opposite (the t test's, or the sign test's)
    p_against: float = 1.0  # of the claim's mirror (its own test, unadjusted)
    n_for: int = 0
    n_against: int = 0
    n_diverged: int = 0
    reason: str = ""
    settled: bool | None = None  # every side settled (None: no accuracy measured)
    unsettled: str = ""  # the sides still climbing and what that does to the verdict
    rates: str = ""  # the learning rate each side used
    common: str = ""  # at tuned rates: the outcome at the common recipe's rate
    # what a decision would need: 'seeds' (an interval that straddles it), 'tuning' (a side
    # not at its tuned, interior values), '' (decided or not measurable)
    needs: str = ""
    p_negligible: float = 1.0  # of |margin + slack| ≥ sesoi (TOST; 1 for a near-equality)
    p_holm: float = 1.0  # p_against, Holm-adjusted over the claim's units
    flip_for: float = math.nan  # the exact sign-flip p's of the same margins, beside the t's
    flip_against: float = math.nan
    outliers: int = 0  # seeds whose margin is > 3 MADs from the median (a collapsing seed)

    @property
    def n_seeds(self) -> int:
        return self.test.n if self.test else 0

    @property
    def estimate(self) -> float:
        return self.test.estimate if self.test else math.nan


# ---------------------------------------------------------------------------------------------
# Pools, tests and verdicts.


@dataclass(frozen=True)
class Fit:
    """A unit's contrast under its experiment's model (stats.fit_contrasts): ``estimate``, its
    standard error on ``df`` degrees of freedom (NaN, 0: none)."""

    estimate: float = math.nan
    se: float = math.nan
    df: float = 0.0


def _setting(side: Side) -> tuple[Any, ...]:
    """What makes two units' sides the same setting of a model: their runs (a side with none
    is a setting of its own)."""
    return side.run_ids if side.run_ids else ("no runs", id(side))


def model_of(found: Sequence[Comparison]) -> tuple[np.ndarray, np.ndarray]:
    """The settings × seeds values (NaN: a missing or diverged run) of the distinct settings
    of ``found`` (units of one experiment and measure, in order of first appearance) and each
    unit's contrast over those settings (units, settings)."""
    settings: dict[tuple[Any, ...], Side] = {}
    for unit in found:
        for side in unit.sides:
            settings.setdefault(_setting(side), side)
    index = {k: i for i, k in enumerate(settings)}
    seeds = sorted(set().union(*(set(s.runs.index) for s in settings.values())))
    column = {seed: i for i, seed in enumerate(seeds)}
    values = np.full((len(settings), len(seeds)), math.nan)
    for i, side in enumerate(settings.values()):
        alive = side.runs[~side.runs["diverged"].astype(bool)]["value"].dropna()
        for seed, value in alive.items():
            values[i, column[seed]] = float(value)
    contrasts = np.zeros((len(found), len(settings)))
    for u, unit in enumerate(found):
        for side, c in zip(unit.sides, unit.coefs, strict=True):
            contrasts[u, index[_setting(side)]] += c
    return values, contrasts


def pools(units: Sequence[tuple[Comparison, Margins]]) -> dict[tuple[Any, ...], Fit]:
    """Per distinct unit (its ``key``): its contrast of the linear model of its experiments
    and measure (:func:`model_of`: settings + seeds as blocks; a unit that two claims share
    enters once), its standard error by the rule's variance model
    (:func:`fednorm.claims.stats.fit_contrasts`, 'unit': the unit's own margins, n − 1 df)."""
    groups: dict[tuple[Any, ...], dict[tuple[Any, ...], Comparison]] = {}
    for unit, _ in units:
        if unit.sides:
            groups.setdefault(unit.group, {}).setdefault(unit.key, unit)
    out = {}
    for found in groups.values():
        values, contrasts = model_of(list(found.values()))
        if not values.size:
            continue
        fit = fit_contrasts(values, contrasts)
        for u, key in enumerate(found):
            out[key] = Fit(float(fit.estimate[u]), float(fit.se[u]), float(fit.df[u]))
    return out


def _test(unit: Comparison, m: Margins, claim: Relation, rule: Rule, fit: Fit,
          alpha: float) -> Test | None:
    """The unit's t test on its contrast, its sd floored at the values' lattice
    (fednorm.claims.rule.floored)."""
    if not m.values:
        return None
    n = len(m.values)
    se = float(floored(fit.se, n, sum(c * c for c in unit.coefs), rule.lattice))
    if claim.kind == "within":
        assert claim.delta is not None
        return equivalence_test(fit.estimate, se, fit.df, n, delta=claim.delta, alpha=alpha)
    return sign_test(fit.estimate, se, fit.df, n, slack=claim.slack, sesoi=rule.sesoi_of(claim),
                     alpha=alpha)


def _values_text(sides: Sequence[Side]) -> str:
    parts = []
    for side in sides:
        diverged = int(side.runs["diverged"].sum())
        mean = side.runs["value"].mean()
        text = "–" if math.isnan(mean) else f"{mean:.1f}"
        parts.append(f"{side.label}: {text}" + (f" {DIVERGED_MARK}{diverged}" if diverged else ""))
    return "; ".join(parts)


def edge_code(unit: Comparison) -> int:
    """Which of a unit's sides sit at an edge of their tuning grid, by the sign of their
    coefficient (fednorm.claims.rule.decide's ``edge``): +1 a positive side, −1 a negative
    one, 2 both, 0 none."""
    pos = any(s.edge for s, c in zip(unit.sides, unit.coefs, strict=True) if c > 0)
    neg = any(s.edge for s, c in zip(unit.sides, unit.coefs, strict=True) if c < 0)
    return 2 if pos and neg else 1 if pos else -1 if neg else 0


def _decided(units: Sequence[tuple[Comparison, Margins]], tests: Sequence[Test | None],
             claim: Relation, rule: Rule, alpha: float) -> tuple[np.ndarray, ...]:
    """The rule's one function (fednorm.claims.rule.decide) on a claim's units: (codes, p_for,
    p_against, p_negligible, Holm-adjusted p_against), and the sign-flip p's and outlier
    seeds of their margins."""
    k = len(units)
    nan = math.nan
    estimate = np.array([t.estimate if t else nan for t in tests])
    se = np.array([t.se if t else nan for t in tests])
    df = np.array([t.df if t else 0.0 for t in tests])
    n = np.array([len(m.values) for _, m in units])
    seeds = max((len(m.values) for _, m in units), default=0)
    shifted = np.full((k, seeds), nan)
    for i, (_, m) in enumerate(units):
        shifted[i, :len(m.values)] = np.asarray(m.values, dtype=float) + claim.slack
    n_for = np.array([m.n_for for _, m in units])
    n_against = np.array([m.n_against for _, m in units])
    ups = (shifted > 0).sum(axis=-1) + n_for
    downs = (shifted < 0).sum(axis=-1) + n_against
    within = claim.kind == "within"
    delta = claim.delta if claim.delta is not None else nan
    edge = np.array([edge_code(u) if u.sides else 0 for u, _ in units])
    decided = decide(estimate, se, df, n, ups, downs, claim=np.zeros(k, dtype=int),
                     within=np.full(k, within), slack=np.full(k, claim.slack),
                     sesoi=np.full(k, rule.sesoi_of(claim)), delta=np.full(k, delta),
                     alpha=alpha, min_seeds=rule.min_seeds, n_for=n_for, n_against=n_against,
                     edge=edge)
    return (*decided, *sign_flip_ps(shifted), outlier_seeds(shifted, rule.lattice))


VERDICT_OF = {HOLDS_CODE: HOLDS, CONTRADICTED_CODE: CONTRADICTED, NEGLIGIBLE_CODE: NEGLIGIBLE,
              INCONCLUSIVE_CODE: INCONCLUSIVE, UNDECIDABLE_CODE: UNDECIDABLE}
CODE_OF = {v: k for k, v in VERDICT_OF.items()}


def judge_claim(claim: Relation, units: Sequence[tuple[Comparison, Margins]],
                fit_of: dict[tuple[Any, ...], Fit], rule: Rule, alpha: float) -> list[Unit]:
    """Every unit of ``claim`` judged: tests of its contrast of its experiment's model
    (:func:`pools`), decided by the rule (fednorm.claims.rule.decide)."""
    tests = [_test(u, m, claim, rule, fit_of.get(u.key, Fit()), alpha) if u.sides else None
             for u, m in units]
    codes, p_for, p_against, p_negligible, p_holm, flip_for, flip_against, outliers = (
        _decided(units, tests, claim, rule, alpha))
    out = []
    for i, ((unit, m), test) in enumerate(zip(units, tests, strict=True)):
        if not unit.sides:
            verdict = NOT_RUN if unit.reason.startswith("no run") else INCONCLUSIVE
            out.append(Unit(unit.label, verdict, reason=unit.reason))
            continue
        verdict = VERDICT_OF[int(codes[i])]
        at_edge = edge_code(unit) != 0
        needs = ("tuning" if at_edge and verdict == INCONCLUSIVE else
                 "seeds" if verdict == INCONCLUSIVE else "")
        climbing = [s for s in unit.sides if s.settled is False]
        notes = ["not settled: " + ", ".join(f"{s.label} +{s.gain:.1f}" for s in climbing)
                 + " points over the last quarter of the budget"] if climbing else []
        if at_edge:
            notes.append(EDGE)
        measured = [s.settled for s in unit.sides if s.settled is not None]
        out.append(Unit(unit.label, verdict, _values_text(unit.sides), test, float(p_for[i]),
                        float(p_against[i]), m.n_for, m.n_against,
                        sum(int(s.runs["diverged"].sum()) for s in unit.sides),
                        settled=all(measured) if measured else None,
                        unsettled="; ".join(notes),
                        rates="; ".join(f"{s.label}: {s.rate}" for s in unit.sides)
                        + unit.note, needs=needs, p_negligible=float(p_negligible[i]),
                        p_holm=float(p_holm[i]), flip_for=float(flip_for[i]),
                        flip_against=float(flip_against[i]), outliers=int(outliers[i])))
    return out


EDGE = ("a side's chosen value is at an edge of its tuning grid: a verdict that disfavours it "
        "is withheld (needs: tuning)")


def claim_verdict(units: Sequence[Unit], alpha: float, decidable: bool = True) -> str:
    """A claim's verdict from its units' (fednorm.claims.rule.claim_verdict; ``not run`` when
    no unit has runs, ``inconclusive`` when a group's runs differ in more than their seed)."""
    verdicts = [u.verdict for u in units]
    if not units or all(v == NOT_RUN for v in verdicts):
        return NOT_RUN
    if any(u.verdict == INCONCLUSIVE and u.reason for u in units):
        return INCONCLUSIVE  # refused: a selection that is not the seeds of one setting
    # a unit without runs is undecided: a claim holds (or is negligible) only where every unit
    # of it was judged so
    code = rule_claim_verdict([CODE_OF.get(u.verdict, INCONCLUSIVE_CODE) for u in units],
                              [u.p_holm for u in units], alpha, decidable)
    return VERDICT_OF[code]


def claim_p(units: Sequence[Unit]) -> tuple[float, float, float]:
    """The claim's (p_for, p_against, p_negligible): the largest unit p_for and p_negligible
    (the intersection-union tests of 'every unit holds' and 'every unit is negligible') and the
    smallest Holm-adjusted p_against (NaN when no unit was judged)."""
    judged = [u for u in units if not u.reason]
    if not judged:
        return math.nan, math.nan, math.nan
    return (max(u.p_for for u in units), min(u.p_holm for u in judged),
            max(u.p_negligible for u in judged))


def deciding(units: Sequence[Unit], verdict: str) -> Unit | None:
    """The unit a claim's row shows: the contradicting one with the smallest adjusted p, else
    the weakest (the largest p_for)."""
    tested = [u for u in units if u.test is not None or u.n_for or u.n_against]
    if verdict == CONTRADICTED:
        against = [u for u in units if u.verdict == CONTRADICTED]
        return min(against, key=lambda u: u.p_holm)
    return max(tested, key=lambda u: u.p_for) if tested else None


@dataclass(frozen=True)
class Judged:
    """A claim and its judged units (at tuned rates: ``common`` holds the common rate's)."""

    claim: Relation
    units: tuple[Unit, ...]
    common: tuple[Unit, ...] = ()
    verdict: str = INCONCLUSIVE
    p_for: float = math.nan
    p_against: float = math.nan
    p_negligible: float = math.nan


def judge_compared(words: Words, compared: dict[str, list[Comparison]],
                   decidable: Mapping[str, bool] | None = None) -> list[Judged]:
    """Every claim of ``words`` judged on its units ``compared`` (claim id -> its units) at
    α (one look), each unit a contrast of its experiment's model; ``decidable``: claim id ->
    whether its power stated before the runs can decide it (else an inconclusive claim is
    ``undecidable``)."""
    decidable = decidable or {}
    alpha = words.rule.alpha
    within = {c.id: c.kind == "within" for c in words.claims}
    measured = {cid: [(u, margins(u, within[cid]) if u.sides else Margins(()))
                      for u in units] for cid, units in compared.items()}
    common = {cid: [(u.common, margins(u.common, within[cid])) for u, _ in found if u.common]
              for cid, found in measured.items()}
    fit_of = pools([x for found in (*measured.values(), *common.values()) for x in found])
    out = []
    for claim in words.claims:
        units = judge_claim(claim, measured[claim.id], fit_of, words.rule, alpha)
        at_common = judge_claim(claim, common[claim.id], fit_of, words.rule, alpha)
        verdict = claim_verdict(units, alpha, decidable.get(claim.id, True))
        out.append(Judged(claim, tuple(units), tuple(at_common), verdict, *claim_p(units)))
    return out


def judge(words: Words, summary: pd.DataFrame,
          decidable: Mapping[str, bool] | None = None) -> list[Judged]:
    """Every claim of ``words`` judged on ``summary`` at α, one look."""
    return judge_compared(words, compare_all(words, summary), decidable)
