"""Each ledger measures its own null: the same claims judged on the same runs with their
labels shuffled, many times over (issue 50: enough permutations to tell 2.5 % from 5 %).

Within a *block* (experiments that share runs, taken together: the connected parts of the
graph whose nodes are experiments and whose edges are the runs in two of them) and one seed,
the runs' trajectories (every metric, the step and the status: SUMMARY_METRICS) are permuted
among the runs, each run keeping its config. Every compared group of a claim then has the same
distribution, so a firm verdict (holds, contradicted) is a false one; its share over the judged
claims estimates the ledger's error rate under the null (docs/claims.md, The ledger's own null).

**Vectorized** (:func:`null_shares`): the claims' units are taken once from the real summary
(fednorm.claims.verdicts.compare_all: which runs each side holds, seed by seed); a permutation
only says which trajectory each run carries. Each run's value, diverged flag and settling sums
are computed once per (trajectory, the run's lr milestones) pair that a permutation can form
(a window ends after the run's own last lr drop: fednorm.results.window_points), and every
permutation's units are judged at once: their margins and tests by
fednorm.claims.vectorized.verdict_codes (the rule's own arithmetic over a leading permutation
axis), Holm over each claim's units, the settled veto (fednorm.claims.verdicts.veto's room and
reach) and the rule on a paper's own method at untuned values, as judge_claim does. The slow
path, the ledger judged again on :func:`permuted` summaries, gives the same verdicts
(tests/test_claims_null.py). Kept from the real labels, not re-drawn: which tuning cell each
method's tuned side reads (its choice on validation accuracy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from fednorm.claims.stats import holm, per_look
from fednorm.claims.vectorized import room, verdict_codes
from fednorm.claims.verdicts import Comparison, compare_all, compares_methods
from fednorm.claims.words import CONTRADICTED, HOLDS, INCONCLUSIVE, NOT_RUN, Relation, Words
from fednorm.metrics import SUMMARY_METRICS
from fednorm.plots.cells import percent
from fednorm.results import ALPHA as SETTLE_ALPHA
from fednorm.results import SETTLED_FLOOR, climbing, reach, run_values, window_points

PERMUTATIONS = 200  # the 95 % interval of a 2.5 % share over ~55 claims: about ±0.3 points
LEVEL = 0.95  # the interval printed around the null's firm share
NULL_COLUMNS = ("permutation", "judged", "holds", "contradicted", "firm_share")
CODE = {HOLDS: 1, CONTRADICTED: -1, INCONCLUSIVE: 0, NOT_RUN: 2}
VERDICT = {code: verdict for verdict, code in CODE.items()}


def blocks(summary: pd.DataFrame) -> pd.Series:
    """Run id -> its block: the smallest experiment name of the connected part that its
    experiments (``figure_group``, joined by '|') belong to."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    groups = summary.groupby("run_id")["figure_group"].first()
    for names in groups:
        first, *rest = str(names).split("|")
        for other in rest:
            a, b = sorted((root(first), root(other)))
            parent[b] = a
    return groups.map(lambda names: root(str(names).split("|")[0]))


def cells(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run (sorted run ids): its ``seed`` and its ``block`` (:func:`blocks`), the
    cell a permutation moves it within."""
    return summary.groupby("run_id")["seed"].first().to_frame().assign(block=blocks(summary))


def donors(summary: pd.DataFrame, rng: np.random.Generator,
           within: pd.DataFrame | None = None) -> pd.Series:
    """Run id -> the run whose trajectory it carries in one permutation: a uniform random
    permutation of the runs of each block and seed (in sorted block, seed order, each drawn
    from ``rng`` in turn); ``within``: the summary's :func:`cells`, when the caller has them."""
    runs = cells(summary) if within is None else within
    source = {}
    for _, part in runs.groupby(["block", "seed"], sort=True):
        ids = part.index.to_numpy()
        source.update(zip(ids, rng.permutation(ids), strict=True))
    return pd.Series(source)


def permuted(summary: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """``summary`` with its runs' trajectories permuted within block and seed (:func:`donors`);
    the config columns stay with their runs. The slow path: the vectorized null judges the
    same permutations without building them."""
    return carrying(summary, donors(summary, rng))


def carrying(summary: pd.DataFrame, draw: pd.Series) -> pd.DataFrame:
    """``summary`` with each run carrying the trajectory of its donor in ``draw`` (run id ->
    run id), its config columns kept."""
    moving = [c for c in SUMMARY_METRICS if c in summary.columns]
    fixed = [c for c in summary.columns if c not in moving]
    trajectories = {run: rows[moving] for run, rows in summary.groupby("run_id", sort=False)}
    configs = summary.groupby("run_id", sort=False)[[c for c in fixed if c != "run_id"]].first()
    parts = []
    for run, donor in draw.items():
        rows = trajectories[donor].reset_index(drop=True)
        config = configs.loc[[run] * len(rows)].reset_index(names="run_id")
        parts.append(pd.concat([config, rows], axis=1))
    return pd.concat(parts, ignore_index=True)[list(summary.columns)]


# ---------------------------------------------------------------------------------------------
# What a run shows when it carries another's trajectory.


@dataclass(frozen=True)
class Carried:
    """Per (trajectory, lr milestones) pair that a permutation can form (``pair``: run id ->
    milestones key -> row), per measure (metric, at): the run's value (points for an
    accuracy), whether it diverged, and its settling window's sums (points in the window,
    Σ(x − x̄)², Σ(x − x̄)(y − ȳ), Σ(y − ȳ)², the window's span in steps), y in the summary's
    units (fednorm.results.trend sums the same)."""

    runs: pd.Index  # sorted run ids
    milestones: np.ndarray  # per run: its milestones key
    pair: dict[tuple[str, str], int]
    value: dict[tuple[str, str], np.ndarray]
    diverged: np.ndarray
    sums: dict[str, np.ndarray]  # metric -> (pairs, 5)

    def rows(self, donor: np.ndarray) -> np.ndarray:
        """Pair rows (..., runs) of runs carrying the trajectories ``donor`` (..., runs: run
        positions) under their own milestones (−1: a pair no permutation forms)."""
        keys = sorted(set(self.milestones))
        table = np.full((len(keys), len(self.runs)), -1)
        position = {run: i for i, run in enumerate(self.runs)}
        code = {key: i for i, key in enumerate(keys)}
        for (run, key), row in self.pair.items():
            table[code[key], position[run]] = row
        own = np.array([code[m] for m in self.milestones])
        return table[own, donor]


def carried(summary: pd.DataFrame, measures: Sequence[tuple[str, str]]) -> Carried:
    """:class:`Carried` for every pair of a run's trajectory and the milestones of a run of its
    block and seed, each computed as the ledger computes a run's (run_values, window_points)."""
    cell = cells(summary)
    runs = cell.index
    raw = (summary.groupby("run_id")["lr_milestones"].first().reindex(runs)
           if "lr_milestones" in summary else None)
    marks = pd.Series("", index=runs) if raw is None else raw.astype(str)
    keys_in = marks.groupby([cell["block"], cell["seed"]]).agg(lambda m: sorted(set(m)))
    pairs = [(run, key) for run, b, s in zip(runs, cell["block"], cell["seed"], strict=True)
             for key in keys_in[(b, s)]]
    moving = [c for c in SUMMARY_METRICS if c in summary.columns]
    columns = ["run_id", *moving, *(["lr_milestones"] if "lr_milestones" in summary else [])]
    slim = summary[columns]
    by_run = dict(tuple(slim.groupby("run_id", sort=False)))
    text_to_raw = {} if raw is None else dict(zip(marks, raw, strict=True))
    parts = []
    for i, (run, key) in enumerate(pairs):
        rows = by_run[run].assign(run_id=str(i))
        if raw is not None:
            rows = rows.assign(lr_milestones=[text_to_raw[key]] * len(rows))
        parts.append(rows)
    frame = pd.concat(parts, ignore_index=True)
    ids = [str(i) for i in range(len(pairs))]
    value, sums = {}, {}
    for metric, at in sorted(set(measures)):
        got = run_values(frame, y=metric, at=at).set_index("run_id").reindex(ids)
        scale = 100.0 if percent(metric) else 1.0
        value[(metric, at)] = got["value"].to_numpy(dtype=float) * scale
        diverged = got["diverged"].to_numpy(dtype=bool)  # a trajectory's: the same each measure
        if metric not in sums:
            sums[metric] = _window_sums(frame, metric, ids)
    return Carried(runs, marks.to_numpy(), {p: i for i, p in enumerate(pairs)}, value,
                   diverged, sums)


def _window_sums(frame: pd.DataFrame, metric: str, ids: Sequence[str]) -> np.ndarray:
    """Per pair (``ids``): (points, Σxx, Σxz, Σzz, span) of its settling window
    (fednorm.results.window_points), x and z centred on the pair's own means."""
    points = window_points(frame, metric)
    run = points.groupby("run_id")
    x = points["step"] - run["step"].transform("mean")
    z = points[metric] - run[metric].transform("mean")
    table = pd.DataFrame({"n": 1.0, "xx": x * x, "xz": x * z, "zz": z * z}).groupby(
        points["run_id"]).sum()
    table["span"] = run["step"].max() - run["step"].min()
    return table.reindex(ids).fillna(0.0).to_numpy(dtype=float)


def settled_sides(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gain, settled, reach) in points of sides whose runs' window sums add up to ``sums``
    (..., 6: points, Σxx, Σxz, Σzz, span and runs with a window), as fednorm.results.settling
    decides: slope Σxz / Σxx, its SE from Σzz − slope Σxz on N − R − 1 df, gain = slope x the
    runs' mean span, climbing by results.climbing, reach by results.reach."""
    n, xx, xz, zz, span, r = np.moveaxis(sums, -1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = xz / xx
        df = n - r - 1
        rss = np.maximum(zz - slope * xz, 0.0)
        se = np.sqrt(rss / np.where(df >= 1, df, np.nan) / xx)
        window = span / r
    gain, gain_se = slope * window, se * window
    shape = gain.shape
    flat = [pd.Series(a.reshape(-1)) for a in (gain, gain_se, df)]
    _, rising = climbing(*flat, SETTLED_FLOOR, SETTLE_ALPHA)
    up = reach(*flat, SETTLE_ALPHA)
    return 100 * gain, ~rising.reshape(shape), 100 * up.reshape(shape)


# ---------------------------------------------------------------------------------------------
# The claims' units, as arrays over permutations.


@dataclass(frozen=True)
class _Claim:
    """A claim's units with sides: ``settings`` (K, S: run positions, −1 none) of its distinct
    sides by seeds, ``contrasts`` (U, K), ``pair`` and ``tuned`` per unit, and ``extra``: its
    units without sides (p 1 in Holm's family), ``refused``: one of them refused."""

    claim: Relation
    settings: np.ndarray
    contrasts: np.ndarray
    pair: np.ndarray
    sides: np.ndarray  # (U, 2): the settings of a pair's two sides (the claimed better first)
    tuned: np.ndarray
    extra: int
    refused: bool
    measure: tuple[str, str]


def _claims(words: Words, compared: dict[str, list[Comparison]], runs: pd.Index
            ) -> list[_Claim | None]:
    position = pd.Series(np.arange(len(runs)), index=runs)
    out: list[_Claim | None] = []
    for claim in words.claims:
        units = compared[claim.id]
        sided = [u for u in units if u.sides]
        blank = [u for u in units if not u.sides]
        refused = any(not u.reason.startswith("no run") for u in blank)
        if not sided:
            out.append(None if not refused else _Claim(
                claim, np.zeros((0, 0), int), np.zeros((0, 0)), np.zeros(0, bool),
                np.zeros((0, 2), int), np.zeros(0, bool), len(blank), True,
                (claim.metric, claim.at)))
            continue
        keys: dict[tuple[str, ...], int] = {}
        seeds = sorted({s for u in sided for side in u.sides for s in side.rows["seed"]})
        rows = []
        coefs, ends = [], []
        for u in sided:
            row = {}
            at = []
            for side, c in zip(u.sides, u.coefs, strict=True):
                key = side.run_ids
                if key not in keys:
                    keys[key] = len(keys)
                    by_seed = side.rows.groupby("seed")["run_id"].first()
                    rows.append([int(position[by_seed[s]]) if s in by_seed.index else -1
                                 for s in seeds])
                row[keys[key]] = row.get(keys[key], 0.0) + c
                at.append(keys[key])
            coefs.append(row)
            ends.append((at[0], at[-1]))
        contrasts = np.zeros((len(sided), len(keys)))
        for i, row in enumerate(coefs):
            for k, c in row.items():
                contrasts[i, k] = c
        out.append(_Claim(claim, np.array(rows, dtype=int).reshape(len(keys), len(seeds)),
                          contrasts, np.array([u.pair for u in sided]),
                          np.array(ends, dtype=int).reshape(-1, 2),
                          np.array([u.tuned for u in sided]), len(blank), refused,
                          sided[0].measure))
    return out


def _judged(entry: _Claim, carried_: Carried, rows: np.ndarray, words: Words,
            alpha: float) -> np.ndarray:
    """The claim's verdict code (CODE) in each permutation; ``rows`` (P, runs): each run's
    pair row."""
    claim = entry.claim
    p = rows.shape[0]
    if not entry.contrasts.size or not entry.settings.shape[1]:
        return np.full(p, CODE[INCONCLUSIVE])  # refused, or no side has a run: no margin
    within = claim.kind == "within"
    settings = entry.settings
    have = settings >= 0
    pair_rows = np.where(have, rows[:, np.where(have, settings, 0)], -1)  # (P, K, S)
    known = pair_rows >= 0
    safe = np.where(known, pair_rows, 0)
    value = np.where(known, carried_.value[entry.measure][safe], np.nan)
    diverged = known & carried_.diverged[safe]
    # margins' seeds for and against (verdicts.margins): seeds where every side has a run
    c = entry.contrasts
    involved = c != 0  # (U, K)
    present = (known[:, None] | ~involved[None, :, :, None]).all(axis=2)  # (P, U, S)
    dead = diverged | np.isnan(value)
    dead_any = ((dead[:, None] & involved[None, :, :, None]).any(axis=2)) & present
    div_any = ((diverged[:, None] & involved[None, :, :, None]).any(axis=2)) & present
    first, second = entry.sides[:, 0], entry.sides[:, 1]
    d0, d1 = diverged[:, first], diverged[:, second]  # (P, U, S)
    x0, x1 = dead[:, first], dead[:, second]
    pair = entry.pair[None, :, None] & (not within)
    n_against = np.where(pair, d0 & ~x1, dead_any & div_any) & present
    n_for = np.where(pair, d1 & ~x0, False) & present
    n_against, n_for = n_against.sum(-1), n_for.sum(-1)
    sesoi = words.rule.sesoi_of(claim)
    found = verdict_codes(np.where(dead, np.nan, value), c, within=within, slack=claim.slack,
                          sesoi=sesoi, delta=claim.delta if claim.delta is not None else np.nan,
                          alpha=alpha, min_seeds=words.rule.min_seeds, n_for=n_for,
                          n_against=n_against)
    k = len(c) + entry.extra
    padded = np.concatenate([found.p_against, np.ones((p, entry.extra))], axis=1)
    adjusted = np.apply_along_axis(holm, 1, padded)[:, :len(c)]
    codes = np.where((found.p_for <= alpha) & (n_against == 0), 1,
                     np.where((adjusted <= alpha) & (n_for == 0), -1, 0))
    # the settled veto (verdicts.veto): sides still climbing that could undo the verdict
    sums = carried_.sums[entry.measure[0]]
    side_sums = np.where(known[..., None], sums[safe], 0.0).sum(axis=2)  # (P, K, 5)
    windows = np.where(known, sums[safe][..., 0] > 0, False).sum(axis=2)
    _, settled, up_reach = settled_sides(np.concatenate([side_sums, windows[..., None]],
                                                        axis=-1))
    if percent(entry.measure[0]):
        climbing_ = ~settled
    else:
        climbing_ = np.zeros_like(settled)
    down_room, up_room = room(codes, found.estimate, found.se, found.df,
                              within=within, slack=claim.slack, sesoi=sesoi,
                              delta=claim.delta if claim.delta is not None else math.nan,
                              alpha=alpha, k=k)
    with np.errstate(invalid="ignore"):  # inf x 0 where a side is not in the unit: masked below
        move = np.where(np.isfinite(up_reach), up_reach, np.inf)[:, None, :] * np.abs(c)[None]
    lowers = climbing_[:, None, :] & (c < 0)[None]
    raises = climbing_[:, None, :] & (c > 0)[None]
    down_move = np.where(lowers, move, 0.0).sum(-1)
    up_move = np.where(raises, move, 0.0).sum(-1)
    blocked = ((lowers.any(-1) & np.isfinite(down_room) & (down_move >= down_room))
               | (raises.any(-1) & np.isfinite(up_room) & (up_move >= up_room)))
    final = np.where(blocked, 0, codes)
    if claim.own_method and compares_methods(claim):
        final = np.where((final == -1) & ~entry.tuned[None], 0, final)
    contradicted = (final == -1).any(axis=1)
    holds = (final == 1).all(axis=1) & (entry.extra == 0)
    verdict = np.where(contradicted, -1, np.where(holds, 1, 0))
    if entry.refused:
        verdict = np.zeros(p, dtype=int)
    return verdict


def null_codes(words: Words, summary: pd.DataFrame, draws: Sequence[pd.Series], looks: int = 1
               ) -> np.ndarray:
    """Each claim's verdict code (CODE; NOT_RUN 2) under each permutation ``draws`` (run id ->
    donor, :func:`donors`): (permutations, claims)."""
    compared = compare_all(words, summary)
    entries = _claims(words, compared, pd.Index(sorted(summary["run_id"].unique())))
    measures = [e.measure for e in entries if e is not None and e.contrasts.size]
    table = carried(summary, measures or [("test_accuracy", "final")])
    position = pd.Series(np.arange(len(table.runs)), index=table.runs)
    donor = np.stack([position[d.reindex(table.runs).to_numpy()].to_numpy() for d in draws]) \
        if draws else np.zeros((0, len(table.runs)), dtype=int)
    rows = table.rows(donor)
    alpha = per_look(words.rule.alpha, looks)
    out = np.full((len(draws), len(entries)), CODE[NOT_RUN])
    for j, entry in enumerate(entries):
        if entry is not None:
            out[:, j] = _judged(entry, table, rows, words, alpha)
    return out


def null_shares(words: Words, summary: pd.DataFrame, permutations: int = PERMUTATIONS,
                seed: int = 0, looks: int = 1) -> pd.DataFrame:
    """One row per permutation: the claims judged (not ``not run``), the firm verdicts among
    them and their share (NULL_COLUMNS)."""
    rng = np.random.default_rng(seed)
    within = cells(summary)  # once, not once a permutation
    draws = [donors(summary, rng, within) for _ in range(permutations)]
    codes = null_codes(words, summary, draws, looks)
    judged = (codes != CODE[NOT_RUN]).sum(axis=1)
    holds, contra = (codes == 1).sum(axis=1), (codes == -1).sum(axis=1)
    return pd.DataFrame({"permutation": np.arange(permutations), "judged": judged,
                         "holds": holds, "contradicted": contra,
                         "firm_share": (holds + contra) / np.maximum(judged, 1)},
                        columns=list(NULL_COLUMNS))


def null_interval(null: pd.DataFrame, level: float = LEVEL) -> tuple[float, float, float]:
    """The null's firm share, the mean of the permutations' shares, and its ``level`` interval:
    a t interval over the permutations (independent draws; the claims of one permutation share
    runs, so a binomial interval on the pooled count would be too narrow). NaN bounds under two
    permutations."""
    shares = null["firm_share"].to_numpy(dtype=float)
    share = float(shares.mean()) if len(shares) else math.nan
    if len(shares) < 2:
        return share, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(shares) - 1) * shares.std(ddof=1)
                 / math.sqrt(len(shares)))
    return share, max(share - half, 0.0), share + half


def null_lines(null: pd.DataFrame, alpha: float, real: Sequence[str] = ()) -> list[str]:
    """Markdown lines under the ledger's counts: the share of firm verdicts under the
    permutation null with its 95 % interval (:func:`null_interval`), against the look's
    ``alpha`` (and on the real labels, ``real``: the ledger's verdicts)."""
    if null.empty:
        return []
    firm = int(null["holds"].sum() + null["contradicted"].sum())
    judged = int(null["judged"].sum())
    share, low, high = null_interval(null)
    interval = "" if math.isnan(low) else f" (95 % interval {low:.1%}–{high:.1%})"
    verdicts = pd.Series(list(real), dtype=object)
    real_text = ""
    if len(verdicts):
        n_real = int(verdicts.isin([HOLDS, CONTRADICTED]).sum())
        real_text = (f" (on the real labels: {n_real} of {int((verdicts != NOT_RUN).sum())})")
    return [f"**The ledger's own null** ({len(null)} permutations of the runs' trajectories "
            f"within experiment block and seed, claims_null.csv): {firm} firm verdicts of "
            f"{judged} judged, {share:.1%}{interval}, against α = {alpha:g}{real_text}."]


def expected_false(null: pd.DataFrame, judged: int, level: float = LEVEL
                   ) -> tuple[float, float, float]:
    """The firm verdicts expected false among ``judged`` claims, and its ``level`` interval:
    the null's firm share and its interval (:func:`null_interval`: a t interval over the
    permutations, which are independent draws while a permutation's claims share runs) times
    ``judged``. It is the expected count were every claim null, with the ledger's own
    dependence and rule (a bound on the expected false ones: a true claim adds no false
    verdict), the π0 = 1 estimate of Benjamini–Hochberg's and Storey's."""
    if null.empty or not int(null["judged"].sum()):
        return math.nan, math.nan, math.nan
    share, low, high = null_interval(null, level)
    return judged * share, judged * low, judged * high


def expected_false_lines(null: pd.DataFrame, table: pd.DataFrame, alpha: float) -> list[str]:
    """A markdown line under the null's: the ledger's firm verdicts, those expected false
    (:func:`expected_false`), and the firm verdicts whose Benjamini–Yekutieli q is at most
    ``alpha`` (``table``: the ledger, its ``verdict`` and ``q_by``)."""
    if null.empty or table.empty:
        return []
    verdicts = table["verdict"]
    judged = int((verdicts != NOT_RUN).sum())
    firm = verdicts.isin([HOLDS, CONTRADICTED])
    mean, low, high = expected_false(null, judged)
    by = int((firm & (table["q_by"].astype(float) <= alpha)).sum())
    return [f"**Expected false**: of the {int(firm.sum())} firm verdicts of {judged} judged, "
            f"{mean:.1f} expected false under the ledger's null (its firm share × {judged}; "
            f"95 % interval {low:.1f}–{high:.1f}); {by} firm with a Benjamini–Yekutieli q ≤ "
            f"{alpha:g}."]
