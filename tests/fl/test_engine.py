"""The federated engine against straightforward references: plain PyTorch SGD on the union
batch, a per-client Python loop for FedAvg, hand-written momentum formulas, and FixBN's
freezing."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from client_loop import client_step, hybrid_start_statistics

from fednorm import rng
from fednorm.config import RunConfig, run_config
from fednorm.data.augment import augment_for
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.fl.optim import momentum_step
from fednorm.fl.round import DSGD, FedAvg
from fednorm.models import build_model
from fednorm.norms import (
    BatchStats,
    FrozenStats,
    HybridStats,
    NormContext,
    bn_layers,
    fixbn_freeze_step,
    norm_context,
    normalizer_for,
)
from fednorm.norms.fedwon import AGC_EPS, adaptive_clip
from fednorm.robust import Server, coordinate_median, nearest_neighbour_mixing

N_CLIENTS, B, SIZE = 3, 4, 8


@pytest.fixture(autouse=True)
def _float64():
    """Every comparison here is of two ways to compute the same thing: in float64 (models and
    data of this module) they agree to rounding of ~1e-12, whatever the machine's threads, so a
    bug shows at order 1 and no float32 tolerance is tuned to one machine."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(default)


def tiny_config(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=SIZE, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="gn", gn_groups=2, n_clients=N_CLIENTS,
        batch_size=B, steps=10, lr=[0.05], lr_milestones=[], momentum=0.9,
        momentum_convention="ema", eval_every=5, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def client_data(seed: int = 0, per_client: int = 6, n_clients: int = N_CLIENTS):
    """Small tensor dataset split into n_clients contiguous, equal index sets; each client's
    images are shifted by a different constant (heterogeneous BN statistics)."""
    gen = torch.Generator().manual_seed(seed)
    n = n_clients * per_client
    owner = torch.arange(n) // per_client
    x = torch.randn(n, 3, SIZE, SIZE, generator=gen) + owner.double().view(-1, 1, 1, 1) / 2
    y = torch.randint(0, 10, (n,), generator=gen)
    parts = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(n_clients)]
    return x, y, parts


def batches_for(x, y, parts, seed: int) -> ClientBatches:
    """One run's sampler (a bundle of one)."""
    return ClientBatches(x, y, [parts], B, [seed])


def draw(batches: ClientBatches, step: int):
    """The one run's (x, y) of ``step``, without the run dimension."""
    xb, yb = batches.sample(step)
    return xb[0], yb[0]


def twin_models(cfg):
    torch.manual_seed(cfg.seed)
    a = build_model(cfg)
    b = build_model(cfg)
    b.load_state_dict(a.state_dict())
    return a, b


def assert_models_close(a, b, rtol=1e-9, atol=1e-12):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=rtol, atol=atol,
                                   msg=lambda m, k=k: f"{k}: {m}")


# --- 6. DSGD with GroupNorm is SGD on the union batch -----------------------------------------


def test_dsgd_gn_two_steps_equal_sgd_on_the_union_batch():
    cfg = tiny_config(normalizer="gn")
    model, ref = twin_models(cfg)
    x, y, parts = client_data()
    trainer = DSGD([cfg], [model], normalizer_for(cfg), batches_for(x, y, parts, seed=5))
    replay = batches_for(x, y, parts, seed=5)
    momenta = [torch.zeros_like(p) for p in ref.parameters()]
    for step in range(2):
        loss = trainer.round(step)[0]
        xb, yb = draw(replay, step)
        ref_loss = F.nll_loss(ref(xb), yb)
        grads = torch.autograd.grad(ref_loss, list(ref.parameters()))
        # DSGD's gradient is the mean of the clients' gradients on their own batches.
        client_grads = []
        for i in range(N_CLIENTS):
            rows = slice(i * B, (i + 1) * B)
            client_grads.append(torch.autograd.grad(F.nll_loss(ref(xb[rows]), yb[rows]),
                                                    list(ref.parameters())))
        for g, *gi in zip(grads, *client_grads, strict=True):
            torch.testing.assert_close(g, torch.stack(gi).mean(0), rtol=1e-9, atol=1e-12)
        with torch.no_grad():
            for p, m, g in zip(ref.parameters(), momenta, grads, strict=True):
                m.mul_(cfg.momentum).add_((1 - cfg.momentum) * g)  # ema convention
                p.sub_(cfg.lr[0] * m)
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-9, atol=1e-12)
        assert_models_close(model, ref, rtol=1e-9, atol=1e-12)
    # The step was not a no-op.
    assert not torch.equal(model.classifier[1].weight, twin_models(cfg)[0].classifier[1].weight)


# --- 7. FedAvg with E = 1 is DSGD ---------------------------------------------------------------


@pytest.mark.parametrize("normalizer", ["fbn", "bn", "fixbn", "gn", "hybridbn"])
def test_fedavg_with_one_local_step_equals_dsgd(normalizer):
    # Hybrid BN with one shared d (each client's own d trains on FedAvg's clients alone)
    shared = {"hybridbn_mixing": "shared"} if normalizer == "hybridbn" else {}
    cfg = tiny_config(normalizer=normalizer, momentum=0.9, steps=4, fixbn_freeze=0.5, **shared)
    m_dsgd, m_avg = twin_models(cfg)
    x, y, parts = client_data()
    dsgd = make_trainer([cfg], [m_dsgd], normalizer_for(cfg), batches_for(x, y, parts, seed=3))
    avg = make_trainer([cfg], [m_avg], normalizer_for(cfg), batches_for(x, y, parts, seed=3),
                       schedule=FedAvg)
    assert isinstance(dsgd, DSGD) and isinstance(avg, FedAvg)
    for step in range(cfg.steps):  # fixbn: 2 steps of BatchStats, then 2 frozen
        la, lb = dsgd.round(step), avg.round(step)
        torch.testing.assert_close(la, lb, rtol=1e-9, atol=1e-12)
    assert_models_close(m_dsgd, m_avg)
    if normalizer != "gn":  # the running statistics moved away from (0, 1)
        layer = bn_layers(m_avg)[0]
        assert not torch.allclose(layer.running_var, torch.ones_like(layer.running_var))


def test_fedavg_with_one_local_step_equals_dsgd_in_float64():
    """The E = 1 identity is exact arithmetic, so in float64 the two trainers agree to ~1e-12;
    this holds only if FedAvg keeps its per-client state (momenta) in the model's dtype."""
    cfg = tiny_config(normalizer="bn", momentum=0.9, steps=4)
    m_dsgd, m_avg = twin_models(cfg)
    m_dsgd.double()
    m_avg.double()
    x, y, parts = client_data()
    x = x.double()
    dsgd = make_trainer([cfg], [m_dsgd], normalizer_for(cfg), batches_for(x, y, parts, seed=3))
    avg = make_trainer([cfg], [m_avg], normalizer_for(cfg), batches_for(x, y, parts, seed=3),
                       schedule=FedAvg)
    for step in range(cfg.steps):
        dsgd.round(step)
        avg.round(step)
    assert_models_close(m_dsgd, m_avg, rtol=1e-10, atol=1e-12)


# --- 8. FedAvg with E > 1 against a per-client loop ---------------------------------------------


def fedavg_reference(cfg, model, x_batches, y_batches, rounds):
    """FedAvg written the plain way: one deep copy per client, E local momentum-SGD steps each
    (client momenta kept across rounds), then the server averages parameters and (naive BN)
    running statistics."""
    n, E = cfg.n_clients, cfg.local_steps
    rule = BatchStats() if cfg.normalizer == "bn" else None
    momenta = [[torch.zeros_like(p) for p in model.parameters()] for _ in range(n)]
    it = iter(zip(x_batches, y_batches, strict=True))
    for _ in range(rounds):
        clients = [copy.deepcopy(model) for _ in range(n)]
        for _ in range(E):
            xb, yb = next(it)
            for i, client in enumerate(clients):  # the client keeps its own statistics
                rows = slice(i * B, (i + 1) * B)
                client_step(client, xb[rows], yb[rows], rule, n, cfg.bn_momentum, momenta[i],
                            cfg.momentum, cfg.lr[0])
        with torch.no_grad():
            states = [c.state_dict() for c in clients]
            model.load_state_dict({k: torch.stack([s[k] for s in states]).mean(0)
                                   for k in states[0]})
    return model


@pytest.mark.parametrize("normalizer", ["gn", "bn"])
def test_fedavg_two_local_steps_equal_per_client_loop(normalizer):
    cfg = tiny_config(normalizer=normalizer, local_steps=2, steps=4, momentum=0.5)
    m_avg, m_ref = twin_models(cfg)
    x, y, parts = client_data()
    trainer = make_trainer([cfg], [m_avg], normalizer_for(cfg), batches_for(x, y, parts, seed=4))
    assert isinstance(trainer, FedAvg)
    replay = batches_for(x, y, parts, seed=4)
    drawn = [draw(replay, step) for step in range(4)]
    start = copy.deepcopy(m_ref.state_dict())
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    fedavg_reference(cfg, m_ref, [d[0] for d in drawn], [d[1] for d in drawn], rounds=2)
    assert_models_close(m_avg, m_ref)
    # The round moved the weights (the comparison is not between two untouched models).
    assert not torch.allclose(m_avg.classifier[3].bias, start["classifier.3.bias"])




def trained_and_twin(cfg):
    """A model trained by the engine for cfg.steps, its untrained twin, and a replay of the
    batches the engine drew (seed 4), for a per-client loop to retrace."""
    m_avg, m_ref = twin_models(cfg)
    x, y, parts = client_data()
    trainer = make_trainer([cfg], [m_avg], normalizer_for(cfg), batches_for(x, y, parts, seed=4))
    replay = batches_for(x, y, parts, seed=4)
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    return m_avg, m_ref, replay


def test_fbn_with_local_steps_equals_per_client_loop():
    """FBN with E > 1 (the FBN paper has E = 1 only; fednorm.fl.round's extension): within a
    round each client normalizes with, and moves towards its batches, its own copy of the
    shared statistics; the server averages the running means and adds the spread of the client
    means with the effective momentum of E steps, beta_E = 1 - (1 - beta)^E:
        var = mean_i var_i + Kn/((Kn - 1) beta_E) mean_i (mean_i - mean)^2.
    Written here per client, the formula by hand."""
    cfg = tiny_config(normalizer="fbn", local_steps=3, steps=6, momentum=0.5)
    m_avg, m_ref, replay = trained_and_twin(cfg)
    n, E, beta = cfg.n_clients, cfg.local_steps, cfg.bn_momentum
    beta_e = 1 - (1 - beta) ** E
    momenta = [[torch.zeros_like(p) for p in m_ref.parameters()] for _ in range(n)]
    step = 0
    for _ in range(cfg.steps // E):
        clients = [copy.deepcopy(m_ref) for _ in range(n)]
        layers = [bn_layers(c) for c in clients]
        for _ in range(E):
            xb, yb = draw(replay, step)
            step += 1
            for i, client in enumerate(clients):
                rows = slice(i * B, (i + 1) * B)
                client_step(client, xb[rows], yb[rows], normalizer_for(cfg).rule_at(0), n, beta,
                            momenta[i], cfg.momentum, cfg.lr[0])
        with torch.no_grad():
            states = [c.state_dict() for c in clients]
            new = {k: torch.stack([st[k] for st in states]).mean(0) for k in states[0]}
            for layer in layers[0]:
                K = layer.elements_per_client
                means = torch.stack([st[f"{layer.key}.running_mean"] for st in states])
                spread = ((means - means.mean(0)) ** 2).mean(0)
                new[f"{layer.key}.running_var"] = (
                    new[f"{layer.key}.running_var"] + K * n / ((K * n - 1) * beta_e) * spread)
            m_ref.load_state_dict(new)
    assert_models_close(m_avg, m_ref, rtol=1e-9, atol=1e-12)
    layer = bn_layers(m_avg)[0]
    assert not torch.allclose(layer.running_var, torch.ones_like(layer.running_var))


def hybrid_trainer(cfg, lr: float | None = None, seed: int = 4):
    """A float64 Hybrid BN model with d drawn per channel (a mixes visibly), its twin, a
    FedAvg/DSGD trainer over client_data and a replay of its draws (seed ``seed``)."""
    if lr is not None:
        cfg = run_config({**cfg.identity(), "lr": [lr]})
    m_run, m_ref = twin_models(cfg)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for model in (m_run, m_ref):
            model.double()
            for layer in bn_layers(model):
                layer.mix.copy_(torch.randn(layer.mix.shape, generator=gen.manual_seed(11)))
    x, y, parts = client_data()
    x = x.double()
    trainer = make_trainer([cfg], [m_run], normalizer_for(cfg), batches_for(x, y, parts, seed))
    return m_run, m_ref, trainer, batches_for(x, y, parts, seed)


def stats_images(replay: ClientBatches, cfg, first_step: int) -> list[torch.Tensor]:
    """Each client's images of the round-start forward (Hybrid BN's own draws)."""
    stat = replay.resized(cfg.hybridbn_stats_images, rng.STATISTICS)
    xs, _ = draw(stat, first_step)
    S = cfg.hybridbn_stats_images
    return [xs[i * S:(i + 1) * S] for i in range(cfg.n_clients)]


@pytest.mark.parametrize(("mixing", "report"),
                         [("shared", "mixed"), ("shared", "batch"), ("client", "mixed")])
@pytest.mark.parametrize("local_steps", [1, 2])
def test_hybrid_bn_round_equals_per_client_loop_with_global_model_statistics(mixing, report,
                                                                              local_steps):
    """Hybrid BN, Algorithm 1 (fednorm.norms.rules.HybridStats), in float64: a round equals a
    per-client loop in which (a) each client first runs the downloaded global model (with its
    own d: ``hybridbn_mixing: client``, the authors' code) on its own round-start images, each
    BN layer written out by hand (tests/fl/client_loop.py), the server pooling the reported
    (mixed or raw) statistics count-weighted and smoothing them with hybridbn_momentum; (b)
    then each client trains E steps normalizing with the round's G mixed with its batch (G
    does not move on the clients); (c) the server averages the parameters, d included, and
    each client keeps its own d for its next round (its first round starts from the global
    d). Two rounds, E = 1 (DSGD with one shared d) and E = 2."""
    cfg = tiny_config(normalizer="hybridbn", local_steps=local_steps, steps=2 * local_steps,
                      momentum=0.5, hybridbn_report=report, hybridbn_momentum=0.3,
                      hybridbn_stats_images=5, hybridbn_mixing=mixing)
    m_run, m_ref, trainer, replay = hybrid_trainer(cfg)
    assert isinstance(trainer, DSGD if local_steps == 1 and mixing == "shared" else FedAvg)
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    n, E = cfg.n_clients, cfg.local_steps
    momenta = [[torch.zeros_like(p) for p in m_ref.parameters()] for _ in range(n)]
    own_d: list[dict[str, torch.Tensor] | None] = [None] * n  # none until a client trains

    def client_model(i: int) -> torch.nn.Module:
        client = copy.deepcopy(m_ref)
        if mixing == "client" and own_d[i] is not None:
            client.load_state_dict({**client.state_dict(), **own_d[i]})
        return client

    for first in range(0, cfg.steps, E):
        clients = [client_model(i) for i in range(n)]
        new_stats = hybrid_start_statistics(clients, stats_images(replay, cfg, first), report,
                                            cfg.hybridbn_momentum)
        for step in range(first, first + E):
            xb, yb = draw(replay, step)
            for i, client in enumerate(clients):
                rows = slice(i * B, (i + 1) * B)
                bn_layers(client)
                with norm_context(NormContext(HybridStats(report), 1, n, cfg.bn_momentum)):
                    loss = F.nll_loss(client(xb[rows]), yb[rows])
                grads = torch.autograd.grad(loss, list(client.parameters()))
                with torch.no_grad():
                    for p, m, g in zip(client.parameters(), momenta[i], grads, strict=True):
                        m.mul_(cfg.momentum).add_((1 - cfg.momentum) * g)
                        p.sub_(cfg.lr[0] * m)
        with torch.no_grad():
            states = [c.state_dict() for c in clients]
            own_d = [{k: t.clone() for k, t in st.items() if k.endswith(".mix")} for st in states]
            new = {k: torch.stack([st[k] for st in states]).mean(0) for k in states[0]}
            for name, (mean, var) in new_stats.items():
                new[f"{name}.running_mean"], new[f"{name}.running_var"] = mean, var
            m_ref.load_state_dict(new)
        if isinstance(trainer, DSGD):  # one momentum buffer: the clients' mean (linear update)
            mean_m = [torch.stack(ms).mean(0) for ms in zip(*momenta, strict=True)]
            momenta = [[m.clone() for m in mean_m] for _ in range(n)]
    assert_models_close(m_run, m_ref, rtol=1e-8, atol=1e-9)  # sums in another order
    for layer in bn_layers(m_run):  # the statistics: to float64's rounding
        for stat in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(layer, stat),
                                       m_ref.get_submodule(layer.key).get_buffer(stat),
                                       rtol=1e-10, atol=1e-12)
    layer = bn_layers(m_run)[0]
    assert not torch.allclose(layer.running_var, torch.ones_like(layer.running_var))
    if mixing == "client":  # each client's own d, as the loop's; clients on other data differ
        key = f"{layer.key}.mix"
        kept = trainer.state.local[key][0]  # (n, C)
        torch.testing.assert_close(kept, torch.stack([d[key] for d in own_d]), rtol=1e-8,
                                   atol=1e-9)
        assert not torch.allclose(kept[0], kept[1])


def test_hybrid_bn_global_statistics_after_a_round_do_not_depend_on_the_learning_rate():
    """Algorithm 1's statistics come from the downloaded global model, before local training:
    after one round of E = 3 local steps, lr 1e-4 and 0.5 give bit-identical global
    statistics (pooling the training batches of the locally updated weights, as the engine
    did before, made them differ by ~1e-2), while the parameters do differ."""
    cfg = tiny_config(normalizer="hybridbn", local_steps=3, steps=3, momentum=0.5,
                      hybridbn_momentum=0.5)
    stats, params = [], []
    for lr in (1e-4, 0.5):
        model, _, trainer, _ = hybrid_trainer(cfg, lr=lr)
        trainer.round(0)
        stats.append({k: t.clone() for k, t in model.state_dict().items() if "running" in k})
        params.append(model.classifier[3].bias.detach().clone())
    for k in stats[0]:
        torch.testing.assert_close(stats[0][k], stats[1][k], rtol=0, atol=0,
                                   msg=lambda m, k=k: f"{k}: {m}")
    assert not torch.allclose(params[0], params[1])
    assert not torch.allclose(stats[0][next(iter(stats[0]))], torch.zeros(1, dtype=torch.float64))


@pytest.mark.parametrize(("unit", "model", "head"), [
    ("vector", "fbn_cnn", "classifier.3"), ("element", "fbn_cnn", "classifier.3"),
    ("vector", "lenet", "classifier.1"), ("vector", "digits_cnn", "classifier.7")])
def test_fedwon_clients_clip_their_own_gradients_but_the_classifier_s_unit_wise(unit, model,
                                                                                 head):
    """FedWon trains on FedAvg's per-client path also at E = 1 (each client clips its own
    gradient; clipping the clients' mean gradient would be another method): one round equals
    the average of the clients' SGD steps with Brock et al.'s adaptive clipping applied by
    hand, unit by unit (a Python loop over output units; a vector, bias or gain, one unit
    with ``agc_unit: vector``, each entry with ``element``), to every parameter but the last
    nn.Linear's; lambda small enough that most units are clipped. LeNet's and the digits
    network's convs carry FedWon's biases (no offset after them), each clipped as one unit."""
    cfg = tiny_config(normalizer="fedwon", steps=1, momentum=0.0, agc_lambda=0.002,
                      agc_unit=unit, model=model, width=2 if model == "digits_cnn" else 4)
    m_run, m_ref = twin_models(cfg)
    x, y, parts = client_data()
    trainer = make_trainer([cfg], [m_run], normalizer_for(cfg), batches_for(x, y, parts, seed=4))
    assert isinstance(trainer, FedAvg)
    trainer.round(0)
    xb, yb = draw(batches_for(x, y, parts, seed=4), 0)
    names = [k for k, _ in m_ref.named_parameters()]
    classifier = {f"{head}.weight", f"{head}.bias"}
    clipped_units, steps = 0, []
    for i in range(cfg.n_clients):
        rows = slice(i * B, (i + 1) * B)
        grads = torch.autograd.grad(F.nll_loss(m_ref(xb[rows]), yb[rows]),
                                    list(m_ref.parameters()))
        step = {}
        for name, p, g in zip(names, m_ref.parameters(), grads, strict=True):
            g = g.clone()
            if name not in classifier:
                whole = p.dim() == 1 and unit == "vector"
                for i_unit in [slice(None)] if whole else range(g.shape[0]):
                    w_norm = max(float(p[i_unit].detach().norm()), AGC_EPS)
                    if float(g[i_unit].norm()) > cfg.agc_lambda * w_norm:
                        g[i_unit] *= cfg.agc_lambda * w_norm / float(g[i_unit].norm())
                        clipped_units += 1
            step[name] = cfg.lr[0] * (1 - cfg.momentum) * g
        steps.append(step)
    with torch.no_grad():
        for name, p in m_ref.named_parameters():
            p.sub_(torch.stack([s[name] for s in steps]).mean(0))
    assert clipped_units > 10
    assert_models_close(m_run, m_ref, rtol=1e-9, atol=1e-12)


def test_adaptive_clip_is_brock_et_al_eq_3_per_unit_and_per_leading_index():
    """G_i <- lam max(||W_i||, eps) / ||G_i|| G_i when ||G_i|| / max(||W_i||, eps) > lam, units
    over the trailing dims; the leading (runs, clients) dims are independent batches of units;
    0 unit dims: every element its own unit; a weight under eps counts as eps."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64)
    g = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64) * torch.tensor(
        [0.01, 1.0, 100.0], dtype=torch.float64).view(1, 3, 1, 1)
    w[1, 2] = 0.0  # floor at eps
    out = adaptive_clip(g, w, 0.1, 2)
    for r in range(2):
        for i in range(3):
            limit = 0.1 * max(float(w[r, i].norm()), AGC_EPS)
            gn = float(g[r, i].norm())
            want = g[r, i] * (limit / gn) if gn > limit else g[r, i]
            torch.testing.assert_close(out[r, i], want, rtol=1e-12, atol=0)
    torch.testing.assert_close(out[0, 0], g[0, 0])  # a small gradient passes unchanged
    elementwise = adaptive_clip(g, w, 0.1, 0)
    want = torch.where(g.abs() > 0.1 * w.abs().clamp_min(AGC_EPS),
                       g.sign() * 0.1 * w.abs().clamp_min(AGC_EPS), g)
    torch.testing.assert_close(elementwise, want, rtol=1e-12, atol=0)


# --- 9. FixBN freezes its statistics at T* --------------------------------------------------


def test_fixbn_freezes_running_stats_after_t_star_and_normalizes_with_them():
    """The paper's federation size (10 clients): from T* = 5 on, the running statistics are
    bit-identical to those FixBN froze, while the parameters keep training."""
    n = 10
    cfg = tiny_config(normalizer="fixbn", steps=10, fixbn_freeze=0.5, n_clients=n)
    normalizer = normalizer_for(cfg)
    assert isinstance(normalizer.rule_at(4), BatchStats)
    assert isinstance(normalizer.rule_at(5), FrozenStats)
    torch.manual_seed(0)
    model = build_model(cfg)
    x, y, parts = client_data(n_clients=n)
    trainer = make_trainer([cfg], [model], normalizer, batches_for(x, y, parts, seed=6))
    layers = bn_layers(model)
    assert len(layers) == 4

    def snapshot():
        return [(la.running_mean.clone(), la.running_var.clone()) for la in layers]

    previous = snapshot()
    for step in range(5):
        trainer.round(step)
        now = snapshot()
        for (m0, v0), (m1, v1) in zip(previous, now, strict=True):
            assert not torch.equal(m0, m1) and not torch.equal(v0, v1)
        previous = now
    frozen = snapshot()
    weight_before = model.classifier[1].weight.clone()
    for step in range(5, 10):
        trainer.round(step)
        for (m0, v0), (m1, v1) in zip(frozen, snapshot(), strict=True):
            assert torch.equal(m0, m1) and torch.equal(v0, v1)
    assert not torch.equal(model.classifier[1].weight, weight_before)  # still training

    # A training forward at step >= T* normalizes with the frozen statistics.
    captured = {}
    layer = layers[1]
    handle = layer.register_forward_hook(
        lambda mod, inp, out: captured.update(inp=inp[0].detach(), out=out.detach()))
    xb, _ = draw(batches_for(x, y, parts, seed=99), 0)
    with norm_context(NormContext(normalizer.rule_at(7), n, n, 0.1)):
        model(xb)
    handle.remove()
    mean, var = frozen[1]
    shape = (1, -1, 1, 1)
    expected = ((captured["inp"] - mean.view(shape)) / torch.sqrt(var.view(shape) + cfg.bn_eps)
                * layer.weight.detach().view(shape) + layer.bias.detach().view(shape))
    torch.testing.assert_close(captured["out"], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("steps", "local_steps", "freeze", "first_frozen"), [
    (100, 7, 0.5, 56),  # T* = 50: the first multiple of 7 at or after it
    (100, 1, 0.5, 50),  # E = 1: T* itself
    (105, 1, 0.5, 53),  # T* = 52.5: rounded up (Python's round would say 52)
    (10, 1, 0.1, 1),  # 0.1 x 10 is 1 exactly (in binary floating point a little more)
    (12, 3, 0.0, 0),  # frozen from the start
    (12, 3, 1.0, 12),  # never frozen
])
def test_fixbn_freezes_on_the_first_round_boundary_at_or_after_t_star(
        steps, local_steps, freeze, first_frozen):
    """rule_at agrees with the engine, which asks once per round: constant within every round
    of E steps, frozen from the first round boundary at or after T* = freeze x steps. (Steps
    100 with E = 7 is not a valid run, steps must be a multiple of E; the rule is defined
    anyway.)"""
    cfg = RunConfig(normalizer="fixbn", steps=steps, local_steps=local_steps,
                    fixbn_freeze=freeze)
    assert fixbn_freeze_step(cfg) == first_frozen
    rule_at = normalizer_for(cfg).rule_at
    frozen = [isinstance(rule_at(s), FrozenStats) for s in range(steps + local_steps)]
    assert frozen == [s >= first_frozen for s in range(steps + local_steps)]
    assert all(isinstance(rule_at(s), BatchStats) for s in range(first_frozen))
    for start in range(0, steps, local_steps):
        assert len({frozen[s] for s in range(start, start + local_steps)}) == 1


def test_fedavg_fixbn_statistics_freeze_at_the_round_boundary():
    """E = 3, T* = 0.4 x 12 = 4.8: the rounds from steps 0 and 3 move the statistics, those
    from steps 6 and 9 leave them bit for bit."""
    cfg = tiny_config(normalizer="fixbn", local_steps=3, steps=12, fixbn_freeze=0.4)
    assert fixbn_freeze_step(cfg) == 6
    torch.manual_seed(0)
    model = build_model(cfg)
    x, y, parts = client_data()
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches_for(x, y, parts, seed=6))
    layer = bn_layers(model)[0]
    moved = []
    for first in range(0, cfg.steps, cfg.local_steps):
        before = layer.running_mean.clone()
        trainer.round(first)
        moved.append(not torch.equal(before, layer.running_mean))
    assert moved == [True, True, False, False]


# --- 10. Momentum conventions -------------------------------------------------------------------


@pytest.mark.parametrize("convention", ["ema", "pytorch"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_momentum_step_matches_hand_formulas(convention, weight_decay):
    lr, beta = 0.3, 0.8
    p0 = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    gs = [torch.tensor(v, dtype=torch.float64)
          for v in ([0.5, 1.0, -1.0], [2.0, -0.5, 0.25], [-1.0, 0.0, 3.0])]
    p, m = p0.clone(), torch.zeros(3, dtype=torch.float64)
    hp, hm = [float(v) for v in p0], [0.0, 0.0, 0.0]
    for g in gs:
        momentum_step([p], [g], [m], lr=lr, beta=beta, convention=convention,
                      weight_decay=weight_decay)
        for j in range(3):
            gj = float(g[j]) + weight_decay * hp[j]
            hm[j] = beta * hm[j] + ((1 - beta) * gj if convention == "ema" else gj)
            hp[j] -= lr * hm[j]
        torch.testing.assert_close(p, torch.tensor(hp, dtype=torch.float64), rtol=1e-12, atol=0)
        torch.testing.assert_close(m, torch.tensor(hm, dtype=torch.float64), rtol=1e-12, atol=0)


def test_momentum_step_ema_is_pytorch_scaled_by_one_minus_beta():
    """Same gradients: ema's momentum (hence each step) is (1 - beta) times pytorch's."""
    beta = 0.9
    gs = [torch.randn(4, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    pe, me = torch.zeros(4), torch.zeros(4)
    pp, mp = torch.zeros(4), torch.zeros(4)
    for g in gs:
        momentum_step([pe], [g], [me], lr=1.0, beta=beta, convention="ema")
        momentum_step([pp], [g], [mp], lr=1.0, beta=beta, convention="pytorch")
    torch.testing.assert_close(me, (1 - beta) * mp, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(pe, (1 - beta) * pp, rtol=1e-9, atol=1e-12)


def test_momentum_step_unknown_convention_raises():
    p, g, m = torch.zeros(2), torch.ones(2), torch.zeros(2)
    with pytest.raises(ValueError, match="nesterov"):
        momentum_step([p], [g], [m], lr=0.1, beta=0.9, convention="nesterov")
    assert torch.equal(p, torch.zeros(2)) and torch.equal(m, torch.zeros(2))


# --- 11. ClientBatches --------------------------------------------------------------------------


def test_client_batches_rows_come_from_each_clients_own_indices():
    n_total = 50
    x = torch.arange(n_total, dtype=torch.float32).view(-1, 1, 1, 1)  # x encodes its index
    y = torch.arange(n_total)
    parts = [torch.tensor([3, 7, 11]), torch.arange(20, 40), torch.tensor([45]),
             torch.tensor([0, 49])]  # unequal sizes, one client with a single example
    b = 8
    batches = ClientBatches(x, y, [parts], b, [0])
    seen = [set() for _ in parts]
    for step in range(20):
        xb, yb = draw(batches, step)
        assert xb.shape == (len(parts) * b, 1, 1, 1) and yb.shape == (len(parts) * b,)
        assert torch.equal(xb.view(-1).long(), yb)  # images and labels stay paired
        for i, part in enumerate(parts):
            rows = yb[i * b : (i + 1) * b]
            assert set(rows.tolist()) <= set(part.tolist())
            seen[i] |= set(rows.tolist())
    assert seen[0] == {3, 7, 11} and seen[2] == {45} and seen[3] == {0, 49}
    assert len(seen[1]) > 10  # draws spread over the client's data


def test_client_batches_same_seed_same_batches():
    x, y, parts = client_data()
    a = batches_for(x, y, parts, seed=1)
    b = batches_for(x, y, parts, seed=1)
    c = batches_for(x, y, parts, seed=2)
    draws_a = [draw(a, step) for step in range(3)]
    draws_b = [draw(b, step) for step in range(3)]
    draws_c = [draw(c, step) for step in range(3)]
    for (xa, ya), (xb, yb) in zip(draws_a, draws_b, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not all(torch.equal(ya, yc) for (_, ya), (_, yc) in zip(draws_a, draws_c, strict=True))
    assert not torch.equal(draws_a[0][1], draws_a[1][1])  # the step matters


def test_a_run_draws_the_same_batches_alone_as_in_a_bundle_and_after_others_leave():
    """Three runs with their own seeds and partitions, sampled together, draw exactly what each
    draws alone, augmentation included; after ``select`` drops one, the others are unchanged."""
    x, y, parts = client_data()
    shuffled = [parts[::-1], parts, [p.flip(0) for p in parts]]
    seeds = [4, 0, 9]
    crop = augment_for("crop_flip", 2)
    together = ClientBatches(x, y, shuffled, B, seeds, augment=crop)
    alone = [ClientBatches(x, y, [p], B, [s], augment=crop) for p, s in zip(shuffled, seeds,
                                                                             strict=True)]
    kept = together.select(torch.tensor([0, 2]))
    for step in (0, 7):
        xt, yt = together.sample(step)
        xk, yk = kept.sample(step)
        for r, single in enumerate(alone):
            xa, ya = single.sample(step)
            assert torch.equal(xt[r], xa[0]) and torch.equal(yt[r], ya[0])
        for k, r in enumerate((0, 2)):
            assert torch.equal(xk[k], xt[r]) and torch.equal(yk[k], yt[r])
    assert not torch.equal(together.sample(0)[1][0], together.sample(0)[1][1])


def test_client_batches_rejects_an_empty_client_and_a_missing_seed():
    x, y, _ = client_data()
    with pytest.raises(ValueError, match="at least one"):
        ClientBatches(x, y, [[torch.arange(3), torch.tensor([], dtype=torch.long)]], B, [0])
    with pytest.raises(ValueError, match="one seed each"):
        ClientBatches(x, y, [[torch.arange(3)], [torch.arange(3)]], B, [0])


# --- 12. Byzantine clients in the engine ------------------------------------------------------

N_BYZ_RUN = 10  # the paper's federation size, so that f = 3 is a minority


def capture_receive(monkeypatch) -> list:
    """Wrap Server.receive: each call appends (server, reports sent, statistics received)."""
    calls = []
    original = Server.receive

    def receive(self, reports):
        received = original(self, reports)
        calls.append((self, reports, received))
        return received

    monkeypatch.setattr(Server, "receive", receive)
    return calls


def capture_bn_inputs(layers) -> dict:
    """Forward hooks: each BN layer's last input, by layer key."""
    inputs = {}
    for layer in layers:
        layer.register_forward_hook(
            lambda mod, inp, out: inputs.__setitem__(mod.key, inp[0].detach()))
    return inputs


def test_dsgd_round_under_sign_flip_commits_the_mean_of_what_the_server_received(monkeypatch):
    """DSGD, FBN, SF with f = 3 and no defense, one round: per BN layer the server receives the
    honest clients' reports (β · their batch means, from (0, 1)) in rows 0..6 and -(their mean)
    in rows 7..9, and commits line 10 with plain averages of exactly those rows."""
    n, f = N_BYZ_RUN, 3
    cfg = tiny_config(normalizer="fbn", n_clients=n, attack="sf", f=f)
    torch.manual_seed(0)
    model = build_model(cfg)
    x, y, parts = client_data(n_clients=n)
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches_for(x, y, parts, seed=7))
    inputs = capture_bn_inputs(trainer.layers)
    calls = capture_receive(monkeypatch)
    trainer.round(0)
    beta = cfg.bn_momentum
    assert len(calls) == len(trainer.layers) == 4
    for layer, (server, sent, got) in zip(trainer.layers, calls, strict=True):
        assert server is trainer.server and server == Server(attack="sf", f=f)
        inp = inputs[layer.key]  # (n*B, C, h, w)
        c = inp.shape[1]
        batch_means = inp.reshape(n, B, c, -1).transpose(1, 2).reshape(n, c, -1).mean(-1)
        torch.testing.assert_close(sent.mean, beta * batch_means, rtol=1e-9, atol=1e-12)
        h = n - f
        assert torch.equal(got.mean[:h], sent.mean[:h]) and torch.equal(got.var[:h], sent.var[:h])
        flipped = -sent.mean[:h].sum(0) / h
        torch.testing.assert_close(got.mean[h:], flipped.expand(f, -1), rtol=1e-9, atol=1e-12)
        assert torch.all(got.var[h:] == cfg.var_floor)  # -(positive variances) -> the floor
        k = inp[:B].numel() // c
        assert layer.elements_per_client == k
        mean = got.mean.sum(0) / n
        spread = ((got.mean - mean) ** 2).sum(0) / n
        var = got.var.sum(0) / n + k * n / ((k * n - 1) * beta) * spread
        torch.testing.assert_close(layer.running_mean, mean, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(layer.running_var, var, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("normalizer", ["fbn", "bn"])
def test_no_attack_with_byzantine_count_trains_bit_identically_to_the_default(normalizer):
    """Byzantine machinery off: attack 'none' with f = 3 (clients that follow the protocol)
    trains bit for bit like f = 0, whose config is the default one; and the running statistics
    after one round are the rule's plain-average aggregate of the clients' reports, replayed
    without any Server."""
    n = N_BYZ_RUN
    base = tiny_config(normalizer=normalizer, n_clients=n, steps=2)
    assert base == tiny_config(normalizer=normalizer, n_clients=n, steps=2, attack="none", f=0,
                               aggregator="mean", nnm=False)
    off = tiny_config(normalizer=normalizer, n_clients=n, steps=2, attack="none", f=3)
    m_base, m_off = twin_models(base)
    m_replay = copy.deepcopy(m_base)
    bn_layers(m_replay)  # keys by layer name, as the trainers' layers get
    x, y, parts = client_data(n_clients=n)
    t_base = make_trainer([base], [m_base], normalizer_for(base), batches_for(x, y, parts, seed=2))
    t_off = make_trainer([off], [m_off], normalizer_for(off), batches_for(x, y, parts, seed=2))
    assert t_off.server == Server(f=3)

    rule = normalizer_for(base).rule_at(0)
    xb, _ = draw(batches_for(x, y, parts, seed=2), 0)
    ctx = NormContext(rule, n, n, base.bn_momentum)
    with norm_context(ctx):
        m_replay(xb)
    t_base.round(0)
    t_off.round(0)
    for layer in bn_layers(m_base):
        rep = ctx.reports[layer.key]
        agg = rule.aggregate(rep, layer.elements_per_client, n, base.bn_momentum)
        assert torch.equal(layer.running_mean, agg.mean)
        assert torch.equal(layer.running_var, agg.var)
    t_base.round(1)
    t_off.round(1)
    sa, sb = m_base.state_dict(), m_off.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_fedavg_two_local_steps_under_alie_commits_the_robust_combine_of_received_rows(
        monkeypatch):
    """FedAvg, E = 2, FBN, ALIE (z from n = 10, f = 3: Φ⁻¹(0.7)) against NNM + median: the
    received rows 7..9 are mean + z·std of the honest rows 0..6 (variances clamped at the
    floor), and the shared statistics are line 10 with A = median ∘ NNM over the received rows
    and the effective momentum 1 - (1 - β)^E."""
    n, f, z = N_BYZ_RUN, 3, 0.5244005127080407
    cfg = tiny_config(normalizer="fbn", n_clients=n, local_steps=2, steps=2, attack="alie", f=f,
                      aggregator="median", nnm=True)
    torch.manual_seed(1)
    model = build_model(cfg)
    x, y, parts = client_data(n_clients=n)
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches_for(x, y, parts, seed=8))
    assert isinstance(trainer, FedAvg)
    calls = capture_receive(monkeypatch)
    trainer.round(0)
    assert len(calls) == len(trainer.layers) == 4
    beta_eff = 1 - (1 - cfg.bn_momentum) ** 2

    def robust(v):
        return coordinate_median(nearest_neighbour_mixing(v, f))

    h = n - f
    for layer, (_, sent, got) in zip(trainer.layers, calls, strict=True):
        assert torch.equal(got.mean[:h], sent.mean[:h]) and torch.equal(got.var[:h], sent.var[:h])
        for stat, clamp in ((sent.mean, False), (sent.var, True)):
            honest = stat[:h]
            m = honest.sum(0) / h
            vec = m + z * torch.sqrt(((honest - m) ** 2).sum(0) / (h - 1))
            vec = vec.clamp(min=cfg.var_floor) if clamp else vec
            sent_as = got.var if clamp else got.mean
            torch.testing.assert_close(sent_as[h:], vec.expand(f, -1), rtol=1e-9, atol=1e-12)
        k = layer.elements_per_client
        mean = robust(got.mean)
        var = robust(got.var) + k * n / ((k * n - 1) * beta_eff) * robust((got.mean - mean) ** 2)
        torch.testing.assert_close(layer.running_mean, mean, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(layer.running_var, var, rtol=1e-9, atol=1e-12)


def client_updates_by_hand(cfg, model, xb, yb) -> torch.Tensor:
    """(n, d): each client's first-round update theta_i - theta from a deep copy, one EMA
    momentum step from zero momentum: -lr (1 - momentum) grad_i, flattened in parameter order."""
    rows = []
    for i in range(cfg.n_clients):
        client = copy.deepcopy(model)
        loss = F.nll_loss(client(xb[i * B:(i + 1) * B]), yb[i * B:(i + 1) * B])
        grads = torch.autograd.grad(loss, list(client.parameters()))
        rows.append(torch.cat([-cfg.lr[0] * (1 - cfg.momentum) * g.reshape(-1) for g in grads]))
    return torch.stack(rows)


@pytest.mark.parametrize(("aggregator", "nnm"), [("mean", False), ("median", True)])
def test_attacked_updates_are_combined_by_the_servers_rule(aggregator, nnm):
    """attack_updates, GN, SF with f = 3 of 10, E = 1 (trained on FedAvg's per-client path):
    theta moves by A(rows), where rows 0..6 are the honest clients' updates computed by hand
    and rows 7..9 are -(their mean); with A = mean that is 0.4 x the honest mean update."""
    n, f = N_BYZ_RUN, 3
    cfg = tiny_config(n_clients=n, steps=2, attack="sf", f=f, attack_updates=True,
                      aggregator=aggregator, nnm=nnm)
    torch.manual_seed(3)
    model = build_model(cfg)
    start = copy.deepcopy(model)
    x, y, parts = client_data(n_clients=n)
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches_for(x, y, parts, seed=5))
    assert isinstance(trainer, FedAvg)
    xb, yb = draw(batches_for(x, y, parts, seed=5), 0)
    honest = client_updates_by_hand(cfg, start, xb, yb)[: n - f]
    rows = torch.cat([honest, (-honest.mean(0)).expand(f, -1)])
    if aggregator == "mean":
        expected = 0.4 * honest.mean(0)
        torch.testing.assert_close(rows.mean(0), expected, rtol=1e-9, atol=1e-12)
    else:
        expected = coordinate_median(nearest_neighbour_mixing(rows, f))
    trainer.round(0)
    moved = torch.cat([(p - q).reshape(-1) for p, q in zip(model.parameters(),
                                                            start.parameters(), strict=True)])
    torch.testing.assert_close(moved, expected, rtol=1e-9, atol=1e-12)
    assert moved.abs().max() > 1e-4  # the round did move the weights


# --- the official recipes' options: gradient clipping, data-size-weighted averaging -----------


def recipe_reference(cfg, model, replay: ClientBatches, rounds: int, sizes: list[int]):
    """FedAvg with GroupNorm written the plain way, with the recipes' options: each client's
    gradient clipped by torch.nn.utils.clip_grad_norm_ (``clip_norm``) before its momentum
    step, and the server's average weighted by the clients' images (``weighted_average``)."""
    n, E = cfg.n_clients, cfg.local_steps
    total = sum(sizes)
    weights = [s / total for s in sizes] if cfg.weighted_average else [1 / n] * n
    momenta = [[torch.zeros_like(p) for p in model.parameters()] for _ in range(n)]
    step = 0
    for _ in range(rounds):
        clients = [copy.deepcopy(model) for _ in range(n)]
        for _ in range(E):
            xb, yb = draw(replay, step)
            step += 1
            for i, client in enumerate(clients):
                rows = slice(i * B, (i + 1) * B)
                params = list(client.parameters())
                grads = torch.autograd.grad(F.nll_loss(client(xb[rows]), yb[rows]), params)
                if cfg.clip_norm is not None:
                    for p, g in zip(params, grads, strict=True):
                        p.grad = g.clone()
                    torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
                    grads = [p.grad for p in params]
                with torch.no_grad():
                    for p, m, g in zip(params, momenta[i], grads, strict=True):
                        m.mul_(cfg.momentum).add_((1 - cfg.momentum) * g)
                        p.sub_(cfg.lr[0] * m)
        with torch.no_grad():
            states = [c.state_dict() for c in clients]
            model.load_state_dict({k: sum(w * s[k] for w, s in zip(weights, states, strict=True))
                                   for k in states[0]})
    return model


@pytest.mark.parametrize(("clip_norm", "weighted", "local_steps"),
                         [(0.05, False, 2), (0.05, False, 1), (None, True, 2),
                          (None, True, 1), (0.05, True, 2)])
def test_recipe_options_equal_a_per_client_loop(clip_norm, weighted, local_steps):
    """``clip_norm`` (each client's gradient at most this global L2 norm, as
    clip_grad_norm_) and ``weighted_average`` (the parameters averaged with weights |D_i| /
    |D|) against the plain loop, on clients of 3, 6 and 9 images; both move the result (the
    clip is active at 0.05; equal weights would give another model). E = 1 trains on
    FedAvg's clients too (the fused DSGD step has one gradient: the clients' mean)."""
    cfg = tiny_config(local_steps=local_steps, steps=2 * local_steps, momentum=0.5, lr=[0.5],
                      clip_norm=clip_norm, weighted_average=weighted)
    x, y, _ = client_data(per_client=6)
    parts = [torch.arange(0, 3), torch.arange(3, 9), torch.arange(9, 18)]
    m_run, m_ref = twin_models(cfg)
    trainer = make_trainer([cfg], [m_run], normalizer_for(cfg), batches_for(x, y, parts, 4))
    assert isinstance(trainer, FedAvg)
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    recipe_reference(cfg, m_ref, batches_for(x, y, parts, 4), 2, [3, 6, 9])
    assert_models_close(m_run, m_ref)
    plain = copy.deepcopy(twin_models(cfg)[1])
    recipe_reference(run_config({**cfg.identity(), "clip_norm": None, "weighted_average": False}),
                     plain, batches_for(x, y, parts, 4), 2, [3, 6, 9])
    assert not torch.allclose(plain.classifier[3].bias, m_ref.classifier[3].bias)
