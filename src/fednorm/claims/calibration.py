"""The words ledger's error rates by a parametric bootstrap of the ledger itself, judged by the
rule's one function (:func:`fednorm.claims.rule.verdict_codes`).

**The world.** Each claim's judged units are contrasts over the distinct settings of their
experiments (:func:`fednorm.claims.verdicts.model_of`: a setting two units share is one row, so
their shared runs stay shared in every draw). Setting j of seed s is drawn x_js = b_s + μ_j +
σ_j ε_js on the seeds the ledger has for it (a missing or diverged run stays missing), then
rounded to the values' lattice h: μ_j is the setting's mean over its seeds, σ_j its own sd
from the residuals of settings + seeds (unequal noise kept, the seed's common part removed:
:func:`spreads`), floored at the rounding sd h / √12; a setting with one seed takes the median
σ of its claim's other settings, else of the ledger's. b_s ~ N(0, median σ²) is a seed's
common part: it cancels in every margin, and a rule that failed to pair would see it.

**The boundaries.** *False holds*: each unit in turn is moved to the boundary of its ``holds``
null, the least-norm shift of the means along its contrast c, μ' = μ + c (b − c·μ) / |c|² (sign
relations: margin + slack = 0; ``within``: margin = δ and = −δ, the worse of the two), the other
units staying where the shift leaves them; the claim's rate is its least favourable unit's
share of draws in which that unit holds (an upper bound on the claim's: it holds only when all
its units do). *False contradictions*: all the claim's units at once on the boundary of
``contradicted`` (sign: margin + slack = −sesoi; ``within``: |margin| = δ, on the side of each
unit's fitted margin), by least squares, μ' = μ + C⁺(b − Cμ); the claim's rate is the share of
draws with any unit contradicted (Holm over its units, as the ledger judges). Where no means put
every unit on it at once (C of deficient row rank), least squares leaves some units past it and
others short: the table's ``exact`` says whether each claim's were all on it.

Left out: units with fewer than ``min_seeds`` seeds with a margin (the ledger judges them by
the sign test on diverged runs alone; Holm then runs over fewer units, which can only raise
false contradictions); diverged runs count for or against no unit in a draw (they veto
neither verdict), which can only raise both rates. Each rate's Monte Carlo standard error is
sqrt(p (1 − p) / R) with p = max(rate, α).

    table = calibrate(words, compare_all(words, summary))
    lines = calibration_lines(table, words.rule.alpha)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fednorm.claims.comparisons import Comparison
from fednorm.claims.rule import CONTRADICTED, HOLDS, verdict_codes
from fednorm.claims.verdicts import model_of
from fednorm.claims.words import Relation, Rule, Words

REPLICATES = 400
SEED = 20250555  # with each claim's index, the seed of its draws: the same table every run
RATES = ("holds", "contradicted")


def seeds_of(values: np.ndarray, contrasts: np.ndarray) -> np.ndarray:
    """Per unit: the seeds on which every setting it involves has a value (its margins)."""
    return (np.isfinite(values)[None] | (contrasts == 0)[:, :, None]).all(axis=1).sum(axis=1)


def design_of(units: Sequence[Comparison], min_seeds: int
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """(values settings × seeds, contrasts units × settings, units left out) of a claim's
    ``units`` with sides (:func:`model_of`: one measure, the claim's; a setting is its runs,
    whatever pool its unit joins, so runs stay shared across pools too), keeping the units
    with ``min_seeds`` seeds with a margin and the settings they involve."""
    judged = [u for u in units if u.sides]
    if not judged:
        return np.zeros((0, 0)), np.zeros((0, 0)), 0
    values, contrasts = model_of(judged)
    # a unit whose sides are one setting (its margin 0 by construction) has nothing to draw
    drawn = (seeds_of(values, contrasts) >= max(min_seeds, 1)) & (contrasts != 0).any(axis=1)
    used = (contrasts[drawn] != 0).any(axis=0)
    return values[used], contrasts[np.ix_(drawn, used)], int((~drawn).sum())


def spreads(values: np.ndarray, lattice: float, fallback: float) -> tuple[np.ndarray, np.ndarray]:
    """Each setting's (mean, sd) over its seeds, the sd from the residuals of settings + seeds
    (the seed's common part removed): r_js = x_js − x̄_j − ḡ_s, ḡ_s the seed's mean deviation
    over the K settings, v_j = Σ_s r_js² / (n_j − 1). E v_j = (1 − 2/K) σ_j² + Σ_i σ_i² / K²,
    solved for each σ_j² (unequal noise kept; K = 2 cannot tell the two apart and splits their
    sum equally, which keeps a pair's margin variance); a setting with one seed takes the
    median of the others' (else ``fallback``), every sd floored at the rounding sd
    lattice / √12."""
    seen = np.isfinite(values)
    k = len(values)
    n = seen.sum(axis=1)
    means = np.where(seen, values, 0.0).sum(axis=1) / np.maximum(n, 1)
    centred = np.where(seen, values - means[:, None], 0.0)
    if k > 1:
        block = centred.sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
        centred = np.where(seen, centred - block[None], 0.0)
    v = np.square(centred).sum(axis=1) / np.maximum(n - 1, 1)
    if k > 2:
        total = v.sum() / (1 - 1 / k)
        variances = (v - total / k**2) / (1 - 2 / k)
    elif k == 2:
        variances = np.full(2, v.sum() / (1 - 1 / k) / 2)
    else:
        variances = v
    sds = np.sqrt(np.maximum(variances, 0.0))
    own = n > 1
    sds = np.where(own, sds, np.median(sds[own]) if own.any() else fallback)
    return means, np.maximum(np.nan_to_num(sds), lattice / math.sqrt(12.0))


def to_boundary(means: np.ndarray, contrasts: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The means moved least-squares so that contrasts @ means = bounds, μ' = μ + C⁺(b − Cμ)
    (one unit: the least-norm shift along its contrast)."""
    c = np.atleast_2d(contrasts)
    return means + np.linalg.pinv(c) @ (np.asarray(bounds, dtype=float) - c @ means)


def draw(rng: np.random.Generator, means: np.ndarray, sds: np.ndarray, seen: np.ndarray,
         replicates: int, lattice: float, block: float | None = None) -> np.ndarray:
    """Values (..., replicates, settings, seeds) for each world of ``means`` (..., settings):
    N(μ_j, σ_j²) plus a seed's common part of sd ``block`` (default: the median σ_j), on the
    lattice, missing where not ``seen``."""
    k, s = seen.shape
    lead = means.shape[:-1]
    spread = float(np.median(sds)) if block is None else block
    block_part = spread * rng.standard_normal((*lead, replicates, 1, s))
    x = block_part + means[..., None, :, None] + sds[:, None] * rng.standard_normal(
        (*lead, replicates, k, s))
    if lattice > 0:
        x = np.round(x / lattice) * lattice
    return np.where(seen, x, math.nan)


def _judge(values: np.ndarray, contrasts: np.ndarray, claim: Relation, rule: Rule) -> np.ndarray:
    """Verdict codes (..., replicates, units) of one claim's drawn units, Holm over them."""
    return verdict_codes(values, contrasts, np.zeros(len(contrasts), dtype=int),
                         within=claim.kind == "within", slack=claim.slack,
                         sesoi=rule.sesoi_of(claim),
                         delta=math.nan if claim.delta is None else claim.delta,
                         alpha=rule.alpha, min_seeds=rule.min_seeds,
                         lattice=rule.lattice).codes


def bounds(claim: Relation, rule: Rule, margins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's boundaries (units, worlds) of ``holds`` (sign: −slack; within: ±δ) and of
    ``contradicted`` (sign: −slack − sesoi; within: δ on the side of its fitted ``margins``)."""
    if claim.kind == "within":
        assert claim.delta is not None
        side = np.where(margins < 0, -1.0, 1.0)
        return (np.outer(np.ones(len(margins)), [claim.delta, -claim.delta]),
                (claim.delta * side)[:, None])
    ones = np.ones((len(margins), 1))
    return -claim.slack * ones, (-claim.slack - rule.sesoi_of(claim)) * ones


def claim_rates(claim: Relation, values: np.ndarray, contrasts: np.ndarray, rule: Rule,
                replicates: int, rng: np.random.Generator, fallback: float
                ) -> tuple[float, float, bool]:
    """(false holds, false contradicted, whether every unit was on the boundary of
    ``contradicted``) of one claim's drawn units (the module's docstring)."""
    means, sds = spreads(values, rule.lattice, fallback)
    seen = np.isfinite(values)
    holds_at, against_at = bounds(claim, rule, contrasts @ means)
    units, sides = holds_at.shape
    worlds = np.stack([to_boundary(means, contrasts[u], [b]) for u in range(units)
                       for b in holds_at[u]])  # (units × sides, settings)
    codes = _judge(draw(rng, worlds, sds, seen, replicates, rule.lattice), contrasts, claim, rule)
    own = np.repeat(np.arange(units), sides)
    held = (codes[np.arange(len(worlds)), :, own] == HOLDS).mean(axis=1)
    moved = to_boundary(means, contrasts, against_at[:, 0])
    codes = _judge(draw(rng, moved, sds, seen, replicates, rule.lattice), contrasts, claim, rule)
    return (float(held.max()), float((codes == CONTRADICTED).any(axis=-1).mean()),
            bool(np.allclose(contrasts @ moved, against_at[:, 0])))


def mc_se(rate: float | np.ndarray, alpha: float, replicates: int | np.ndarray) -> np.ndarray:
    """The Monte Carlo SE of a rate near α: sqrt(p (1 − p) / R), p = max(rate, α)."""
    p = np.maximum(rate, alpha)
    return np.sqrt(p * (1 - p) / replicates)


def calibrate(words: Words, compared: dict[str, list[Comparison]],
              replicates: int = REPLICATES, seed: int = SEED) -> pd.DataFrame:
    """Per claim of ``words`` (its units ``compared``, fednorm.claims.comparisons.compare_all):
    its false holds and false contradicted rates at its boundaries with their Monte Carlo SE
    (NaN: no unit drawn); ``seeds``: the fewest seeds with a margin of its drawn units."""
    rule = words.rule
    designs = [design_of(compared.get(c.id, []), rule.min_seeds) for c in words.claims]
    own = [spreads(v, 0.0, math.nan)[1][np.isfinite(v).sum(axis=1) > 1] for v, _, _ in designs]
    pooled = np.concatenate([np.zeros(0), *own])
    fallback = float(np.median(pooled)) if pooled.size else 1.0
    rows = []
    for index, (claim, (values, contrasts, left_out)) in enumerate(
            zip(words.claims, designs, strict=True)):
        rates = (math.nan, math.nan, False)
        if len(contrasts):
            rng = np.random.default_rng([seed, index])
            rates = claim_rates(claim, values, contrasts, rule, replicates, rng, fallback)
        rows.append({"id": claim.id, "paper": claim.paper, "family": claim.kind,
                     "units": len(contrasts), "left_out": left_out, "settings": len(values),
                     "seeds": int(seeds_of(values, contrasts).min()) if len(contrasts) else 0,
                     "replicates": replicates, "lattice": rule.lattice,
                     "false_holds": rates[0], "se_holds": mc_se(rates[0], rule.alpha, replicates),
                     "false_contradicted": rates[1],
                     "se_contradicted": mc_se(rates[1], rule.alpha, replicates),
                     "exact": rates[2]})
    return pd.DataFrame(rows)


def families(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per family (a claim's kind) and 'all': the claims drawn, each rate's mean and max with
    their Monte Carlo SE, and ``ok``: every claim's rates within α + 3 SE."""
    drawn = table[table["false_holds"].notna()]
    parts = [(name, g) for name, g in drawn.groupby("family", sort=True)] + [("all", drawn)]
    rows = []
    for name, g in parts:
        row: dict[str, object] = {"family": name, "claims": len(g)}
        ok = True
        for kind in RATES:
            rate, se = g[f"false_{kind}"].to_numpy(), g[f"se_{kind}"].to_numpy()
            worst = int(np.argmax(rate)) if len(g) else 0
            row |= {f"{kind}_mean": rate.mean() if len(g) else math.nan,
                    f"{kind}_mean_se": math.sqrt(np.square(se).sum()) / max(len(g), 1),
                    f"{kind}_max": rate[worst] if len(g) else math.nan,
                    f"{kind}_max_se": se[worst] if len(g) else math.nan}
            ok &= bool(np.all(rate <= alpha + 3 * se))
        rows.append(row | {"ok": ok})
    return pd.DataFrame(rows)


def calibration_lines(table: pd.DataFrame, alpha: float) -> list[str]:
    """The ledger header's calibration: a sentence and the family table (mean / max (SE))."""
    fam = families(table, alpha)
    lattice = float(table["lattice"].iloc[0]) if len(table) else 0.0
    replicates = int(table["replicates"].iloc[0]) if len(table) else 0
    verdict = ("every family within α + 3 SE" if fam["ok"].all() else "above α + 3 SE: "
               + ", ".join(fam.loc[~fam["ok"], "family"]))
    inexact = int((table["false_holds"].notna() & ~table["exact"].astype(bool)).sum())
    if inexact:
        verdict += (f"; {inexact} claim{'s' if inexact > 1 else ''} whose units no means put "
                    "all on the boundary of contradicted (least squares)")
    head = ("Calibration (parametric bootstrap of this ledger: each setting drawn at its own mean "
            "and sd, each claim moved to its boundary, shared runs kept shared, on the "
            f"{lattice:g}-point lattice; {replicates} replicates a claim; mean / max (Monte "
            f"Carlo SE of the max) at α {alpha:g}): {verdict}.")
    cells = ["| rate | " + " | ".join(f"{f} ({n})" for f, n in zip(fam["family"], fam["claims"],
                                                                  strict=True)) + " |",
             "|---|" + "---:|" * len(fam)]
    for kind in RATES:
        cells.append(f"| false {kind} | " + " | ".join(
            f"{r[f'{kind}_mean']:.3f} / {r[f'{kind}_max']:.3f} ({r[f'{kind}_max_se']:.3f})"
            for _, r in fam.iterrows()) + " |")
    return [head, "", *cells]
