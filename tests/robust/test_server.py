"""The server of a Byzantine run: what it receives (attack on the last f rows, variance floor on
the attacked rows only) and how it combines, against hand formulas on small float64 matrices."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from fednorm.config import run_config
from fednorm.norms.rules import Stats
from fednorm.robust.aggregators import aggregate
from fednorm.robust.server import Server

N, F, C = 10, 3, 3
FLOOR = 1e-5
# ALIE, n = 10, f = 3: s = floor(10/2 + 1) - 3 = 3, z = Φ⁻¹((10 - 3)/10) = Φ⁻¹(0.7)
# = √2·erf⁻¹(0.4) = 0.5244005127080407 (standard normal table).
PHI_INV_0_7 = 0.5244005127080407


def reports(seed: int = 0) -> Stats:
    """(10, 3) float64 client statistics: means of both signs, positive variances, and one
    honest variance (row 2, channel 1) below the floor, which must stay as it is."""
    gen = torch.Generator().manual_seed(seed)
    mean = torch.randn(N, C, generator=gen, dtype=torch.float64) + torch.tensor(
        [2.0, -1.0, 0.3], dtype=torch.float64)
    var = 0.5 + torch.rand(N, C, generator=gen, dtype=torch.float64)
    var[2, 1] = 1e-7
    return Stats(mean, var)


def by_hand(name: str, honest: torch.Tensor, eps: float = 1.1, z: float = 0.0) -> torch.Tensor:
    """The attack vector (C,) from its docstring formula, with sums instead of mean/std."""
    m = honest.sum(0) / honest.shape[0]
    if name == "sf":
        return -m
    if name == "foe":
        return -eps * m
    std = torch.sqrt(((honest - m) ** 2).sum(0) / (honest.shape[0] - 1))  # sample std
    return m + z * std


@pytest.mark.parametrize("server", [Server(attack="none", f=F), Server(attack="sf", f=0),
                                    Server()], ids=["none_f3", "sf_f0", "default"])
def test_receive_without_attack_or_without_byzantine_clients_is_the_identity(server):
    """attack 'none' (even with f > 0) or f = 0: every row, Byzantine rows included, arrives
    exactly as the clients computed it."""
    rep = reports()
    got = server.receive(rep)
    assert torch.equal(got.mean, rep.mean) and torch.equal(got.var, rep.var)


@pytest.mark.parametrize(("attack", "params", "z"), [
    ("sf", {}, 0.0),
    ("foe", {"foe_eps": 1.7}, 0.0),
    ("alie", {"alie_z": 1.3}, 1.3),
    ("alie", {}, PHI_INV_0_7),  # z = None: from n and f
])
def test_receive_replaces_the_last_f_rows_by_the_attack_on_the_honest_rows(attack, params, z):
    """Rows 0..6 are the input's bit for bit; rows 7..9 are the attack formula applied to the
    honest rows, separately for means and variances; attacked variances are max(v, floor)."""
    rep = reports(1)
    server = Server(attack=attack, f=F, var_floor=FLOOR, **params)
    got = server.receive(rep)
    h = N - F
    assert got.mean.shape == (N, C) and got.var.shape == (N, C)
    assert torch.equal(got.mean[:h], rep.mean[:h]) and torch.equal(got.var[:h], rep.var[:h])
    eps = params.get("foe_eps", 1.1)
    mean_attack = by_hand(attack, rep.mean[:h], eps, z)
    var_attack = by_hand(attack, rep.var[:h], eps, z)
    for row in range(h, N):
        torch.testing.assert_close(got.mean[row], mean_attack, rtol=1e-12, atol=1e-12)
        if attack in ("sf", "foe"):  # minus a positive mean: negative, so exactly the floor
            assert torch.all(var_attack < 0)
            assert torch.equal(got.var[row], torch.full((C,), FLOOR, dtype=torch.float64))
        else:  # ALIE with z > 0 on positive variances: above the floor, unchanged
            assert torch.all(var_attack > FLOOR)
            torch.testing.assert_close(got.var[row], var_attack, rtol=1e-12, atol=1e-12)
    assert got.var[2, 1] == 1e-7  # an honest variance below the floor is not clamped


def test_alie_with_negative_z_clamps_only_the_negative_attacked_coordinates():
    """mean - 2·std is negative on channel 1 only (widely spread variances): that coordinate
    becomes the floor, channel 0 (tight variances) keeps the formula's value."""
    var = torch.tensor([[1.0 + 0.01 * i, 0.1 + i] for i in range(N)], dtype=torch.float64)
    rep = Stats(torch.zeros(N, 2, dtype=torch.float64), var)
    # honest channel 0: 1.00..1.06, mean 1.03, sample std 0.0216; channel 1: 0.1..6.1,
    # mean 3.1, sample std 2.16, so 3.1 - 2 * 2.16 < 0.
    v = by_hand("alie", var[: N - F], z=-2.0)
    assert v[0] > 1e-3 and v[1] < 0  # the case covers both branches
    got = Server(attack="alie", f=F, alie_z=-2.0, var_floor=1e-3).receive(rep).var
    for row in range(N - F, N):
        torch.testing.assert_close(got[row, 0], v[0], rtol=1e-12, atol=0.0)
        assert got[row, 1] == 1e-3


def test_receive_needs_more_than_2f_rows():
    """f = 3 Byzantine rows among 6: not a minority, refused with the counts in the message."""
    rep = Stats(torch.zeros(6, C), torch.ones(6, C))
    with pytest.raises(ValueError, match=r"more than 2f = 6 client rows, got 6"):
        Server(attack="sf", f=3).receive(rep)


def test_combine_default_is_the_plain_mean_bit_for_bit():
    x = reports(3).mean
    assert torch.equal(Server().combine(x), x.mean(0))
    assert torch.equal(Server(attack="sf", f=F).combine(x), x.mean(0))  # no defense


@pytest.mark.parametrize(("name", "nnm"), [("mean", True), ("median", False), ("median", True),
                                         ("trimmed_mean", False), ("trimmed_mean", True)])
def test_combine_is_the_configured_aggregator(name, nnm):
    """combine = aggregators.aggregate(x, aggregator, f, nnm), with the server's own f."""
    x = reports(4).mean
    torch.testing.assert_close(Server(aggregator=name, f=F, nnm=nnm).combine(x),
                               aggregate(x, name, F, nnm=nnm), rtol=0, atol=0)


@pytest.mark.parametrize(("aggregator", "nnm", "expected"), [
    ("median", False, 2.5),       # (2 + 3) / 2
    ("trimmed_mean", False, 2.5),  # drop 0 and 10, mean of 2 and 3
    # NNM, n - f = 3 neighbours: rows 0, 2, 3 all mix {0, 2, 3} -> 5/3; row 10 mixes
    # {10, 3, 2} -> 5. Median of (5/3, 5/3, 5/3, 5) = 5/3.
    ("median", True, 5.0 / 3.0),
    ("trimmed_mean", True, 5.0 / 3.0),  # drop one 5/3 and the 5
])
def test_combine_by_hand_on_four_clients(aggregator, nnm, expected):
    x = torch.tensor([[0.0], [2.0], [3.0], [10.0]], dtype=torch.float64)
    got = Server(aggregator=aggregator, f=1, nnm=nnm).combine(x)
    assert got.shape == (1,)
    assert math.isclose(float(got[0]), expected, rel_tol=1e-12)


def test_from_config_carries_every_key():
    """Every Server field is read from the RunConfig key of the same name (distinct non-default
    values, so a swapped positional argument would show)."""
    cfg = run_config({"normalizer": "fbn", "attack": "alie", "f": 2, "aggregator": "trimmed_mean",
                      "nnm": True, "foe_eps": 2.5, "alie_z": 0.75, "var_floor": 1e-4,
                      "attack_stats": "var", "attack_updates": True})
    server = Server.from_config(cfg)
    names = [field.name for field in dataclasses.fields(Server)]
    assert set(names) == {"attack", "f", "aggregator", "nnm", "foe_eps", "alie_z", "var_floor",
                          "attack_stats", "attack_updates"}
    for name in names:
        assert getattr(server, name) == getattr(cfg, name), name
        assert getattr(server, name) != getattr(Server(), name), name


@pytest.mark.parametrize(("stats", "attacked_mean", "attacked_var"),
                         [("mean", True, False), ("var", False, True), ("mean_var", True, True)])
def test_attack_stats_chooses_which_statistic_the_byzantine_rows_falsify(
        stats, attacked_mean, attacked_var):
    """attack_stats 'mean': the Byzantine rows send -mean(honest means) and their own, honest
    variances; 'var': their own means and the floor (SF on positive variances)."""
    rep = reports(2)
    got = Server(attack="sf", f=F, var_floor=FLOOR, attack_stats=stats).receive(rep)
    h = N - F
    byz_mean = -(rep.mean[:h].sum(0) / h)
    expected_mean = byz_mean.expand(F, C) if attacked_mean else rep.mean[h:]
    expected_var = torch.full((F, C), FLOOR, dtype=torch.float64) if attacked_var else rep.var[h:]
    torch.testing.assert_close(got.mean[h:], expected_mean, rtol=1e-12, atol=1e-12)
    assert torch.equal(got.var[h:], expected_var)
    assert torch.equal(got.mean[:h], rep.mean[:h]) and torch.equal(got.var[:h], rep.var[:h])


def test_receive_rows_attacks_any_client_matrix_without_a_floor():
    """Updates are not variances: receive_rows replaces the last f rows by the attack (here SF,
    negative entries kept) and leaves the honest rows bit for bit."""
    x = reports(3).mean
    got = Server(attack="sf", f=F).receive_rows(x)
    h = N - F
    assert torch.equal(got[:h], x[:h])
    torch.testing.assert_close(got[h:], (-(x[:h].sum(0) / h)).expand(F, C), rtol=1e-12,
                               atol=1e-12)
    assert torch.equal(Server(f=F).receive_rows(x), x)
