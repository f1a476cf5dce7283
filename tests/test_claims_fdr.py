"""Across the ledger: Benjamini–Yekutieli q-values beside each verdict
(fednorm.claims.words_ledger) and the firm verdicts expected false under the ledger's own null
, each against a reference written another way."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fednorm.claims.words import CONTRADICTED, HOLDS, INCONCLUSIVE, NOT_RUN
from fednorm.claims.words_ledger import WORDS_COLUMNS, q_by, with_q


def _by(p):
    """Benjamini–Yekutieli by its definition: q_(i) = min over j ≥ i of m c(m) p_(j) / j, at
    most 1, c(m) = Σ_{i ≤ m} 1/i."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p)
    scaled = m * sum(1 / i for i in range(1, m + 1)) * p[order] / np.arange(1, m + 1)
    q = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    out = np.empty(m)
    out[order] = q
    return out


def test_by_q_values_match_their_definition_and_keep_nan():
    p = np.array([0.001, 0.02, 0.3, 0.004, math.nan, 0.04, 0.9])
    q = q_by(p)
    known = ~np.isnan(p)
    assert np.isnan(q[~known]).all()
    assert q[known] == pytest.approx(_by(p[known]), abs=1e-12)
    # BY is BH times c(m) (before the cap and the step-down minimum)
    assert (q[known] >= stats.false_discovery_control(p[known], method="bh")).all()


def _row(cid, verdict, p_for, p_against):
    row = dict.fromkeys(WORDS_COLUMNS, "")
    return {**row, "id": cid, "verdict": verdict, "margin": 0.0, "detail": "d",
            "own_method": False, "needs": "", "p_for": p_for, "p_against": p_against,
            "p_negligible": math.nan}


def test_the_ledger_has_bys_q_of_each_side_and_of_its_verdicts_side():
    rows = [_row("a", HOLDS, 0.001, 0.9), _row("b", CONTRADICTED, 0.8, 0.002),
            _row("c", INCONCLUSIVE, 0.2, 0.3), _row("d", HOLDS, 0.01, 0.7),
            _row("e", NOT_RUN, math.nan, math.nan)]
    table = pd.DataFrame(rows, columns=list(WORDS_COLUMNS))
    out = with_q(table).set_index("id")
    for side in ("for", "against"):
        p = out[f"p_{side}"].astype(float).to_numpy()
        assert out[f"q_by_{side}"].to_numpy()[:4] == pytest.approx(_by(p[:4]), abs=1e-12)
        assert math.isnan(out.loc["e", f"q_by_{side}"])
    assert out.loc["b", "q_by"] == out.loc["b", "q_by_against"]
    assert out.loc["a", "q_by"] == out.loc["a", "q_by_for"]
    assert (out["q_by"].iloc[:4] >= out["q"].iloc[:4]).all()
