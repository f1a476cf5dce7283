"""The 2-D toy of the FBN paper (§3-4, Figures 1-2) at paper scale: facts about each scheme."""

from __future__ import annotations

import math
from functools import cache

import pandas as pd
import pytest
import torch

from fednorm.config import ToyConfig
from fednorm.toy import (
    SCHEMES,
    ToyResult,
    class_means,
    error_table,
    points_table,
    simulate,
)

CFG = ToyConfig()  # the paper's n = 10, m = 30, T = 100, beta = 0.1, s^2 = 1, r = 10
SEEDS = (0, 1, 2)


@cache
def run(scheme: str, gamma: float, seed: int = 0) -> ToyResult:
    return simulate(CFG, scheme, gamma, seed)


def mean_error(scheme: str, gamma: float) -> float:
    """Error averaged over the rounds, then over SEEDS."""
    return sum(float(run(scheme, gamma, s).error.mean()) for s in SEEDS) / len(SEEDS)


# --- configuration and data ----------------------------------------------------------------


def test_class_means_match_the_paper_formula() -> None:
    means = class_means(CFG)
    assert means.shape == (10, 2)
    for k in range(10):
        theta = (2 * math.pi * (k + 1) - 1) / 10
        assert means[k].tolist() == pytest.approx([10 * math.cos(theta), 10 * math.sin(theta)])
    assert torch.allclose(means.norm(dim=1), torch.full((10,), 10.0, dtype=means.dtype))


@pytest.mark.parametrize(
    ("key", "value"),
    [("n_clients", 1), ("points_per_client", 1), ("rounds", 0), ("beta", 0.0), ("beta", 1.5),
     ("spread", -1.0), ("fixbn_freeze", 1.2), ("eps", 0.0), ("rounds", 2.5)],
)
def test_config_rejects_bad_values_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"'{key}'"):
        ToyConfig(**{key: value})


def test_unknown_scheme_is_rejected_with_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"scheme='gn'.*central, bn, fbn, fixbn"):
        simulate(CFG, "gn", 0.0, 0)


def test_gamma_zero_gives_each_client_30_points_of_one_class_of_its_own() -> None:
    result = run("bn", 0.0)
    assert result.points.shape == (100, 300, 2)
    per_client = result.labels.view(100, 10, 30)  # client-major rows
    assert (per_client == per_client[:, :, :1]).all()  # one class per client
    assert (per_client[:, :, 0] == torch.arange(10)).all()  # client i holds class i


def test_gamma_one_mixes_the_classes_on_every_client() -> None:
    per_client = run("bn", 1.0).labels.view(100, 10, 30)
    classes_seen = torch.tensor([[len(torch.unique(c)) for c in rnd] for rnd in per_client])
    assert classes_seen.float().mean() > 8  # 30 iid draws of 10 classes: ~9.6 distinct
    counts = torch.stack([torch.bincount(rnd, minlength=10) for rnd in run("bn", 1.0).labels])
    assert (counts == 30).all()  # the round still holds 30 points of every class


def test_points_scatter_around_their_class_mean_with_variance_s2() -> None:
    result = run("bn", 0.5)
    centred = result.points - class_means(CFG)[result.labels]
    assert centred.mean().abs() < 0.02  # 60,000 N(0, 1) values: std of the mean ~0.004
    assert centred.var().item() == pytest.approx(1.0, abs=0.03)


def test_every_scheme_sees_the_same_draws_and_seeds_differ() -> None:
    for scheme in SCHEMES:
        assert torch.equal(run(scheme, 0.1).points, run("central", 0.1).points)
    assert not torch.equal(run("bn", 0.1, 0).points, run("bn", 0.1, 1).points)


def test_simulate_is_deterministic_and_leaves_the_global_rng_alone() -> None:
    state = torch.get_rng_state()
    first = simulate(CFG, "fbn", 0.5, 7)
    assert torch.equal(torch.get_rng_state(), state)
    second = simulate(CFG, "fbn", 0.5, 7)
    for field in ("points", "labels", "normalized", "running_var", "error"):
        assert torch.equal(getattr(first, field), getattr(second, field))


def test_fewer_rounds_give_a_prefix_of_the_same_run() -> None:
    short = simulate(ToyConfig(rounds=10), "bn", 0.1, 0)
    assert torch.equal(short.points, run("bn", 0.1).points[:10])
    assert torch.equal(short.normalized, run("bn", 0.1).normalized[:10])


# --- the schemes ------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
def test_central_error_is_exactly_zero(gamma: float) -> None:
    result = run("central", gamma)
    assert torch.equal(result.normalized, result.central)
    assert (result.error == 0).all()


def test_central_reference_is_the_union_batch_normalization() -> None:
    result = run("fbn", 0.0)
    x = result.points
    mean, var = x.mean(dim=1, keepdim=True), x.var(dim=1, unbiased=False, keepdim=True)
    torch.testing.assert_close(result.central, (x - mean) / torch.sqrt(var + CFG.eps))


def test_naive_bn_centres_every_client_on_the_origin() -> None:
    per_client = run("bn", 0.0).normalized.view(100, 10, 30, 2)
    torch.testing.assert_close(per_client.mean(dim=2), torch.zeros(100, 10, 2, dtype=torch.float64))


def test_fbn_normalizes_with_the_previous_shared_statistics() -> None:
    result = run("fbn", 0.0)
    prev_mean = torch.cat([torch.zeros(1, 2, dtype=torch.float64), result.running_mean[:-1]])
    prev_var = torch.cat([torch.ones(1, 2, dtype=torch.float64), result.running_var[:-1]])
    expected = (result.points - prev_mean[:, None]) / torch.sqrt(prev_var[:, None] + CFG.eps)
    torch.testing.assert_close(result.normalized, expected)


@pytest.mark.parametrize("gamma", [0.0, 0.1, 1.0])
def test_fbn_shared_statistics_equal_the_centralized_ones_every_round(gamma: float) -> None:
    fbn, central = run("fbn", gamma), run("central", gamma)
    torch.testing.assert_close(fbn.running_mean, central.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fbn.running_var, central.running_var, rtol=1e-12, atol=1e-12)


def test_naive_bn_running_variance_misses_the_spread_of_the_class_means() -> None:
    # Law of total variance: union var = within-class s^2 (1) + spread of the means (r^2/2 = 50).
    bn, central = run("bn", 0.0), run("central", 0.0)
    assert bn.running_var[-1].max() < 1.5
    assert central.running_var[-1].min() > 40


def test_fixbn_statistics_are_frozen_after_round_t_star() -> None:
    result = run("fixbn", 0.0)
    freeze = round(CFG.fixbn_freeze * CFG.rounds)  # 50: rounds 1..50 naive BN, 51..100 frozen
    for stats in (result.running_mean, result.running_var):
        assert torch.equal(stats[freeze - 1:], stats[freeze - 1].expand(CFG.rounds - freeze + 1, 2))
        assert not torch.equal(stats[freeze - 2], stats[freeze - 1])  # still moving before
    # Before the freeze it normalizes exactly like naive BN on the same draws.
    assert torch.equal(result.normalized[:freeze], run("bn", 0.0).normalized[:freeze])


def test_fbn_error_is_far_below_naive_bn_at_gamma_zero() -> None:
    fbn, bn = mean_error("fbn", 0.0), mean_error("bn", 0.0)
    assert fbn < bn / 5
    assert bn > 1.0  # classes pulled onto the origin, away from their ring of radius ~1.4


def test_fbn_error_is_only_the_warm_up_from_the_initial_statistics() -> None:
    error = run("fbn", 0.0).error
    assert error[0] > 5  # round 1 normalizes with mean 0, var 1: points stay at radius ~10
    assert error[50:].mean() < 0.05


def test_all_schemes_are_close_at_gamma_one() -> None:
    gap = mean_error("bn", 0.0) - mean_error("fbn", 0.0)
    at_iid = [mean_error(scheme, 1.0) for scheme in ("bn", "fbn", "fixbn")]
    assert max(at_iid) - min(at_iid) < 0.2 * gap


def test_naive_bn_error_grows_with_heterogeneity() -> None:
    errors = [mean_error("bn", gamma) for gamma in (1.0, 0.5, 0.1, 0.0)]
    assert errors == sorted(errors)


# --- tables -------------------------------------------------------------------------------


def test_error_table_is_tidy_and_averages_the_rounds() -> None:
    table = error_table(CFG, ["bn", "fbn"], [0.0, 1.0], [0, 1])
    assert list(table.columns) == ["scheme", "gamma", "seed", "error"]
    assert len(table) == 8
    row = table[(table["scheme"] == "bn") & (table["gamma"] == 1.0) & (table["seed"] == 1)]
    assert row["error"].item() == pytest.approx(float(run("bn", 1.0, 1).error.mean()))


def test_points_table_holds_the_round_before_and_after() -> None:
    result = run("fbn", 0.0)
    table = points_table(result, 100)
    assert list(table.columns) == ["x", "y", "label", "stage"]
    assert table["stage"].value_counts().to_dict() == {"before": 300, "after": 300}
    after = table[table["stage"] == "after"]
    assert after[["x", "y"]].to_numpy().tolist() == result.normalized[99].tolist()
    before = table[table["stage"] == "before"]
    assert before[["x", "y"]].to_numpy().tolist() == result.points[99].tolist()
    assert after["label"].tolist() == result.labels[99].tolist()
    assert isinstance(table, pd.DataFrame)
    with pytest.raises(ValueError, match="round"):
        points_table(result, 0)
