"""rliable's statistics (fednorm.improvement) against references written another way: explicit
loops over pairs of runs and over the bootstrap's draws, and worked examples by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from fednorm import improvement as imp


def _runs(cells: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """One row per (method, setting, seed): cells map (method, setting) to its seeds' values."""
    return pd.DataFrame([{"method": m, "setting": s, "seed": i, "value": v}
                         for (m, s), values in cells.items() for i, v in enumerate(values)])


def _loop_probability(x, y) -> float:
    """P(X > Y) by counting pairs: a win 1, a tie 1/2; a NaN below every number."""
    def key(v):
        return -np.inf if np.isnan(v) else v
    total = 0.0
    for a, b in itertools.product(x, y):
        total += 1.0 if key(a) > key(b) else 0.5 if key(a) == key(b) else 0.0
    return total / (len(x) * len(y))


def test_a_worked_example_by_hand():
    """X = (1, 2, 3), Y = (2, 2): pairs (1,2) 0 twice, (2,2) 1/2 twice, (3,2) 1 twice: 3/6;
    X = (3, 4), Y = (1, 3.5): 1 + 0 + 1 + 1 = 3/4; a diverged run loses to every number and
    ties another diverged one."""
    assert imp.probability([1, 2, 3], [2, 2]) == 0.5
    assert imp.probability([3, 4], [1, 3.5]) == 0.75
    assert imp.probability([np.nan, 5], [1, np.nan]) == (0 + 0.5 + 1 + 1) / 4
    runs = _runs({("bn", "a"): [2, 2], ("x", "a"): [1, 2, 3],
                  ("bn", "b"): [1, 3.5], ("x", "b"): [3, 4]})
    row = imp.improvement(runs, "bn", replicates=50).set_index("method").loc["x"]
    assert row["probability"] == pytest.approx((0.5 + 0.75) / 2)
    assert row["settings"] == 2 and row["runs"] == 5


def test_the_probability_is_the_loop_over_pairs_and_mirrors():
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = np.round(rng.normal(0, 1, rng.integers(1, 7)), 1)
        y = np.round(rng.normal(0.3, 1, rng.integers(1, 7)), 1)
        x[rng.uniform(size=len(x)) < 0.1] = np.nan
        assert imp.probability(x, y) == pytest.approx(_loop_probability(x, y), abs=1e-12)
        assert imp.probability(x, y) + imp.probability(y, x) == pytest.approx(1.0)


def test_iqm_is_the_mean_of_the_middle_half():
    """Eight runs 1..8: the middle half is 3, 4, 5, 6 (mean 4.5), whatever the outlier; the
    mean moves with a collapsed run, the IQM does not."""
    runs = _runs({("bn", "a"): [1, 2, 3, 4], ("bn", "b"): [5, 6, 7, 8],
                  ("x", "a"): [1, 2, 3, 4], ("x", "b"): [5, 6, 7, -80]})
    table = imp.improvement(runs, "bn", replicates=20).set_index("method")
    assert table.loc["bn", "iqm"] == 4.5 and table.loc["bn", "mean"] == 4.5
    assert table.loc["x", "iqm"] == pytest.approx(np.mean([2, 3, 4, 5]))
    assert table.loc["x", "mean"] == pytest.approx((10 + 18 - 80) / 8)


def test_the_stratified_bootstrap_is_the_loop_over_its_draws():
    """The interval from the same draws computed by explicit loops: per replicate, per
    setting, the method's runs and the baseline's each resampled with replacement, P(X > Y)
    over every pair of the resampled runs, averaged over the settings."""
    rng = np.random.default_rng(2)
    cells = {}
    for setting in ("s1", "s2", "s3"):
        cells["bn", setting] = list(np.round(rng.normal(60, 3, 4), 1))
        cells["x", setting] = list(np.round(rng.normal(62, 3, 3 if setting == "s2" else 5), 1))
    runs = _runs(cells)
    replicates = 300
    got = imp.improvement(runs, "bn", replicates=replicates, seed=7).set_index("method")
    draws = np.random.default_rng(7)
    for setting in ("s1", "s2", "s3"):  # the baseline's own row draws first (its IQM)
        draws.integers(0, len(cells["bn", setting]), (replicates, len(cells["bn", setting])))
    boot = np.zeros((replicates, 3))
    for k, setting in enumerate(("s1", "s2", "s3")):
        x, y = np.array(cells["x", setting]), np.array(cells["bn", setting])
        ix = draws.integers(0, len(x), (replicates, len(x)))
        iy = draws.integers(0, len(y), (replicates, len(y)))
        for r in range(replicates):
            boot[r, k] = _loop_probability(x[ix[r]], y[iy[r]])
    low, high = np.quantile(boot.mean(axis=1), [0.025, 0.975])
    assert got.loc["x", "low"] == pytest.approx(low, abs=1e-12)
    assert got.loc["x", "high"] == pytest.approx(high, abs=1e-12)
    assert got.loc["x", "low"] <= got.loc["x", "probability"] <= got.loc["x", "high"]
    assert np.isnan(got.loc["bn", "probability"])


def test_a_setting_the_baseline_lacks_is_left_out_and_one_run_each_has_no_spread():
    runs = _runs({("bn", "a"): [50.0], ("x", "a"): [60.0], ("x", "b"): [10.0]})
    row = imp.improvement(runs, "bn", replicates=50).set_index("method").loc["x"]
    assert (row["probability"], row["low"], row["high"], row["settings"]) == (1.0, 1.0, 1.0, 1)


def test_the_profile_is_the_share_above_tau_with_a_band_from_the_draws():
    runs = _runs({("bn", "a"): [1.0, 2.0, np.nan], ("bn", "b"): [3.0, 4.0],
                  ("x", "a"): [5.0, 6.0]})
    taus = [0.0, 1.0, 2.5, 4.0, 10.0]
    data = imp.profile(runs, taus, replicates=400, seed=3)
    bn = data[data["method"] == "bn"]
    assert bn["fraction"].tolist() == [4 / 5, 3 / 5, 2 / 5, 0.0, 0.0]  # 1.0 is not above 1
    assert (data["low"] <= data["fraction"] + 1e-12).all()
    assert (data["fraction"] <= data["high"] + 1e-12).all()
    draws = np.random.default_rng(3)
    values = [np.array([1.0, 2.0, -np.inf]), np.array([3.0, 4.0])]
    shares = np.zeros((400, len(taus)))
    picks = [draws.integers(0, len(v), (400, len(v))) for v in values]
    for r in range(400):
        pooled = np.concatenate([v[p[r]] for v, p in zip(values, picks, strict=True)])
        shares[r] = [(pooled > t).mean() for t in taus]
    assert bn["low"].to_numpy() == pytest.approx(np.quantile(shares, 0.025, axis=0))
    assert bn["high"].to_numpy() == pytest.approx(np.quantile(shares, 0.975, axis=0))


def test_bad_input_is_refused():
    runs = _runs({("bn", "a"): [1.0], ("x", "a"): [2.0]})
    with pytest.raises(ValueError, match="baseline: 'gn'; allowed: a method of the runs"):
        imp.improvement(runs, "gn")
    with pytest.raises(ValueError, match=r"columns \['value'\] missing"):
        imp.improvement(runs.drop(columns="value"), "bn")
    with pytest.raises(ValueError, match="appears twice"):
        imp.profile(pd.concat([runs, runs]), [0.0])
    with pytest.raises(ValueError, match="replicates: 0"):
        imp.improvement(runs, "bn", replicates=0)
