"""The words ledger's error rates by a bootstrap of the ledger itself, in the world the rule
assumes and in three it does not, judged by the rule's one function
(:func:`fednorm.claims.rule.verdict_codes`, :func:`fednorm.claims.rule.claim_codes`).

**The design.** Each claim's judged units are contrasts over the distinct settings of their
experiments (:func:`fednorm.claims.verdicts.model_of`: a setting two units share is one row, so
their shared runs stay shared in every draw), on the seeds the ledger has for each setting (a
missing or diverged run stays missing). μ_j is setting j's mean over its seeds, σ_j its own sd
from the residuals of settings + seeds (:func:`spreads`: unequal noise kept, the seed's common
part removed), floored at the rounding sd h / √12 of the values' lattice h; a setting with one
seed takes the median σ of its claim's other settings, else of the ledger's.

**The worlds** (:data:`WORLDS`), each drawn at every boundary below and rounded to the lattice:

- ``parametric`` (the rule's own model): x_js = b_s + μ_j + σ_j ε_js, ε normal, b_s ~ N(0,
  median σ²) a seed's common part (it cancels in every margin; a rule that failed to pair
  would see it);
- ``resampled``: x_js = μ_j + r_j,s* with s* drawn with replacement from the seeds, the whole
  column of residuals of settings + seeds at once (shared runs stay shared), each residual
  rescaled by √(n_j / (n_j − 1)) for the mean it lost (a contrast of the residuals of a seed
  is its margin less the mean margin: the seeds' part cancels, so no factor for it); a cell
  is missing where seed s* is missing. (Six seeds drawn with replacement are on average 4
  distinct ones: the t test sees less spread than the seeds have, so this world's rates
  include the bootstrap's own optimism, not only the residuals' shape);
- ``collapse``: ``parametric`` with each run, independently, losing :data:`COLLAPSE` points
  with chance :data:`COLLAPSE_CHANCE` (a seed that collapses);
- ``unequal``: ``parametric`` with every σ_j at the claim's median σ but one setting's at
  :data:`NOISY` times it: the setting that most of the claim's units involve (the first such).

**The boundaries** (the rule is symmetric, so the claim's two verdicts share one):

- *false holds*: every unit on the boundary of its ``holds`` null (sign: margin + slack = 0;
  ``within``: margin = δ, and then = −δ); the claim's rate is its least favourable unit's share
  of draws in which that unit holds (an upper bound on the claim's: it holds only when all its
  units do);
- *false contradictions*: the same boundary, from the other side (the rule is symmetric;
  ``within``: |margin| = δ on the side of each unit's fitted margin); the rate is the share of
  draws in which the claim is contradicted (Holm over its units, as the ledger judges);
- *false negligible* (sign claims): every unit at margin + slack = sesoi, and then = −sesoi;
  the least favourable unit's share of draws in which it is negligible (an upper bound on the
  claim's, which needs every unit negligible); NaN for ``within`` claims (no such verdict).

The means are moved by least squares, μ' = μ + C⁺(b − Cμ), all the claim's units at once. A
unit's verdict is its own test, whose draws depend on the means only through its margin, so
one draw of the claim gives every unit's rate. Where no means put every unit on a boundary at
once (C of deficient row rank: pairs that close a cycle), each unit is moved alone for its
holds and negligible rates, the least-norm shift along its contrast c, μ' = μ + c (b − c·μ) /
|c|², and only the settings it involves are drawn; the contradictions stay at least squares,
and the table's ``exact`` is false.

Each rate comes with its Clopper–Pearson (exact binomial) 95 % interval over the replicates
(:func:`clopper_pearson`); :func:`families` pools the claims of each relation kind (the
family: the rule's test and boundaries are the kind's, the paper's are not).

Left out: units with fewer than ``min_seeds`` seeds with a margin (the ledger judges them by
the sign test on diverged runs alone; Holm then runs over fewer units, which can only raise
false contradictions); diverged runs count for or against no unit in a draw.

    table = calibrate(words, compare_all(words, summary))
    lines = calibration_lines(table, words.rule.alpha)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.claims.comparisons import Comparison
from fednorm.claims.rule import CONTRADICTED, HOLDS, NEGLIGIBLE, claim_codes, verdict_codes
from fednorm.claims.verdicts import model_of
from fednorm.claims.words import Relation, Rule, Words

REPLICATES = 10_000  # a claim's draws at each boundary in each world
CHUNK = 2_000_000  # values (replicates × settings × seeds) judged in one call, at most
SEED = 20250555  # with each claim's index, the seed of its draws: the same table every run
WORLDS = ("parametric", "resampled", "collapse", "unequal")
RATES = ("holds", "contradicted", "negligible")
COLLAPSE_CHANCE = 0.10  # a run's chance of collapsing (world ``collapse``)
COLLAPSE = 20.0  # points a collapsed run loses
NOISY = 3.0  # world ``unequal``: one setting's σ over the others'
CONFIDENCE = 0.95  # of the Clopper–Pearson intervals


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


def residuals(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each setting's mean over its seeds, the residuals of settings + seeds) of ``values``
    (settings × seeds, NaN missing): r_js = x_js − x̄_j − ḡ_s, ḡ_s the seed's mean deviation
    over the settings it has; 0 where missing."""
    seen = np.isfinite(values)
    n = seen.sum(axis=1)
    means = np.where(seen, values, 0.0).sum(axis=1) / np.maximum(n, 1)
    centred = np.where(seen, values - means[:, None], 0.0)
    if len(values) > 1:
        block = centred.sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
        centred = np.where(seen, centred - block[None], 0.0)
    return means, centred


def spreads(values: np.ndarray, lattice: float, fallback: float) -> tuple[np.ndarray, np.ndarray]:
    """Each setting's (mean, sd) over its seeds, the sd from :func:`residuals`, v_j = Σ_s
    r_js² / (n_j − 1). E v_j = (1 − 2/K) σ_j² + Σ_i σ_i² / K², solved for each σ_j² (unequal
    noise kept; K = 2 cannot tell the two apart and splits their sum equally, which keeps a
    pair's margin variance); a setting with one seed takes the median of the others' (else
    ``fallback``), every sd floored at the rounding sd lattice / √12."""
    k = len(values)
    n = np.isfinite(values).sum(axis=1)
    means, centred = residuals(values)
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


def _on_lattice(x: np.ndarray, seen: np.ndarray, lattice: float) -> np.ndarray:
    if lattice > 0:
        x = np.round(x / lattice) * lattice
    return np.where(seen, x, math.nan)


def draw(rng: np.random.Generator, means: np.ndarray, sds: np.ndarray, seen: np.ndarray,
         replicates: int, lattice: float, block: float | None = None) -> np.ndarray:
    """World ``parametric``: values (..., replicates, settings, seeds) for each world of
    ``means`` (..., settings): N(μ_j, σ_j²) plus a seed's common part of sd ``block``
    (default: the median σ_j), on the lattice, missing where not ``seen``."""
    k, s = seen.shape
    lead = means.shape[:-1]
    spread = float(np.median(sds)) if block is None else block
    block_part = spread * rng.standard_normal((*lead, replicates, 1, s))
    x = block_part + means[..., None, :, None] + sds[:, None] * rng.standard_normal(
        (*lead, replicates, k, s))
    return _on_lattice(x, seen, lattice)


def resample(rng: np.random.Generator, means: np.ndarray, values: np.ndarray, replicates: int,
             lattice: float) -> np.ndarray:
    """World ``resampled``: values (..., replicates, settings, seeds) for each world of
    ``means`` (..., settings): μ_j plus the rescaled residuals of ``values`` (settings ×
    seeds) of seeds drawn with replacement, a whole seed's column at once."""
    s = values.shape[1]
    seen = np.isfinite(values)
    n = seen.sum(axis=1)
    r = residuals(values)[1] * np.sqrt(n / np.maximum(n - 1, 1))[:, None]
    lead = means.shape[:-1]
    pick = rng.integers(0, s, (*lead, replicates, s))
    x = means[..., None, :, None] + np.moveaxis(r[:, pick], 0, -2)
    return _on_lattice(x, np.moveaxis(seen[:, pick], 0, -2), lattice)


def collapse(rng: np.random.Generator, values: np.ndarray, chance: float = COLLAPSE_CHANCE,
             points: float = COLLAPSE) -> np.ndarray:
    """World ``collapse``: ``values`` with each run, independently, ``points`` lower with
    probability ``chance``."""
    return values - points * (rng.uniform(size=values.shape) < chance)


def unequal(sds: np.ndarray, contrasts: np.ndarray, noisy: float = NOISY) -> np.ndarray:
    """World ``unequal``'s σ: the median of ``sds`` everywhere, ``noisy`` times it on the
    setting that most units involve (the first such)."""
    out = np.full(len(sds), float(np.median(sds)))
    out[int(np.argmax((contrasts != 0).sum(axis=0)))] *= noisy
    return out


def bounds(claim: Relation, rule: Rule, margins: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each unit's boundaries: of ``holds`` (units, sides; sign: −slack; within: ±δ), of
    ``contradicted`` (units; sign: −slack; within: δ on the side of its fitted ``margins``)
    and of ``negligible`` (units, 2; sign: −slack ± sesoi; within: none)."""
    units = len(margins)
    if claim.kind == "within":
        assert claim.delta is not None
        side = np.where(margins < 0, -1.0, 1.0)
        return (np.outer(np.ones(units), [claim.delta, -claim.delta]), claim.delta * side,
                np.zeros((units, 0)))
    sesoi = rule.sesoi_of(claim)
    return (np.full((units, 1), -claim.slack), np.full(units, -claim.slack),
            np.outer(np.ones(units), [-claim.slack + sesoi, -claim.slack - sesoi]))


def _judge(values: np.ndarray, contrasts: np.ndarray, claim: Relation, rule: Rule):
    """The rule's verdicts (..., replicates, units) of one claim's drawn units."""
    return verdict_codes(values, contrasts, np.zeros(len(contrasts), dtype=int),
                         within=claim.kind == "within", slack=claim.slack,
                         sesoi=rule.sesoi_of(claim),
                         delta=math.nan if claim.delta is None else claim.delta,
                         alpha=rule.alpha, min_seeds=rule.min_seeds, lattice=rule.lattice)


def world_sds(world: str, sds: np.ndarray, contrasts: np.ndarray) -> np.ndarray:
    """The settings' σ that ``world`` draws with (``unequal``'s: :func:`unequal`)."""
    if world not in WORLDS:
        raise ValueError(f"world: {world!r}; allowed: {', '.join(WORLDS)}")
    return unequal(sds, contrasts) if world == "unequal" else sds


def world_draw(world: str, rng: np.random.Generator, means: np.ndarray, sds: np.ndarray,
               values: np.ndarray, replicates: int, lattice: float, block: float
               ) -> np.ndarray:
    """Values (worlds, replicates, settings, seeds) of ``world`` (:data:`WORLDS`) at each row
    of ``means`` (worlds, settings): ``sds`` the world's σ (:func:`world_sds`), ``values``
    the ledger's runs of those settings, ``block`` the sd of a seed's common part."""
    seen = np.isfinite(values)
    if world == "resampled":
        return resample(rng, means, values, replicates, lattice)
    drawn = draw(rng, means, sds, seen, replicates, lattice, block)
    return collapse(rng, drawn) if world == "collapse" else drawn  # 20 points: on the lattice


def targets(claim: Relation, rule: Rule, margins: np.ndarray
            ) -> list[tuple[np.ndarray, tuple[int, ...]]]:
    """The boundaries the claim is drawn at: (each unit's margin there (units,), the rates
    counted there: indices into :data:`RATES`), from :func:`bounds`."""
    holds_at, against_at, negligible_at = bounds(claim, rule, margins)
    if claim.kind != "within":  # the rule is symmetric: holds and contradicted share one
        return [(holds_at[:, 0], (0, 1)), *((negligible_at[:, k], (2,)) for k in range(2))]
    sides = [(holds_at[:, k], (0,)) for k in range(2)]
    for k in range(2):  # every fitted margin on one side: that side's world is the other's
        if np.array_equal(sides[k][0], against_at):
            sides[k] = (against_at, (0, 1))
            return sides
    return [*sides, (against_at, (1,))]


def _chunks(replicates: int, cells: int) -> list[int]:
    """Replicates judged a call: :data:`CHUNK` values at most (``cells`` a replicate)."""
    step = max(1, CHUNK // max(cells, 1))
    return [min(step, replicates - start) for start in range(0, replicates, step)]


def _unit_hits(world: str, rng: np.random.Generator, moved: np.ndarray, sd: np.ndarray,
               values: np.ndarray, contrasts: np.ndarray, claim: Relation, rule: Rule,
               replicates: int, block: float) -> tuple[np.ndarray, int]:
    """(per unit, the draws with each verdict code HOLDS, CONTRADICTED, NEGLIGIBLE (3,
    units); the draws with the claim contradicted) with the settings at ``moved``."""
    hits, against = np.zeros((3, len(contrasts)), dtype=np.int64), 0
    for size in _chunks(replicates, values.size):
        drawn = world_draw(world, rng, moved[None], sd, values, size, rule.lattice, block)
        verdicts = _judge(drawn, contrasts, claim, rule)
        for k, code in enumerate((HOLDS, CONTRADICTED, NEGLIGIBLE)):
            hits[k] += (verdicts.codes[0] == code).sum(axis=0)
        claimed = claim_codes(verdicts, np.zeros(len(contrasts), dtype=int), rule.alpha)
        against += int((claimed[0, :, 0] == CONTRADICTED).sum())
    return hits, against


def claim_counts(claim: Relation, values: np.ndarray, contrasts: np.ndarray, rule: Rule,
                 replicates: int, rng: np.random.Generator, fallback: float
                 ) -> tuple[dict[str, np.ndarray], bool]:
    """Per world: the draws (out of ``replicates``) with a false holds, contradicted and
    negligible verdict at the least favourable boundary of each (NaN: no such boundary), and
    whether the contradicted boundary is reached exactly.

    A unit's verdict is its own test, whose draws depend on the means only through its
    margin: where least squares puts every unit on a boundary at once, one draw of the claim
    gives each unit's rate there (and the claim's contradictions); where it cannot, each
    unit is moved alone and only the settings it involves are drawn and judged."""
    means, sds = spreads(values, rule.lattice, fallback)
    block = float(np.median(sds))
    out, exact = {}, True
    for world in WORLDS:
        sd = world_sds(world, sds, contrasts)
        counts = np.full(len(RATES), -1.0)
        for at, rates in targets(claim, rule, contrasts @ means):
            moved = to_boundary(means, contrasts, at)
            reached = bool(np.allclose(contrasts @ moved, at))
            if 1 in rates:  # the claim's contradictions: every unit at once (least squares)
                exact = exact and reached
                hits, against = _unit_hits(world, rng, moved, sd, values, contrasts, claim,
                                           rule, replicates, block)
                counts[1] = max(counts[1], against)
            elif reached:
                hits = _unit_hits(world, rng, moved, sd, values, contrasts, claim, rule,
                                  replicates, block)[0]
            if not reached:  # each unit alone, on the settings it involves
                hits = np.zeros((3, len(contrasts)), dtype=np.int64)
                for u, c in enumerate(contrasts):
                    inv = c != 0
                    alone = to_boundary(means, c, [at[u]])[inv]
                    hits[:, u] = _unit_hits(world, rng, alone, sd[inv], values[inv],
                                            c[None, inv], claim, rule, replicates, block)[0][:, 0]
            for r in rates:
                if r != 1:
                    counts[r] = max(counts[r], hits[r].max())
        out[world] = np.where(counts < 0, math.nan, counts)
    return out, exact


def clopper_pearson(count: np.ndarray | float, trials: np.ndarray | float,
                    confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """The exact binomial (Clopper–Pearson) interval of ``count`` successes in ``trials``:
    the beta quantiles B(a/2; k, n − k + 1) and B(1 − a/2; k + 1, n − k), a = 1 −
    ``confidence``, 0 at k = 0 and 1 at k = n; NaN where the count is."""
    k = np.asarray(count, dtype=float)
    n = np.broadcast_to(np.asarray(trials, dtype=float), k.shape)
    if np.any(n < 1) or np.any(k[np.isfinite(k)] < 0) or np.any(k[np.isfinite(k)] > n[
            np.isfinite(k)]):
        raise ValueError(f"count {count}, trials {trials}; allowed: 0 <= count <= trials, "
                         "trials >= 1")
    a = 1 - confidence
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, stats.beta.ppf(a / 2, k, n - k + 1), 0.0)
        high = np.where(k < n, stats.beta.ppf(1 - a / 2, k + 1, n - k), 1.0)
    nan = ~np.isfinite(k)
    return np.where(nan, math.nan, low), np.where(nan, math.nan, high)


def _rate_columns(world: str, counts: np.ndarray, replicates: int) -> dict[str, float]:
    low, high = clopper_pearson(counts, replicates)
    out: dict[str, float] = {}
    for r, kind in enumerate(RATES):
        out |= {f"false_{kind}_{world}": counts[r] / replicates,
                f"{kind}_low_{world}": float(low[r]), f"{kind}_high_{world}": float(high[r])}
    return out


def calibrate(words: Words, compared: dict[str, list[Comparison]],
              replicates: int = REPLICATES, seed: int = SEED) -> pd.DataFrame:
    """Per claim of ``words`` (its units ``compared``, fednorm.claims.comparisons.compare_all),
    one row: in each world (:data:`WORLDS`) its false holds, contradicted and negligible rates
    at their boundaries, ``false_<rate>_<world>``, with Clopper–Pearson bounds
    ``<rate>_low_<world>`` and ``<rate>_high_<world>`` (NaN: no unit drawn, or no such
    verdict); ``seeds``: the fewest seeds with a margin of its drawn units."""
    if replicates < 1:
        raise ValueError(f"replicates: {replicates}; allowed: an integer >= 1 (the design: "
                         f"{REPLICATES})")
    rule = words.rule
    designs = [design_of(compared.get(c.id, []), rule.min_seeds) for c in words.claims]
    own = [spreads(v, 0.0, math.nan)[1][np.isfinite(v).sum(axis=1) > 1] for v, _, _ in designs]
    pooled = np.concatenate([np.zeros(0), *own])
    fallback = float(np.median(pooled)) if pooled.size else 1.0
    rows = []
    for index, (claim, (values, contrasts, left_out)) in enumerate(
            zip(words.claims, designs, strict=True)):
        counts = dict.fromkeys(WORLDS, np.full(len(RATES), math.nan))
        exact = False
        if len(contrasts):
            rng = np.random.default_rng([seed, index])
            counts, exact = claim_counts(claim, values, contrasts, rule, replicates, rng,
                                         fallback)
        row = {"id": claim.id, "paper": claim.paper, "family": claim.kind,
               "units": len(contrasts), "left_out": left_out, "settings": len(values),
               "seeds": int(seeds_of(values, contrasts).min()) if len(contrasts) else 0,
               "replicates": replicates, "lattice": rule.lattice, "exact": exact}
        for world in WORLDS:
            row |= _rate_columns(world, counts[world], replicates)
        rows.append(row)
    return pd.DataFrame(rows)


def families(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per world, rate and family (a claim's relation kind; 'all': every claim): the claims
    with that rate, the pooled rate over their draws with its Clopper–Pearson bounds, the
    worst claim's rate with its bounds, and ``above``: the claims whose lower bound is above
    ``alpha``."""
    rows = []
    for world in WORLDS:
        for kind in RATES:
            rate = f"false_{kind}_{world}"
            drawn = table[table[rate].notna()]
            parts = [*drawn.groupby("family", sort=False), ("all", drawn)]
            for family, g in parts:
                n = g["replicates"].to_numpy()
                count = np.round(g[rate].to_numpy() * n)
                row = {"world": world, "rate": kind, "family": family, "claims": len(g)}
                if len(g):
                    low, high = clopper_pearson(count.sum(), n.sum())
                    worst = int(np.argmax(g[rate].to_numpy()))
                    row |= {"pooled": count.sum() / n.sum(), "pooled_low": float(low),
                            "pooled_high": float(high), "worst": g["id"].iloc[worst],
                            "worst_rate": g[rate].iloc[worst],
                            "worst_low": g[f"{kind}_low_{world}"].iloc[worst],
                            "worst_high": g[f"{kind}_high_{world}"].iloc[worst],
                            "above": int((g[f"{kind}_low_{world}"] > alpha).sum())}
                rows.append(row)
    return pd.DataFrame(rows)


WORLD_WORDS = {"parametric": "the rule's model", "resampled": "the ledger's residuals resampled "
               "by seed", "collapse": f"a {COLLAPSE_CHANCE:.0%} chance per run of losing "
               f"{COLLAPSE:g} points", "unequal": f"one setting a claim at {NOISY:g}× the "
               "others' σ"}


def calibration_lines(table: pd.DataFrame, alpha: float) -> list[str]:
    """The ledger header's calibration: a sentence, one line per world (each rate pooled over
    the claims and its worst claim, with Clopper–Pearson 95 % bounds; the claims whose lower
    bound is above α), then the rates pooled per family, world by world."""
    fam = families(table, alpha)
    lattice = float(table["lattice"].iloc[0]) if len(table) else 0.0
    replicates = int(table["replicates"].iloc[0]) if len(table) else 0
    inexact = int((table["units"] > 0).sum() - table["exact"].astype(bool).sum())
    head = (f"Calibration (a bootstrap of this ledger at its claims' boundaries, shared runs "
            f"kept shared, on the {lattice:g}-point lattice; {replicates:,} replicates a claim "
            f"and boundary in each world; the rate pooled over the claims [Clopper–Pearson "
            f"{CONFIDENCE:.0%}], then the worst claim's; at α {alpha:g}; false holds and "
            "negligible at each unit's boundary, false contradictions at the claim's)"
            + (f"; {inexact} claim{'s' if inexact > 1 else ''} whose units no means put all on "
               "the boundary (least squares)" if inexact else "") + ":")
    lines = [head, ""]
    overall = fam[fam["family"] == "all"].set_index(["world", "rate"])
    for world in WORLDS:
        parts, above, rated = [], 0, 0
        for kind in RATES:
            r = overall.loc[(world, kind)]
            if not r["claims"]:
                continue
            above, rated = above + int(r["above"]), rated + int(r["claims"])
            parts.append(f"false {kind} {r['pooled']:.3f} [{r['pooled_low']:.3f}, "
                         f"{r['pooled_high']:.3f}], worst {r['worst_rate']:.3f} "
                         f"[{r['worst_low']:.3f}, {r['worst_high']:.3f}]")
        verdict = (f"{above} of {rated} claims' rates with the lower bound above α (at a rate "
                   f"of α, {(1 - CONFIDENCE) / 2:.1%} of them by chance)")
        lines.append(f"- {world} ({WORLD_WORDS[world]}): " + "; ".join(parts) + f"; {verdict}.")
    names = [f for f in dict.fromkeys(fam["family"]) if f != "all"] + ["all"]
    counts = fam[fam["rate"] == "holds"].groupby("family", sort=False)["claims"].max()
    lines += ["", "| world, rate | " + " | ".join(f"{f} ({counts.get(f, 0)})" for f in names)
              + " |", "|---|" + "---:|" * len(names)]
    cell = fam.set_index(["world", "rate", "family"])
    for world in WORLDS:
        for kind in RATES:
            texts = []
            for f in names:
                r = cell.loc[(world, kind, f)] if (world, kind, f) in cell.index else None
                texts.append("–" if r is None or not r["claims"] else
                             f"{r['pooled']:.3f} [{r['pooled_low']:.3f}, {r['pooled_high']:.3f}]")
            lines.append(f"| {world}, false {kind} | " + " | ".join(texts) + " |")
    return lines
