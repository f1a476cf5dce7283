"""fednorm.claims.across and `fednorm across-seeds`: two ledgers' verdicts side by side, on
ledgers written by hand."""

import pandas as pd
import pytest

from fednorm.claims.across import compare_ledgers, regroupings, summary
from fednorm.cli import main
from fednorm.inputs import InputError

A = {"c1": "holds", "c2": "holds", "c3": "contradicted", "c4": "inconclusive", "c5": "not run",
     "c6": "holds", "only-a": "holds"}
B = {"c1": "holds", "c2": "contradicted", "c3": "inconclusive", "c4": "inconclusive",
     "c5": "not run", "c6": "holds", "only-b": "contradicted"}


def _ledger(verdicts):
    return pd.DataFrame({"id": list(verdicts), "verdict": list(verdicts.values()),
                         "paper": "fbn"})


def test_each_shared_claim_keeps_moves_or_flips():
    table = compare_ledgers(_ledger(A), _ledger(B)).set_index("id")
    assert dict(table.change) == {"c1": "same", "c2": "flipped", "c3": "moved", "c4": "same",
                                  "c5": "not judged", "c6": "same"}
    assert summary(table.reset_index()) == (
        "5 claims judged in both: 3 keep their verdict (60.0 %), 1 move to another verdict, "
        "1 flip between holds and contradicted")


def test_ledgers_without_verdicts_or_shared_claims_are_refused():
    with pytest.raises(InputError, match=r"second ledger: no column \['verdict'\]"):
        compare_ledgers(_ledger(A), pd.DataFrame({"id": ["c1"]}))
    with pytest.raises(InputError, match="share no claim id"):
        compare_ledgers(_ledger({"x": "holds"}), _ledger({"y": "holds"}))


def test_the_command_prints_the_changes_and_fails_on_a_flip(tmp_path, capsys):
    a, b, same = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "same.csv"
    _ledger(A).to_csv(a, index=False)
    _ledger(B).to_csv(b, index=False)
    _ledger({k: v for k, v in A.items() if k != "c2"}).to_csv(same, index=False)
    assert main(["across-seeds", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "c2" in out and "flipped" in out and "c3" in out and "c1 " not in out
    assert main(["across-seeds", str(same), str(b)]) == 0  # moves only: no flip


def _pooled():
    """Three seed sets of a profile: grid g2 on two seeds a set (0-5), g1 on one (0, 2, 4);
    two rows (steps) a run, as a summary has."""
    rows = [{"figure_group": g, "seed": s, "step": t}
            for g, seeds in (("g2", range(6)), ("g1", (0, 2, 4))) for s in seeds for t in (0, 1)]
    return pd.DataFrame(rows)


def test_regroupings_draw_each_pair_of_disjoint_seed_sets_once_with_each_grids_share():
    runs = _pooled()
    pairs = list(regroupings(runs, 2))
    # 45 pairs of disjoint pairs of 6 seeds, less the 18 in which a set has no even seed
    # (g1's seeds): (1, 3), (1, 5) and (3, 5) each against the 6 pairs of the rest
    assert len(pairs) == 27
    assert len({(a, b) for a, b, *_ in pairs}) == 27
    assert not {(b, a) for a, b, *_ in pairs} & {(a, b) for a, b, *_ in pairs}
    for a, b, runs_a, runs_b in pairs:
        assert not set(a) & set(b)
        for chosen, kept in ((a, runs_a), (b, runs_b)):
            seeds = kept.groupby("figure_group").seed.unique().map(sorted).to_dict()
            assert seeds["g2"] == sorted(chosen)  # two seeds a set: all of them
            assert seeds["g1"] == [min(s for s in chosen if s % 2 == 0)]  # one: the smallest
            assert len(kept) == 2 * (len(chosen) + 1)  # every step of each kept run
    three = list(regroupings(runs, 3))
    assert len(three) == 9  # the 10 splits of 6 seeds in two, less {1, 3, 5} | {0, 2, 4}
    assert all(len(r.loc[r.figure_group == "g1"].seed.unique()) == 1 for *_, r, _ in three)


def test_regroupings_refuse_a_k_beyond_half_the_seeds_and_runs_without_seeds():
    with pytest.raises(InputError, match=r"k: 4; allowed: 1 to 3 \(half of the 6 pooled"):
        list(regroupings(_pooled(), 4))
    with pytest.raises(InputError, match="runs: no column 'seed'"):
        list(regroupings(_pooled().drop(columns="seed"), 2))
