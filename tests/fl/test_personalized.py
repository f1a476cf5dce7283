"""FedBN, SiloBN (BN parts kept by each client) and HeteroFL's static BN against references
written the plain way: one model per client kept across rounds, the server averaging the rest;
the static statistics by a Python loop over batches with forward hooks; the personalized and
local test accuracies by evaluating each client's model alone."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from client_loop import client_step

from fednorm.config import run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.fl.evaluate import evaluate, label_distributions
from fednorm.fl.round import FedAvg
from fednorm.fl.train import train
from fednorm.models import build_model
from fednorm.norms import BatchStats, NormContext, bn_layers, norm_context, normalizer_for

N, B = 3, 4
_DATA = colour_classes(n_train=60, n_test=40, image_size=8, seed=0)
DATA = dataclasses.replace(_DATA, train_x=_DATA.train_x.double(), test_x=_DATA.test_x.double())


def tiny(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=40, image_size=8, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="fedbn", n_clients=N, partition="shards",
        heterogeneity=2, batch_size=B, steps=4, local_steps=2, lr=[0.05], lr_milestones=[],
        momentum=0.5, eval_every=2, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def local_keys(model, normalizer: str) -> set[str]:
    keys = set()
    for la in bn_layers(model):
        keys |= {f"{la.key}.running_mean", f"{la.key}.running_var"}
        if normalizer == "fedbn":
            keys |= {f"{la.key}.weight", f"{la.key}.bias"}
    return keys


def personalized_reference(cfg, model, batches: ClientBatches, rounds: int):
    """Plain FedBN / SiloBN: one model per client for the whole training; each round it takes
    the server's weights except its own BN parts, trains E momentum-SGD steps on its batches,
    and the server averages every parameter but those parts."""
    n, E = cfg.n_clients, cfg.local_steps
    keep = local_keys(model, cfg.normalizer)
    clients = [copy.deepcopy(model) for _ in range(n)]
    momenta = [[torch.zeros_like(p) for p in model.parameters()] for _ in range(n)]
    step = 0
    for _ in range(rounds):
        glob = model.state_dict()
        for c in clients:
            c.load_state_dict({k: v if k not in keep else c.state_dict()[k]
                               for k, v in glob.items()})
        for _ in range(E):
            xb, yb = (t[0] for t in batches.sample(step))
            step += 1
            for i, client in enumerate(clients):  # its own running statistics
                rows = slice(i * B, (i + 1) * B)
                client_step(client, xb[rows], yb[rows], BatchStats(), n, cfg.bn_momentum,
                            momenta[i], cfg.momentum, cfg.lr[0])
        states = [c.state_dict() for c in clients]
        model.load_state_dict({k: glob[k] if k in keep else torch.stack(
            [s[k] for s in states]).mean(0) for k in glob})
    return model, clients


@pytest.mark.parametrize("normalizer", ["fedbn", "silobn"])
def test_personalized_bn_equals_one_model_per_client(normalizer):
    cfg = tiny(normalizer=normalizer)
    torch.manual_seed(0)
    model = build_model(cfg, 10).double()
    start = copy.deepcopy(model.state_dict())
    reference = copy.deepcopy(model)
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]

    def sampler():
        return ClientBatches(DATA.train_x, DATA.train_y, [parts], B, [cfg.seed])

    trainer = make_trainer([cfg], [model], normalizer_for(cfg), sampler())
    assert isinstance(trainer, FedAvg) and trainer.personalized
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    reference, clients = personalized_reference(cfg, reference, sampler(), rounds=2)
    keep = local_keys(model, normalizer)
    for k, v in reference.state_dict().items():
        if k not in keep:  # the averaged weights
            torch.testing.assert_close(model.state_dict()[k], v, rtol=1e-10, atol=1e-12)
        else:  # the server never touches what the clients keep
            torch.testing.assert_close(model.state_dict()[k], start[k], rtol=0, atol=0)
    for k in keep:  # each client's own parts, after its own training only
        own = trainer.state.local[k][0]
        for i, client in enumerate(clients):
            torch.testing.assert_close(own[i], client.state_dict()[k], rtol=1e-10, atol=1e-12)
        assert not torch.allclose(own[0], own[1])  # clients of other classes drift apart
    if normalizer == "silobn":  # gamma, beta are averaged like any weight
        assert not any(k.endswith(("weight", "bias")) for k in keep if "running" not in k)


def test_personalized_accuracies_are_those_of_each_clients_model():
    cfg = tiny(steps=2)
    result = train(cfg, DATA)
    torch.manual_seed(0)
    model = build_model(cfg, 10).double()
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(DATA.train_x, DATA.train_y, [parts], B, [cfg.seed]))
    with torch.no_grad():  # clients with different BN parts
        for t in trainer.state.local.values():
            t.add_(torch.randn(t.shape, generator=torch.Generator().manual_seed(2),
                               dtype=t.dtype).abs() * 0.5)
    dist = label_distributions(DATA, [parts])
    acc, loss, local, _ = evaluate(trainer, DATA.test_x, DATA.test_y, dist)
    accs, losses, locals_ = [], [], []
    for i in range(N):
        client = copy.deepcopy(model).eval()
        client.load_state_dict({**model.state_dict(),
                                **{k: t[0, i] for k, t in trainer.state.local.items()}})
        with torch.no_grad():
            out = client(DATA.test_x)
        right = (out.argmax(1) == DATA.test_y).double()
        accs.append(right.mean())
        losses.append(F.nll_loss(out, DATA.test_y))
        per_class = torch.stack([right[DATA.test_y == c].mean() for c in range(10)])
        p = torch.bincount(DATA.train_y[parts[i]], minlength=10).double() / len(parts[i])
        locals_.append((p * per_class).sum())
    torch.testing.assert_close(acc[0], torch.stack(accs).mean())
    torch.testing.assert_close(loss[0], torch.stack(losses).mean())
    torch.testing.assert_close(local[0], torch.stack(locals_).mean())
    assert 0 <= result.rows[-1]["local_test_accuracy"] <= 1


def test_static_statistics_average_every_training_batch():
    """HeteroFL's statistics: each batch of b training images normalized with its own
    statistics as in training, the batches' means and unbiased variances averaged."""
    cfg = tiny(normalizer="heterofl_sbn")
    torch.manual_seed(0)
    model = build_model(cfg, 10).double()
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(DATA.train_x, DATA.train_y, [parts], B, [cfg.seed]))
    trainer.round(0)
    x = DATA.train_x[:58]  # 14 batches of 4, and 2 images left out
    trainer.before_test(SimpleNamespace(train_x=x))  # the method's hook: the statistics pass
    seen: dict[str, list] = {}
    probe = copy.deepcopy(model)

    def hook(layer, inputs):
        var, mean = torch.var_mean(inputs[0], dim=(0, 2, 3), correction=1)
        seen.setdefault(layer.key, []).append((mean, var))

    for layer in bn_layers(probe):
        layer.register_forward_pre_hook(hook)
    with torch.no_grad():
        for i in range(0, 56, B):
            with norm_context(NormContext(BatchStats(), 1, 1, 1.0)):
                probe(x[i: i + B])
    for layer in bn_layers(model):
        means, variances = zip(*seen[layer.key], strict=True)
        assert len(means) == 14
        torch.testing.assert_close(layer.running_mean, torch.stack(means).mean(0))
        torch.testing.assert_close(layer.running_var, torch.stack(variances).mean(0))


def test_static_bn_tracks_no_statistics_while_training():
    cfg = tiny(normalizer="heterofl_sbn", steps=4, eval_every=4)
    torch.manual_seed(0)
    model = build_model(cfg, 10).double()
    before = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(DATA.train_x, DATA.train_y, [parts], B, [cfg.seed]))
    for first in (0, 2):
        trainer.round(first)
    for k, v in before.items():
        torch.testing.assert_close(model.state_dict()[k], v, rtol=0, atol=0)
    result = train(cfg, DATA)  # the test uses the statistics of one pass: finite numbers
    assert result.status == "ok" and 0 <= result.rows[-1]["test_accuracy"] <= 1


def test_personalized_bn_takes_partial_participation():
    """Each client keeps its own parts across the rounds it misses
    (tests/fl/test_participation.py checks them against a per-client loop)."""
    assert tiny(participation=0.5).participants < tiny().participants
