"""Client momentum between FedAvg rounds (``client_momentum``; the FixBN paper, §7): the engine
against a per-client loop written with ``torch.optim.SGD`` (PyTorch's optimizer, not ours),
in float64:

- ``reset``: a fresh optimizer per client and round (standard FedAvg);
- ``local``: each client's optimizer state (its momentum buffers) carried to its next round;
- ``global``: after each round the clients' ``momentum_buffer``s are averaged by hand and
  loaded into every client's fresh optimizer of the next round.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fednorm.config import ConfigError, run_config
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.fl.round import DSGD, FedAvg
from fednorm.models import build_model
from fednorm.norms import BatchStats, NormContext, bn_layers, norm_context, normalizer_for

N, B, SIZE = 3, 4, 8
MODES = ("reset", "local", "global")


def config(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=SIZE, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="gn", gn_groups=2, n_clients=N, batch_size=B,
        local_steps=3, steps=9, lr=[0.05], lr_milestones=[], momentum=0.9,
        momentum_convention="pytorch", weight_decay=1e-4, eval_every=3, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def data(per_client: int = 6):
    """float64 images, client i's shifted by i/2 (different BN statistics per client)."""
    gen = torch.Generator().manual_seed(0)
    owner = torch.arange(N * per_client) // per_client
    x = torch.randn(N * per_client, 3, SIZE, SIZE, generator=gen, dtype=torch.float64)
    x = x + owner.double().view(-1, 1, 1, 1) / 2
    y = torch.randint(0, 10, (N * per_client,), generator=gen)
    parts = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(N)]
    return x, y, parts


def model_for(cfg):
    torch.manual_seed(cfg.seed)
    return build_model(cfg).double()


def engine_run(cfg, model, force_fedavg=False):  # FedAvg's rounds also where DSGD's serve
    """Train ``model`` in place with the engine for all of ``cfg.steps``; returns the trainer."""
    x, y, parts = data()
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, y, [parts], B, [7]),
                           schedule=FedAvg if force_fedavg else None)
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    return trainer


def torch_fedavg(cfg, model, mode):
    """FedAvg the plain way: per round a deep copy of the global model per client, each with a
    torch.optim.SGD (momentum, weight decay); E local steps on the client's rows of the drawn
    batch; then the average of the clients' parameters and (naive BN) running statistics."""
    n, E = cfg.n_clients, cfg.local_steps
    rule = BatchStats() if cfg.normalizer == "bn" else None
    x, y, parts = data()
    replay = ClientBatches(x, y, [parts], B, [7])
    kept = [None] * n  # local: each client's momentum buffers from its last round
    shared = None  # global: the average of the clients' buffers
    step = 0
    for _ in range(cfg.steps // E):
        clients = [copy.deepcopy(model) for _ in range(n)]
        layers = [bn_layers(c) for c in clients]
        opts = []
        for i, client in enumerate(clients):
            opt = torch.optim.SGD(client.parameters(), lr=cfg.lr[0], momentum=cfg.momentum,
                                  weight_decay=cfg.weight_decay)
            start = {"local": kept[i], "global": shared, "reset": None}[mode]
            if start is not None:
                for p, buf in zip(client.parameters(), start, strict=True):
                    opt.state[p]["momentum_buffer"] = buf.clone()
            opts.append(opt)
        for _ in range(E):
            xb, yb = (t[0] for t in replay.sample(step))
            step += 1
            for i, (client, opt) in enumerate(zip(clients, opts, strict=True)):
                rows = slice(i * B, (i + 1) * B)
                ctx = NormContext(rule, 1, n, cfg.bn_momentum)
                opt.zero_grad()
                with norm_context(ctx):
                    F.nll_loss(client(xb[rows]), yb[rows]).backward()
                opt.step()
                with torch.no_grad():
                    for layer in layers[i]:
                        layer.running_mean.copy_(ctx.reports[layer.key].mean[0])
                        layer.running_var.copy_(ctx.reports[layer.key].var[0])
        buffers = [[opt.state[p]["momentum_buffer"].clone() for p in c.parameters()]
                   for c, opt in zip(clients, opts, strict=True)]
        kept = buffers
        shared = [torch.stack(bs).mean(0) for bs in zip(*buffers, strict=True)]
        with torch.no_grad():
            states = [c.state_dict() for c in clients]
            model.load_state_dict({k: torch.stack([s[k] for s in states]).mean(0)
                                   for k in states[0]})
    return model, kept


def assert_same_state(a, b, rtol=1e-10, atol=1e-12):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=rtol, atol=atol,
                                   msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("normalizer", ["gn", "bn"])
@pytest.mark.parametrize("mode", MODES)
def test_fedavg_momentum_modes_equal_a_torch_sgd_per_client_loop(mode, normalizer):
    """E = 3, three rounds: parameters, statistics and (per client) momenta as the reference."""
    cfg = config(normalizer=normalizer, client_momentum=mode)
    model = model_for(cfg)
    ref = copy.deepcopy(model)
    trainer = engine_run(cfg, model)
    assert isinstance(trainer, FedAvg)
    _, buffers = torch_fedavg(cfg, ref, mode)
    assert_same_state(model, ref)
    # The clients' momenta after the last round: their own (local, and reset, which zeroes
    # them at the start of the next round), or every client the average (global).
    for k, name in enumerate(trainer.names):
        want = torch.stack([b[k] for b in buffers])
        if mode == "global":
            want = want.mean(0, keepdim=True).expand_as(want)
        torch.testing.assert_close(trainer.state.momenta[name][0], want, rtol=1e-10, atol=1e-12)


def test_momentum_modes_agree_for_one_round_and_differ_after():
    """All modes start from zero momentum, so one round is the same for all; from the second
    round on they differ (the comparisons above are not between three equal runs)."""
    one = {m: model_for(config(client_momentum=m, steps=3)) for m in MODES}
    for m, model in one.items():
        engine_run(config(client_momentum=m, steps=3), model)
    assert_same_state(one["reset"], one["local"], rtol=0, atol=0)
    assert_same_state(one["reset"], one["global"], rtol=0, atol=0)
    three = {m: model_for(config(client_momentum=m)) for m in MODES}
    for m, model in three.items():
        engine_run(config(client_momentum=m), model)
    weights = {m: model.classifier[3].weight for m, model in three.items()}
    for a, b in (("reset", "local"), ("reset", "global"), ("local", "global")):
        assert (weights[a] - weights[b]).abs().max() > 1e-6, (a, b)


@pytest.mark.parametrize("normalizer", ["gn", "bn"])
def test_with_one_local_step_global_momentum_is_local_momentum_is_dsgd(normalizer):
    """E = 1 with a plain-mean server: the next update uses only the mean of the clients'
    momenta, which the server's averaging does not change; so FedAvg with local and with global
    momentum train the same parameters, and DSGD (one buffer: that mean) too, in either mode."""
    models = {}
    trainers = {}
    for mode in ("local", "global"):
        cfg = config(normalizer=normalizer, local_steps=1, steps=4, client_momentum=mode)
        for kind, force in (("fedavg", True), ("dsgd", False)):
            models[kind, mode] = model_for(cfg)
            trainers[kind, mode] = engine_run(cfg, models[kind, mode], force_fedavg=force)
    assert isinstance(trainers["dsgd", "global"], DSGD)
    base = models["fedavg", "local"]
    for key in (("fedavg", "global"), ("dsgd", "local"), ("dsgd", "global")):
        assert_same_state(models[key], base)
    for name in trainers["dsgd", "local"].names:
        local = trainers["fedavg", "local"].state.momenta[name][0]  # (n, ...)
        shared = trainers["fedavg", "global"].state.momenta[name][0]
        mean = trainers["dsgd", "local"].state.momenta[name][0]
        assert not torch.allclose(local[0], local[1])  # local: the clients' own momenta
        torch.testing.assert_close(shared, mean.expand_as(shared), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(local.mean(0), mean, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(trainers["dsgd", "global"].state.momenta[name][0], mean,
                                   rtol=0, atol=0)


@pytest.mark.parametrize("convention", ["pytorch", "ema"])
@pytest.mark.parametrize("force_fedavg", [False, True])
def test_reset_with_one_local_step_is_sgd_without_momentum(convention, force_fedavg):
    """DSGD (and FedAvg with E = 1) with reset momentum is torch.optim.SGD without momentum,
    with weight decay, on the union batch (GN: the mean of the clients' losses); under the ema
    convention at a learning rate scaled by 1 - momentum."""
    cfg = config(local_steps=1, steps=4, client_momentum="reset", momentum_convention=convention,
                 weight_decay=0.01)
    model = model_for(cfg)
    ref = copy.deepcopy(model)
    engine_run(cfg, model, force_fedavg=force_fedavg)
    scale = 1 - cfg.momentum if convention == "ema" else 1.0
    opt = torch.optim.SGD(ref.parameters(), lr=cfg.lr[0] * scale, momentum=0.0,
                          weight_decay=cfg.weight_decay)
    x, y, parts = data()
    replay = ClientBatches(x, y, [parts], B, [7])
    for step in range(cfg.steps):
        xb, yb = (t[0] for t in replay.sample(step))
        opt.zero_grad()
        F.nll_loss(ref(xb), yb).backward()
        opt.step()
    assert_same_state(model, ref)
    assert not torch.allclose(model.classifier[3].bias, model_for(cfg).classifier[3].bias)


def test_client_momentum_values_are_validated():
    with pytest.raises(ConfigError, match=r"key 'client_momentum' has value 'server'; "
                                          r"allowed: one of \['local', 'reset', 'global'\]"):
        config(client_momentum="server")
    with pytest.raises(ConfigError, match=r"key 'client_momentum' has value 'global'.*"
                                          r"attack_updates"):
        config(client_momentum="global", attack_updates=True, attack="sf", f=1)
    assert config().client_momentum == "local" == run_config({}).client_momentum
