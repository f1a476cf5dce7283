"""The ledger's own null (fednorm.claims.null): runs' trajectories permuted within experiment
block and seed, each run keeping its config; under no effect the share of firm verdicts stays
near α, and a real effect is firm on its labels but not on permuted ones."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fednorm.claims.null import (
    NULL_COLUMNS,
    VERDICT,
    blocks,
    carrying,
    donors,
    null_codes,
    null_interval,
    null_lines,
    null_shares,
    permuted,
)
from fednorm.claims.words import CONTRADICTED, HOLDS, INCONCLUSIVE, NOT_RUN, parse_words
from fednorm.claims.words_ledger import words_ledger
from fednorm.config import run_config
from fednorm.metrics import SUMMARY_METRICS
from fednorm.summarize import config_columns

TINY = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
        "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
        "partition": "gamma", "heterogeneity": 0, "gn_groups": 2}
METHODS = ("fbn", "bn", "gn", "ln", "in", "fixbn")


def _rows(keys, group, trajectory, status="ok"):
    """One run's summary rows: ``trajectory`` a list of (step, accuracy in points)."""
    cfg = run_config({**TINY, **keys})
    return [{**config_columns(cfg), "run_id": cfg.run_id, "figure_group": group, "step": step,
             "test_accuracy": value / 100, "status": status} for step, value in trajectory]


def _frame(rows):
    return pd.DataFrame([r for run in rows for r in run])


# ---------------------------------------------------------------------------------------------
# Blocks.


def test_experiments_that_share_runs_are_one_block():
    """a|b and b|c join a, b, c (through b); d stands alone; a block is named by its smallest
    experiment, whichever run names it first."""
    summary = _frame([
        _rows({"normalizer": "bn"}, "a|b", [(20, 50)]),
        _rows({"normalizer": "fbn"}, "b|c", [(20, 50)]),
        _rows({"normalizer": "gn"}, "c", [(20, 50)]),
        _rows({"normalizer": "ln"}, "d", [(20, 50)]),
        _rows({"normalizer": "in"}, "z|m", [(20, 50)]),
        _rows({"normalizer": "fixbn"}, "m|k", [(20, 50)])])
    by_run = summary.groupby("run_id")["figure_group"].first()
    found = blocks(summary)
    assert {by_run[r]: b for r, b in found.items()} == {
        "a|b": "a", "b|c": "a", "c": "a", "d": "d", "z|m": "k", "m|k": "k"}


# ---------------------------------------------------------------------------------------------
# Permutations.


def _blocked_summary():
    """Two blocks ('a|b' with 'b'; 'c'), three seeds, three runs per block and seed, each run's
    trajectory its own (no two alike), of two or three points, some diverged."""
    runs = []
    for block, groups in (("ab", ("a|b", "b", "b")), ("c", ("c", "c", "c"))):
        for seed in range(3):
            for k, (method, group) in enumerate(zip(("bn", "fbn", "gn"), groups, strict=True)):
                base = 100 * (block == "c") + 10 * seed + k
                points = [(10, base), (20, base + 0.5)] + ([(30, base + 0.7)] if k else [])
                runs.append(_rows({"normalizer": method, "seed": seed}, group, points,
                                  "diverged" if (seed, k) == (1, 2) else "ok"))
    return _frame(runs)


MOVING = ["step", "test_accuracy", "status"]


def _trajectories(summary):
    """Run id -> its trajectory: the tuple of its (step, test_accuracy, status) rows."""
    return {run: tuple(map(tuple, rows[MOVING].to_numpy().tolist()))
            for run, rows in summary.groupby("run_id", sort=False)}


def test_a_permutation_moves_trajectories_within_block_and_seed_only():
    summary = _blocked_summary()
    assert [c for c in SUMMARY_METRICS if c in summary.columns] == MOVING
    fixed = [c for c in summary.columns if c not in MOVING]
    block, seed = blocks(summary), summary.groupby("run_id")["seed"].first()
    before = _trajectories(summary)
    cell = {run: (block[run], seed[run]) for run in before}
    moved = 0
    for rng_seed in range(5):
        out = permuted(summary, np.random.default_rng(rng_seed))
        assert list(out.columns) == list(summary.columns)
        # each run keeps its config (and its experiments)
        configs = out.groupby("run_id")[fixed].first()
        assert configs.equals(summary.groupby("run_id")[fixed].first())
        after = _trajectories(out)
        assert after.keys() == before.keys()
        for run, trajectory in after.items():  # never across a block or a seed
            donors = [r for r, t in before.items() if t == trajectory]
            assert len(donors) == 1 and cell[donors[0]] == cell[run]
        for key in set(cell.values()):  # the same trajectories in each block x seed
            runs = [r for r in before if cell[r] == key]
            assert sorted(after[r] for r in runs) == sorted(before[r] for r in runs)
        moved += sum(after[r] != before[r] for r in before)
    assert moved > 0  # not the identity


def test_a_permutation_is_a_function_of_the_generators_seed():
    summary = _blocked_summary()
    one = permuted(summary, np.random.default_rng(7))
    pd.testing.assert_frame_equal(one, permuted(summary, np.random.default_rng(7)))
    others = [permuted(summary, np.random.default_rng(s)) for s in range(8, 12)]
    assert any(not one.equals(other) for other in others)


# ---------------------------------------------------------------------------------------------
# The null's shares.


def _experiment(rng, effect=0.0, seeds=4):
    """6 methods x ``seeds`` seeds in one experiment 'e', each run settled (flat at its final
    accuracy, drawn from N(60, 3²); fbn's + ``effect``)."""
    runs = []
    for method in METHODS:
        for seed in range(seeds):
            value = rng.normal(60.0 + (effect if method == "fbn" else 0.0), 3.0)
            runs.append(_rows({"normalizer": method, "seed": seed}, "e",
                              [(10, value), (20, value)]))
    return _frame(runs)


def _words(pairs):
    return parse_words({"tuning": None, "claims": [
        {"id": f"c{i}", "paper": "fbn", "source": "§4", "words": f"{a} beats {b}",
         "experiment": "e", "relation": "greater", "a": {"normalizer": a},
         "b": {"normalizer": b}} for i, (a, b) in enumerate(pairs)]})


def test_without_an_effect_the_share_of_firm_verdicts_stays_near_alpha():
    """6 claims on 6 methods of one distribution, 10 permutations: each claim's chance of a firm
    verdict is about α = 0.05 a look (holds: the one-sided t test at α; contradicted: rejecting
    a shortfall of the 2-point sesoi, rarer still), so the expected share is about 0.05, with
    the Monte Carlo error of 60 correlated judgements on top (over 80 data seeds the mean share
    was 0.063 on average, at most 0.10 for 90 % of them, 0.18 at most; here 0.10)."""
    words = _words([(METHODS[i], METHODS[(i + 1) % 6]) for i in range(6)])
    null = null_shares(words, _experiment(np.random.default_rng(0)), permutations=10, seed=0)
    assert list(null.columns) == list(NULL_COLUMNS)
    assert null["permutation"].tolist() == list(range(10))
    assert (null["judged"] == 6).all()
    assert (null["firm_share"] == (null["holds"] + null["contradicted"]) / 6).all()
    assert null["firm_share"].mean() <= 0.15


def test_the_null_tells_a_real_effect_from_noise():
    """fbn 20 points above five other methods: on the real labels every claim 'fbn beats X'
    holds; with the trajectories permuted within seed, fbn's slot holds the +20 run one time in
    six, and the firm share falls to a few percent (over 80 data seeds 0.066 on average, 0.22
    at most; here 0.02)."""
    words = _words([("fbn", m) for m in METHODS[1:]])
    summary = _experiment(np.random.default_rng(1), effect=20.0)
    assert (words_ledger(words, summary)["verdict"] == HOLDS).all()
    null = null_shares(words, summary, permutations=10, seed=1)
    assert (null["judged"] == 5).all()
    assert null["firm_share"].mean() <= 0.25


def test_a_null_at_two_looks_is_never_firmer_than_at_one():
    """At α / 2 a look each test is stricter: the same permutations give no more firm
    verdicts (here the third permutation's one firm verdict at α is not firm at α / 2)."""
    words = _words([(METHODS[i], METHODS[(i + 1) % 6]) for i in range(6)])
    summary = _experiment(np.random.default_rng(0))
    one = null_shares(words, summary, permutations=3, seed=0)
    two = null_shares(words, summary, permutations=3, seed=0, looks=2)
    firm_one, firm_two = (n["holds"] + n["contradicted"] for n in (one, two))
    assert (firm_two <= firm_one).all() and firm_one.sum() > firm_two.sum()


# ---------------------------------------------------------------------------------------------
# Its lines in the ledger.


def test_the_null_line_names_permutations_firm_and_judged_counts_and_alpha():
    null = pd.DataFrame({"permutation": [0, 1, 2], "judged": [6, 6, 6], "holds": [1, 0, 0],
                         "contradicted": [0, 1, 0], "firm_share": [1 / 6, 1 / 6, 0.0]})
    [line] = null_lines(null, 0.05)
    assert "(3 permutations" in line
    _, low, high = null_interval(null)
    assert (f"2 firm verdicts of 18 judged, 11.1% (95 % interval {low:.1%}–{high:.1%}), "
            "against α = 0.05.") in line
    assert "real labels" not in line
    [line] = null_lines(null, 0.05, [HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_RUN])
    assert line.endswith("against α = 0.05 (on the real labels: 2 of 3).")
    assert null_lines(pd.DataFrame(columns=list(NULL_COLUMNS)), 0.05) == []


@pytest.mark.parametrize("alpha", [0.025, 0.1])
def test_the_null_line_states_the_alpha_it_is_given(alpha):
    null = pd.DataFrame({"permutation": [0], "judged": [4], "holds": [0], "contradicted": [0],
                         "firm_share": [0.0]})
    assert f"0 firm verdicts of 4 judged, 0.0%, against α = {alpha:g}." in null_lines(
        null, alpha)[0]  # one permutation: no interval


# ---------------------------------------------------------------------------------------------
# The vectorized null against the ledger judged again on permuted summaries.


def _varied_summary(rng):
    """One experiment 'e', 4 seeds: six methods at heterogeneity 0 and naive BN also at 0.5 and
    1; trajectories of 4 points, some flat, some climbing (naive BN at heterogeneity 0 always:
    FBN's 4-point lead over it is vetoed on the real labels), two runs diverged; FixBN with an
    lr drop at step 25 (its window starts after it)."""
    runs = []
    settings = [({"normalizer": m}, 60.0 + 4 * i) for i, m in enumerate(METHODS)]
    settings += [({"normalizer": "bn", "heterogeneity": h}, 55.0 + 10 * h) for h in (0.5, 1.0)]
    for keys, level in settings:
        for seed in range(4):
            extra = ({"lr": [0.1, 0.01], "lr_milestones": [25]}
                     if keys["normalizer"] == "fixbn" else {})
            climb = 4.0 if keys == {"normalizer": "bn"} else rng.choice([0.0, 0.5, 4.0])
            final = rng.normal(level, 1.0)
            points = [(step, final - climb * (40 - step) / 10 + rng.normal(0, 0.3))
                      for step in (10, 20, 30, 40)]
            dead = (keys["normalizer"], seed) in {("gn", 1), ("ln", 3)}
            runs.append(_rows({**keys, **extra, "seed": seed}, "e", points,
                              "diverged" if dead else "ok"))
    return _frame(runs)


def _varied_words():
    base = {"paper": "fbn", "source": "§4", "words": "w", "experiment": "e"}
    claims = [
        {"id": "greater", "relation": "greater", "a": {"normalizer": "fixbn"},
         "b": {"normalizer": "bn"}, "where": {"heterogeneity": 0}},
        {"id": "veto", "relation": "greater", "a": {"normalizer": "fbn"},
         "b": {"normalizer": "bn"}, "where": {"heterogeneity": 0}},
        {"id": "diverged", "relation": "greater", "a": {"normalizer": "gn"},
         "b": {"normalizer": "ln"}},
        {"id": "window", "relation": "greater", "a": {"normalizer": "in"},
         "b": {"normalizer": "fbn"}, "at": "window"},
        {"id": "near", "relation": "within", "delta": 3, "a": {"normalizer": "gn"},
         "b": {"normalizer": "fbn"}},
        {"id": "best", "relation": "best", "a": {"normalizer": "fixbn"},
         "others": [{"normalizer": "in"}, {"normalizer": "ln"}, {"normalizer": "fbn"}]},
        {"id": "trend", "relation": "trend", "where": {"normalizer": "bn"},
         "over": "heterogeneity", "direction": "increasing"},
        {"id": "absent", "relation": "greater", "a": {"normalizer": "gn_ws"},
         "b": {"normalizer": "bn"}},
    ]
    return parse_words({"tuning": None, "claims": [{**base, **c} for c in claims]})


@pytest.mark.parametrize("looks", [1, 2])
def test_the_vectorized_null_gives_the_ledgers_verdicts_on_each_permutation(looks):
    """Each permutation's verdicts, claim by claim, equal the ledger judged again on the
    permuted summary (the slow path): margins, diverged seeds for and against, Holm, the
    settled veto with windows after an lr drop, trends, near-equalities and a claim not run;
    on 12 permutations of two draws of data, and the real labels (the identity)."""
    words = _varied_words()
    firm = 0
    vetoed = 0
    for data_seed in (0, 1):
        summary = _varied_summary(np.random.default_rng(data_seed))
        identity = pd.Series(sorted(summary["run_id"].unique()),
                             index=sorted(summary["run_id"].unique()))
        draws = [identity] + [donors(summary, np.random.default_rng(s)) for s in range(6)]
        codes = null_codes(words, summary, draws, looks)
        for draw, row in zip(draws, codes, strict=True):
            frame = summary if draw is identity else carrying(summary, draw)
            ledger = words_ledger(words, frame, looks)
            slow = ledger["verdict"].tolist()
            assert [VERDICT[c] for c in row] == slow
            firm += sum(v in (HOLDS, CONTRADICTED) for v in slow)
            vetoed += int(ledger["detail"].str.contains("else ").sum())
    # the comparison saw firm verdicts and vetoed ones, not only inconclusive ones
    assert firm > 0 and vetoed > 0


def test_the_interval_is_a_t_interval_over_the_permutations():
    shares = np.array([0.0, 0.02, 0.04, 0.01, 0.03])
    null = pd.DataFrame({"permutation": range(5), "judged": 50, "holds": 0,
                         "contradicted": (shares * 50).astype(int), "firm_share": shares})
    share, low, high = null_interval(null)
    half = stats.t.ppf(0.975, 4) * shares.std(ddof=1) / np.sqrt(5)
    assert share == pytest.approx(0.02) and (low, high) == pytest.approx((0.02 - half,
                                                                          0.02 + half))
