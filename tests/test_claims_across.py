"""fednorm.claims.across and `fednorm across-seeds`: two ledgers' verdicts side by side, on
ledgers written by hand."""

import pandas as pd
import pytest

from fednorm.claims.across import compare_ledgers, summary
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
        "5 claims judged in both: 3 keep their verdict (60.0 %), 1 move between firm and "
        "inconclusive, 1 flip between holds and contradicted")


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
