"""FedBatchNorm2d under each statistics rule, checked against nn.BatchNorm2d and hand formulas.

All checks run in float64 (the layer is a plain nn.Module, so ``.double()`` applies) on a
γ = 0-like batch: client i's values have mean ~i and scale 1 + i/5, so the client means are
spread far apart and every rule's treatment of that spread is visible.
"""

from __future__ import annotations

import statistics

import pytest
import torch
from torch import nn

from fednorm.fl.server import commit_stats
from fednorm.norms import (
    BatchStats,
    FedBatchNorm2d,
    FederatedStats,
    FrozenStats,
    HybridBatchNorm2d,
    HybridStats,
    NormContext,
    UnionStats,
    bn_layers,
    norm_context,
)
from fednorm.norms.rules import Stats, mean_rows
from fednorm.robust import Server, coordinate_median

N_CLIENTS, B, C, H, W = 10, 4, 3, 5, 5
K = B * H * W  # values per channel in one client's batch
EPS = 1e-5
BETA = 0.1


def client_batches(seed: int = 0, n: int = N_CLIENTS, b: int = B, h: int = H) -> torch.Tensor:
    """(n*b, C, h, h) float64, client-major; client i ~ i + (1 + i/5) * N(0, 1) (+ a channel
    offset so the channels differ too)."""
    gen = torch.Generator().manual_seed(seed)
    i = torch.arange(n, dtype=torch.float64).reshape(n, 1, 1, 1, 1)
    channel = torch.tensor([0.0, -2.0, 0.5], dtype=torch.float64).reshape(1, 1, C, 1, 1)
    noise = torch.randn(n, b, C, h, h, generator=gen, dtype=torch.float64)
    return (i + channel + (1 + i / 5) * noise).reshape(n * b, C, h, h)


def make_pair(running: tuple[torch.Tensor, torch.Tensor] | None, seed: int = 1):
    """A FedBatchNorm2d and an nn.BatchNorm2d (momentum BETA) with identical float64 weights,
    biases and running statistics; ``running=None`` keeps the (0, 1) initialization."""
    gen = torch.Generator().manual_seed(seed)
    fed = FedBatchNorm2d(C, eps=EPS).double()
    ref = nn.BatchNorm2d(C, eps=EPS, momentum=BETA).double()
    with torch.no_grad():
        w = 0.5 + torch.rand(C, generator=gen, dtype=torch.float64)
        bias = torch.randn(C, generator=gen, dtype=torch.float64)
        for m in (fed, ref):
            m.weight.copy_(w)
            m.bias.copy_(bias)
            if running is not None:
                m.running_mean.copy_(running[0])
                m.running_var.copy_(running[1])
    return fed, ref


NONTRIVIAL = (
    torch.tensor([3.0, -1.5, 0.7], dtype=torch.float64),
    torch.tensor([9.0, 0.4, 2.5], dtype=torch.float64),
)


def fed_forward(layer: FedBatchNorm2d, x: torch.Tensor, rule, n_groups: int = N_CLIENTS):
    ctx = NormContext(rule, n_groups, N_CLIENTS, BETA)
    with norm_context(ctx):
        out = layer(x)
    return out, ctx


def per_client(x: torch.Tensor, n: int = N_CLIENTS) -> torch.Tensor:
    """(n*b, C, H, W) -> (n, C, b*H*W): each client's values per channel."""
    return x.reshape(n, -1, C, *x.shape[2:]).transpose(1, 2).reshape(n, C, -1)


def per_channel(x: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) -> (C, N*H*W)."""
    return x.transpose(0, 1).reshape(C, -1)


# --- 1. FBN (Algorithm 2) ---------------------------------------------------------------------


@pytest.mark.parametrize("running", [None, NONTRIVIAL], ids=["zero_one", "nontrivial"])
def test_fbn_aggregated_running_stats_equal_batchnorm_on_union(running):
    """Appendix A: after one FBN step and the server's correction (line 10), the shared running
    statistics equal nn.BatchNorm2d's after one training forward on the union batch."""
    x = client_batches()
    fed, ref = make_pair(running)
    layers = bn_layers(fed)
    _, ctx = fed_forward(fed, x, FederatedStats())
    commit_stats(layers, ctx.reports, FederatedStats(), N_CLIENTS, BETA)
    ref.train()
    ref(x)
    # The heterogeneity is large (client means 0..9): the naive average would be far off.
    torch.testing.assert_close(fed.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fed.running_var, ref.running_var, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("running", [None, NONTRIVIAL], ids=["zero_one", "nontrivial"])
def test_fbn_training_output_uses_previous_running_stats_without_gradient(running):
    """Algorithm 2 line 3: y = (x - run_mean) / sqrt(run_var + eps) * w + b with the *previous*
    shared statistics, which are constants: d/dx sum(y * r) = w / sqrt(run_var + eps) * r."""
    x = client_batches().requires_grad_(True)
    fed, _ = make_pair(running)
    bn_layers(fed)
    rm, rv = fed.running_mean.clone(), fed.running_var.clone()
    out, _ = fed_forward(fed, x, FederatedStats())
    shape = (1, C, 1, 1)
    expected = (x - rm.view(shape)) / torch.sqrt(rv.view(shape) + EPS) * fed.weight.view(
        shape
    ) + fed.bias.view(shape)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    # The forward pass itself never touches the buffers.
    assert torch.equal(fed.running_mean, rm) and torch.equal(fed.running_var, rv)

    r = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    (gx,) = torch.autograd.grad((out * r).sum(), x)
    scale = (fed.weight / torch.sqrt(rv + EPS)).detach().view(shape)
    torch.testing.assert_close(gx, scale * r, rtol=1e-12, atol=1e-12)


def test_fbn_client_reports_follow_algorithm_2_lines_5_6():
    """Each client's report: (1-β) run + β batch mean, and (1-β) run_var + β Kn/(Kn-1) var_i."""
    x = client_batches(seed=3)
    fed, _ = make_pair(NONTRIVIAL)
    bn_layers(fed)
    _, ctx = fed_forward(fed, x, FederatedStats())
    vals = per_client(x)
    mean_i = vals.mean(-1)
    var_i = vals.var(-1, unbiased=False)
    kn = K * N_CLIENTS
    rep = ctx.reports[fed.key]
    assert rep.mean.shape == (N_CLIENTS, C) and rep.var.shape == (N_CLIENTS, C)
    torch.testing.assert_close(rep.mean, (1 - BETA) * NONTRIVIAL[0] + BETA * mean_i,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rep.var, (1 - BETA) * NONTRIVIAL[1] + BETA * kn / (kn - 1) * var_i,
                               rtol=1e-12, atol=1e-12)


# --- 2. Naive BN: the law-of-total-variance bias ------------------------------------------------


def test_naive_bn_running_variance_is_biased_by_the_between_client_variance():
    """BatchStats averages per-client running variances: from (0, 1) the aggregate is
    (1-β) + β mean_i s_i^2 (s_i^2 = unbiased variance of client i), and it falls short of
    BatchNorm-on-the-union by β (Var_u(union) - mean_i s_i^2), which by the law of total variance
    is β ((Kn/(Kn-1) - K/(K-1)) mean_i var_i + Kn/(Kn-1) spread(means)) ≈ β spread for large K."""
    n, b, h = N_CLIENTS, 4, 5  # K = 100
    x = client_batches(seed=11, n=n, b=b, h=h)
    fed, ref = make_pair(None)
    layers = bn_layers(fed)
    _, ctx = fed_forward(fed, x, BatchStats())
    commit_stats(layers, ctx.reports, BatchStats(), n, BETA)
    ref.train()
    ref(x)

    vals = per_client(x, n)  # (n, C, K)
    k = vals.shape[-1]
    s2 = torch.var(vals, dim=-1, unbiased=True)  # per client, K/(K-1)
    torch.testing.assert_close(fed.running_mean, BETA * vals.mean(-1).mean(0),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fed.running_var, (1 - BETA) + BETA * s2.mean(0),
                               rtol=1e-12, atol=1e-12)

    union_var = torch.var(per_channel(x), dim=-1, unbiased=True)  # Kn/(Kn-1)
    diff = ref.running_var - fed.running_var
    torch.testing.assert_close(diff, BETA * (union_var - s2.mean(0)), rtol=1e-10, atol=1e-12)

    # The same difference from the decomposition: within-client part + spread of the means.
    kn = k * n
    var_i = torch.var(vals, dim=-1, unbiased=False)
    spread = torch.var(vals.mean(-1), dim=0, unbiased=False)  # between-client variance
    decomposed = BETA * ((kn / (kn - 1) - k / (k - 1)) * var_i.mean(0) + kn / (kn - 1) * spread)
    torch.testing.assert_close(diff, decomposed, rtol=1e-10, atol=1e-12)
    # Large K: the bias is essentially β times the between-client variance (~8.25 here).
    assert torch.all(spread > 5)
    torch.testing.assert_close(diff, BETA * spread, rtol=0.02, atol=0.0)


# --- 3. central: nn.BatchNorm2d on the union batch --------------------------------------------


@pytest.mark.parametrize("running", [None, NONTRIVIAL], ids=["zero_one", "nontrivial"])
def test_central_equals_batchnorm_on_union_outputs_gradients_and_running_stats(running):
    x = client_batches(seed=2)
    fed, ref = make_pair(running)
    layers = bn_layers(fed)
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    out1, ctx = fed_forward(fed, x1, UnionStats())
    ref.train()
    out2 = ref(x2)
    torch.testing.assert_close(out1, out2, rtol=1e-10, atol=1e-10)

    r = torch.randn(x.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    g1 = torch.autograd.grad((out1 * r).sum(), (x1, fed.weight, fed.bias))
    g2 = torch.autograd.grad((out2 * r).sum(), (x2, ref.weight, ref.bias))
    for a, e in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-10)

    commit_stats(layers, ctx.reports, UnionStats(), N_CLIENTS, BETA)
    torch.testing.assert_close(fed.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fed.running_var, ref.running_var, rtol=1e-12, atol=1e-12)


# --- 4. Naive BN in training: each client normalizes with its own batch ----------------------


def test_batchstats_output_per_client_equals_batchnorm_on_that_client_alone():
    x = client_batches(seed=4)
    fed, ref = make_pair(NONTRIVIAL)
    bn_layers(fed)
    x1 = x.clone().requires_grad_(True)
    out, _ = fed_forward(fed, x1, BatchStats())
    r = torch.randn(x.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    gx, gw = torch.autograd.grad((out * r).sum(), (x1, fed.weight))

    gw_ref = torch.zeros_like(gw)
    for i in range(N_CLIENTS):
        rows = slice(i * B, (i + 1) * B)
        ref_i = nn.BatchNorm2d(C, eps=EPS, momentum=BETA).double().train()
        ref_i.load_state_dict(ref.state_dict())
        xi = x[rows].clone().requires_grad_(True)
        yi = ref_i(xi)
        torch.testing.assert_close(out[rows], yi, rtol=1e-10, atol=1e-10)
        gxi, gwi = torch.autograd.grad((yi * r[rows]).sum(), (xi, ref_i.weight))
        torch.testing.assert_close(gx[rows], gxi, rtol=1e-9, atol=1e-10)
        gw_ref += gwi
    torch.testing.assert_close(gw, gw_ref, rtol=1e-9, atol=1e-10)


def test_batchstats_reports_are_each_clients_own_batchnorm_running_stats():
    """Client i's report equals the running statistics nn.BatchNorm2d would hold after one
    training forward on client i's batch alone (K/(K-1) unbiased variance)."""
    x = client_batches(seed=6)
    fed, ref = make_pair(NONTRIVIAL)
    bn_layers(fed)
    _, ctx = fed_forward(fed, x, BatchStats())
    rep = ctx.reports[fed.key]
    for i in range(N_CLIENTS):
        ref_i = nn.BatchNorm2d(C, eps=EPS, momentum=BETA).double().train()
        ref_i.load_state_dict(ref.state_dict())
        ref_i(x[i * B : (i + 1) * B])
        torch.testing.assert_close(rep.mean[i], ref_i.running_mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rep.var[i], ref_i.running_var, rtol=1e-12, atol=1e-12)


# --- 5. Eval mode ------------------------------------------------------------------------------


def test_eval_mode_normalizes_with_running_stats_like_batchnorm_eval():
    x = client_batches(seed=7)
    fed, ref = make_pair(NONTRIVIAL)
    fed.eval()
    ref.eval()
    out = fed(x)  # no NormContext needed in eval mode
    torch.testing.assert_close(out, ref(x), rtol=1e-12, atol=1e-12)
    # Not the batch statistics: the same input in a different batch gives the same output.
    torch.testing.assert_close(fed(x[:B]), out[:B], rtol=0, atol=0)


def test_training_forward_without_context_is_an_error():
    fed, _ = make_pair(None)
    with pytest.raises(RuntimeError, match="NormContext"):
        fed(client_batches())


def test_frozen_stats_normalize_with_running_and_report_them_unchanged():
    """FixBN's calibration rule: y uses the running statistics (no batch statistics), and
    committing the reports leaves the running statistics exactly where they were."""
    x = client_batches(seed=12).requires_grad_(True)
    fed, ref = make_pair(NONTRIVIAL)
    layers = bn_layers(fed)
    out, ctx = fed_forward(fed, x, FrozenStats())
    ref.eval()
    torch.testing.assert_close(out, ref(x), rtol=1e-12, atol=1e-12)
    commit_stats(layers, ctx.reports, FrozenStats(), N_CLIENTS, BETA)
    assert torch.equal(fed.running_mean, NONTRIVIAL[0])
    assert torch.equal(fed.running_var, NONTRIVIAL[1])


def test_frozen_commit_leaves_float32_running_stats_bit_identical():
    """FixBN after T*: "nothing is updated any more". With the paper's 10 clients and float32
    statistics of a realistic width (64 channels), one commit of FrozenStats reports must give
    back exactly the running statistics (the reports are n copies of them)."""
    n, c = 10, 64
    gen = torch.Generator().manual_seed(0)
    layer = FedBatchNorm2d(c)
    with torch.no_grad():
        layer.running_mean.copy_(3 * torch.randn(c, generator=gen))
        layer.running_var.copy_(0.1 + 10 * torch.rand(c, generator=gen))
    rm, rv = layer.running_mean.clone(), layer.running_var.clone()
    layers = bn_layers(layer)
    x = torch.randn(n * 2, c, 3, 3, generator=gen)
    ctx = NormContext(FrozenStats(), n, n, BETA)
    with norm_context(ctx):
        layer(x)
    commit_stats(layers, ctx.reports, FrozenStats(), n, BETA)
    for name, now, before in (("running_mean", layer.running_mean, rm),
                              ("running_var", layer.running_var, rv)):
        changed = int((now != before).sum())
        drift = float((now - before).abs().max())
        assert changed == 0, f"{name}: {changed}/{c} channels moved (max |change| {drift:.3g})"


# --- 6. FBN line 10 under the server's rule (Byzantine robustness) ----------------------------


def hand_reports() -> Stats:
    """(10, 2) float64 running statistics of 10 clients, written out by hand; the last three
    rows are outliers (as Byzantine rows would be)."""
    mean = torch.tensor([[0.5, -1.0], [0.7, -1.2], [0.4, -0.9], [0.9, -1.5], [0.6, -1.1],
                         [0.3, -0.8], [0.8, -1.3], [9.0, 5.0], [9.0, 5.0], [-7.0, 4.0]],
                        dtype=torch.float64)
    var = torch.tensor([[1.0, 2.0], [1.2, 2.2], [0.9, 1.9], [1.1, 2.5], [1.3, 2.1],
                        [0.8, 1.8], [1.05, 2.05], [1e-5, 1e-5], [1e-5, 1e-5], [50.0, 1e-5]],
                       dtype=torch.float64)
    return Stats(mean, var)


def test_fbn_aggregate_with_a_robust_rule_is_line_10_with_that_rule_everywhere():
    """mean = median(mean_i); var = median(var_i) + Kn/((Kn-1)β) median((mean_i - mean)^2),
    the medians taken per channel with Python's statistics.median."""
    rep, k, n = hand_reports(), 100, 10
    got = FederatedStats().aggregate(rep, k, n, BETA, coordinate_median)
    for c in range(2):
        m = statistics.median(rep.mean[:, c].tolist())
        spread = statistics.median([(v - m) ** 2 for v in rep.mean[:, c].tolist()])
        var = statistics.median(rep.var[:, c].tolist()) + k * n / ((k * n - 1) * BETA) * spread
        assert got.mean[c].item() == pytest.approx(m, rel=1e-12)
        assert got.var[c].item() == pytest.approx(var, rel=1e-12)


def test_fbn_aggregate_with_the_mean_rule_is_algorithm_2():
    """The default combine, mean_rows and the default Server's combine give the same bits, and
    they equal line 10 written with sums: mean = Σ mean_i / n,
    var = Σ var_i / n + Kn/((Kn-1)β) Σ (mean_i - mean)^2 / n."""
    rep, k, n = hand_reports(), 100, 10
    rule = FederatedStats()
    default = rule.aggregate(rep, k, n, BETA)
    for combine in (mean_rows, Server().combine):
        other = rule.aggregate(rep, k, n, BETA, combine)
        assert torch.equal(default.mean, other.mean) and torch.equal(default.var, other.var)
    mean = rep.mean.sum(0) / n
    var = rep.var.sum(0) / n + k * n / ((k * n - 1) * BETA) * ((rep.mean - mean) ** 2).sum(0) / n
    torch.testing.assert_close(default.mean, mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(default.var, var, rtol=1e-12, atol=1e-12)


N_BYZ = 3  # the last 3 of N_CLIENTS = 10 clients


def byzantine_batches(seed: int = 21, centre: float = 12.0, spacing: float = 2.0):
    """(10*B, C, H, W) float64. Honest client i < 7 ~ centre + spacing*(i - 3) + N(0, 1), so the
    7 honest means are 6, 8, ..., 18 (γ = 0-like heterogeneity); the 3 Byzantine clients hold
    data around the centre (what they compute is replaced by the attack anyway)."""
    gen = torch.Generator().manual_seed(seed)
    m = centre + spacing * (torch.arange(N_CLIENTS, dtype=torch.float64) - 3)
    m[N_CLIENTS - N_BYZ :] = centre
    noise = torch.randn(N_CLIENTS, B, C, H, W, generator=gen, dtype=torch.float64)
    return (m.view(-1, 1, 1, 1, 1) + noise).reshape(N_CLIENTS * B, C, H, W)


def commit_under(server: Server, rule, x: torch.Tensor) -> FedBatchNorm2d:
    """One training forward of all 10 clients with ``rule`` from (0, 1), then the server's
    receive/combine; returns the layer holding the committed running statistics."""
    fed, _ = make_pair(None)
    layers = bn_layers(fed)
    _, ctx = fed_forward(fed, x, rule)
    commit_stats(layers, ctx.reports, rule, N_CLIENTS, BETA, server)
    return fed


def honest_reference(x: torch.Tensor) -> nn.BatchNorm2d:
    """nn.BatchNorm2d (momentum β, from (0, 1)) after one forward on the honest union only."""
    _, ref = make_pair(None)
    ref.train()
    ref(x[: (N_CLIENTS - N_BYZ) * B])
    return ref


@pytest.mark.parametrize("aggregator", ["median", "trimmed_mean"])
def test_fbn_under_sign_flip_with_nnm_defense_recovers_batchnorm_on_the_honest_union(aggregator):
    """SF, f = 3, NNM + median / trimmed mean: FBN's shared statistics are BatchNorm's on the 7
    honest clients' union, while naive BN's variance misses the between-client spread.

    Why nearly exact: SF sends -β·12 (means) and the floor (variances), farther from every
    honest row than the honest rows are from each other (honest means β·6..β·18, squared
    deviations ≤ 36β², variances ≈ 1; Byzantine squared deviations (24β)²). So NNM maps every
    honest row to the exact average of the 7 honest rows, and both rules (median; trimmed
    mean dropping 3 per side) return it. FBN then differs from BatchNorm on the honest union
    only by n = 10 instead of 7 in Kn/(Kn-1): a relative error below 1/(7K) - 1/(10K) ≈ 4e-4
    (K = 100). Naive BN averages within-client variances (≈ 1) only: 0.9 + 0.1 vs the
    reference 0.9 + 0.1 (1 + 16) (spread of 6..18 is 16), a relative error ≈ 1 - 1/2.6 = 0.62.
    (Means centred at 0 would not do: SF would send ≈ 0, inside the honest cloud.)"""
    x = byzantine_batches()
    ref = honest_reference(x)
    server = Server(attack="sf", f=N_BYZ, aggregator=aggregator, nnm=True)
    fbn = commit_under(server, FederatedStats(), x)
    torch.testing.assert_close(fbn.running_mean, ref.running_mean, rtol=1e-10, atol=0.0)
    rel = ((fbn.running_var - ref.running_var) / ref.running_var).abs()
    assert torch.all(rel < 1e-3), rel

    naive = commit_under(server, BatchStats(), x)
    torch.testing.assert_close(naive.running_mean, ref.running_mean, rtol=1e-10, atol=0.0)
    rel_naive = ((naive.running_var - ref.running_var) / ref.running_var).abs()
    assert torch.all(rel_naive > 0.5), rel_naive


def test_fbn_under_undefended_sign_flip_has_its_mean_pulled_towards_zero():
    """SF with a plain mean: 7 honest rows plus 3 rows of -(honest mean) average to
    (7 - 3)/10 = 0.4 times the honest mean, i.e. 0.6 of the reference mean away from it."""
    x = byzantine_batches()
    ref = honest_reference(x)
    fbn = commit_under(Server(attack="sf", f=N_BYZ), FederatedStats(), x)
    torch.testing.assert_close(fbn.running_mean, 0.4 * ref.running_mean, rtol=1e-10, atol=0.0)
    assert torch.all((fbn.running_mean - ref.running_mean).abs() > 0.5 * ref.running_mean.abs())


# --- Hybrid BN (Chen et al., ICML 2025) ------------------------------------------------------


def hybrid_pair(running, mix: float):
    """A HybridBatchNorm2d with make_pair's weights and running statistics, d = ``mix``."""
    fed, _ = make_pair(running)
    hybrid = HybridBatchNorm2d(C, eps=EPS).double()
    hybrid.load_state_dict({**fed.state_dict(), "mix": torch.full((C,), mix)})
    bn_layers(hybrid)
    return hybrid, fed


def test_hybrid_bn_at_start_mixes_global_and_batch_statistics_half_and_half():
    """d = 0, so a = 0.5: client i's values are normalized with 0.5 G + 0.5 (its batch mean,
    biased variance), written here per client from the values (with the gradient that flows
    through the batch part: compared by autograd of this formula)."""
    x = client_batches().requires_grad_(True)
    hybrid, _ = hybrid_pair(NONTRIVIAL, 0.0)
    out, ctx = fed_forward(hybrid, x, HybridStats())
    values = per_client(x)  # (n, C, K)
    mean = 0.5 * NONTRIVIAL[0] + 0.5 * values.mean(-1)
    var = 0.5 * NONTRIVIAL[1] + 0.5 * values.var(-1, correction=0)
    xs = x.reshape(N_CLIENTS, B, C, H, W)
    shape = (N_CLIENTS, 1, C, 1, 1)
    want = ((xs - mean.view(shape)) / torch.sqrt(var.view(shape) + EPS)
            * hybrid.weight.view(1, 1, C, 1, 1) + hybrid.bias.view(1, 1, C, 1, 1))
    torch.testing.assert_close(out, want.reshape(x.shape), rtol=1e-12, atol=1e-12)
    r = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    (g_layer,) = torch.autograd.grad((out * r).sum(), x)
    (g_want,) = torch.autograd.grad((want.reshape(x.shape) * r).sum(), x)
    torch.testing.assert_close(g_layer, g_want, rtol=1e-10, atol=1e-12)
    # ``hybridbn_report: batch``: it reports as FBN does (the server step is FBN's)
    fbn, _ = make_pair(NONTRIVIAL)
    bn_layers(fbn)
    _, fbn_ctx = fed_forward(fbn, x, FederatedStats())
    _, raw_ctx = fed_forward(hybrid, x, HybridStats("batch"))
    for stat in ("mean", "var"):
        torch.testing.assert_close(getattr(raw_ctx.reports[hybrid.key], stat),
                                   getattr(fbn_ctx.reports[fbn.key], stat), rtol=0, atol=0)
    # ``mixed`` (the default, the authors' code): the mixture it normalized with, moved from G
    # by beta with FBN's Kn/(Kn-1)
    K = B * H * W
    unbias = K * N_CLIENTS / (K * N_CLIENTS - 1)
    report = ctx.reports[hybrid.key]
    torch.testing.assert_close(report.mean, (1 - BETA) * NONTRIVIAL[0] + BETA * mean.detach(),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(report.var,
                               (1 - BETA) * NONTRIVIAL[1] + BETA * unbias * var.detach(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("mix", "reference"), [(-40.0, FederatedStats()), (40.0, BatchStats())],
                         ids=["a_to_0_frozen_global", "a_to_1_plain_bn"])
def test_hybrid_bn_limits_are_frozen_global_bn_and_plain_bn(mix, reference):
    """a -> 0: normalizing with the global statistics alone, as FBN / FixBN's frozen stage do
    (no gradient through them); a -> 1: each client's plain BatchNorm. Outputs and input
    gradients agree with those layers' (sigmoid(-40) ~ 4e-18)."""
    x = client_batches().requires_grad_(True)
    hybrid, fed = hybrid_pair(NONTRIVIAL, mix)
    out, _ = fed_forward(hybrid, x, HybridStats())
    want, _ = fed_forward(fed, x, reference)
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9)
    r = torch.randn(x.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    (g_out,) = torch.autograd.grad((out * r).sum(), x)
    (g_want,) = torch.autograd.grad((want * r).sum(), x)
    torch.testing.assert_close(g_out, g_want, rtol=1e-8, atol=1e-9)


def test_hybrid_bn_server_step_is_the_smoothed_pooled_union_of_the_clients_values_by_hand():
    """The server's step over the n clients' raw reports (``hybridbn_report: batch``):
    mean <- (1-beta) G + beta * mean of all nK values, var <- (1-beta) G_var + beta * their
    unbiased variance: computed here from the concatenated values themselves."""
    x = client_batches()
    hybrid, _ = hybrid_pair(NONTRIVIAL, 0.0)
    layers = bn_layers(hybrid)
    ctx = NormContext(HybridStats("batch"), N_CLIENTS, N_CLIENTS, BETA)
    with norm_context(ctx):
        hybrid(x)
    commit_stats(layers, ctx.reports, HybridStats("batch"), N_CLIENTS, BETA)
    values = per_channel(x)  # (C, nK)
    torch.testing.assert_close(hybrid.running_mean,
                               (1 - BETA) * NONTRIVIAL[0] + BETA * values.mean(1),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hybrid.running_var,
                               (1 - BETA) * NONTRIVIAL[1] + BETA * values.var(1, correction=1),
                               rtol=1e-12, atol=1e-12)


def test_hybrid_bn_evaluates_with_the_global_statistics():
    x = client_batches()
    hybrid, fed = hybrid_pair(NONTRIVIAL, 1.5)
    torch.testing.assert_close(hybrid.eval()(x), fed.eval()(x), rtol=0, atol=0)
