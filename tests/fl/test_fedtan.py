"""FedTAN against references written another way: centralized BN at E = 1, and, with different
weights on every client, the union BN of the clients' batches computed by an explicit loop over
the layers with nn.BatchNorm2d on the concatenated activations (forward and gradients)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fednorm.config import ConfigError, run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.build import make_trainer, training_batches
from fednorm.fl.round import StackedClients
from fednorm.fl.train import train, train_bundle
from fednorm.models import build_model
from fednorm.models.clientwise import ClientConv2d, ClientLinear, clientwise
from fednorm.norms import (
    BatchStats,
    FedBatchNorm2d,
    NormContext,
    bn_layers,
    norm_context,
    normalizer_for,
)
from fednorm.norms.per_sample import WSConv2d

N, B = 3, 4
_DATA = colour_classes(n_train=60, n_test=20, image_size=8, seed=0)
DATA = dataclasses.replace(_DATA, train_x=_DATA.train_x.double(), test_x=_DATA.test_x.double())


def tiny(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=8, model="fbn_cnn", width=4,
        hidden=8, dropout=0.25, normalizer="fedtan", n_clients=N, partition="gamma",
        heterogeneity=0.0, batch_size=B, steps=6, lr=[0.05], lr_milestones=[], momentum=0.9,
        weight_decay=1e-3, client_momentum="local", eval_every=3, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def assert_same_state(a: nn.Module, b: nn.Module, tol: float = 1e-10) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=tol, atol=tol, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("model", ["fbn_cnn", "resnet20"])
def test_fedtan_at_one_local_step_is_centralized_bn(model):
    """E = 1: the clients start every step from the global weights, so FedTAN's averaged update
    is the gradient step of BN on the union batch: `central` on DSGD's fused pass."""
    extra = {"width": 2} if model == "resnet20" else {}
    fedtan, central = (train(tiny(model=model, normalizer=n, heterogeneity=0.5, **extra), DATA)
                       for n in ("fedtan", "central"))
    assert_same_state(fedtan.model, central.model)
    for a, b in zip(fedtan.rows, central.rows, strict=True):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-12)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-9, nan_ok=True)


def test_fedtan_with_more_local_steps_is_not_centralized_bn():
    """E = 2 with heterogeneous clients: their weights drift apart within a round, so FedTAN
    and the centralized step sequence differ (the E = 1 equality is not vacuous)."""
    fedtan = train(tiny(local_steps=2, heterogeneity=0.0), DATA)
    central = train(tiny(normalizer="central", heterogeneity=0.0), DATA)
    gap = max((a - b).abs().max().item() for a, b in zip(
        fedtan.model.state_dict().values(), central.model.state_dict().values(), strict=True))
    assert gap > 1e-4


def _reference_loss(models: list[nn.Module], xs: list[torch.Tensor], ys: list[torch.Tensor],
                    eps: float, momentum: float | None = None
                    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """sum_i L_i with every BN layer normalizing the concatenation of the clients' activations
    (nn.BatchNorm2d, training mode, no affine), then each client's own gamma, beta; every other
    layer is client i's own module on client i's activations (an explicit loop). With
    ``momentum``, nn.BatchNorm2d's running statistics (started from the clients' shared ones)
    are copied into every client's layer: the union's moving average."""
    acts = list(xs)
    stages = [[m.features for m in models], [m.classifier for m in models]]
    for seqs in stages:
        for layers in zip(*seqs, strict=True):
            if isinstance(layers[0], FedBatchNorm2d):
                union = torch.cat(acts)
                bn = nn.BatchNorm2d(union.shape[1], eps=eps, affine=False,
                                    momentum=momentum or 0.1).double().train()
                bn.running_mean.copy_(layers[0].running_mean)
                bn.running_var.copy_(layers[0].running_var)
                normed = bn(union).split([a.shape[0] for a in acts])
                if momentum is not None:
                    for la in layers:
                        la.running_mean.copy_(bn.running_mean)
                        la.running_var.copy_(bn.running_var)
                acts = [z * la.weight.view(1, -1, 1, 1) + la.bias.view(1, -1, 1, 1)
                        for z, la in zip(normed, layers, strict=True)]
            else:
                acts = [layer(a) for layer, a in zip(layers, acts, strict=True)]
    outs = [torch.log_softmax(a, 1) for a in acts]
    loss = sum(F.nll_loss(o, y) for o, y in zip(outs, ys, strict=True))
    return loss, outs


def test_fedtan_gradients_equal_union_batchnorm_through_each_clients_weights():
    cfg = tiny(dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, 10).double()
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]
    batches = training_batches([cfg], DATA, [parts])
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches)
    assert isinstance(trainer, StackedClients)
    # every client's own weights: the global ones perturbed differently
    gen = torch.Generator().manual_seed(1)
    clients = [copy.deepcopy(model) for _ in range(N)]
    with torch.no_grad():
        for m in clients:
            for p in m.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    names = [k for k, _ in model.named_parameters()]
    stacked = {k: torch.stack([dict(m.named_parameters())[k].detach() for m in clients])
               for k in names}
    stats = {k: v for k, v in model.state_dict().items() if "running" in k}
    x, y = batches.sample(0)
    x, y = x[0], y[0]  # (n*b, ...), client-major
    rule = normalizer_for(cfg).rule_at(0)
    grad = trainer.grad_fn(rule, N, loss_scale=float(N))
    grads, (loss, _, _) = grad(stacked, stats, x, y, torch.zeros(2, dtype=torch.int64))
    ref, _ = _reference_loss(clients, list(x.split(B)), list(y.split(B)), cfg.bn_eps)
    torch.testing.assert_close(loss * N, ref.detach(), rtol=1e-12, atol=1e-12)
    expected = torch.autograd.grad(ref, [p for m in clients for p in m.parameters()])
    per_client = len(names)
    for i in range(N):
        for j, k in enumerate(names):
            torch.testing.assert_close(grads[k][i], expected[i * per_client + j], rtol=1e-9,
                                       atol=1e-11, msg=lambda m, k=k, i=i: f"{k}[{i}]: {m}")


def test_communication_rounds_count_fedtans_layerwise_exchanges():
    for E in (1, 2):
        fedtan = train(tiny(local_steps=E), DATA)
        fedavg = train(tiny(local_steps=E, normalizer="bn"), DATA)
        layers = len(bn_layers(fedtan.model))
        for a, b in zip(fedtan.rows, fedavg.rows, strict=True):
            assert b["comm_rounds"] == a["step"] // E
            assert a["comm_rounds"] == 3 * layers * a["step"] + a["step"] // E


def test_clientwise_layers_are_the_plain_layers_with_plain_weights():
    conv, linear = nn.Conv2d(3, 4, 3, padding=1).double(), nn.Linear(5, 2).double()
    x, v = torch.randn(6, 3, 5, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    plain = conv(x), linear(v)
    clientwise(conv), clientwise(linear)
    assert type(conv) is ClientConv2d and type(linear) is ClientLinear
    torch.testing.assert_close(conv(x), plain[0], rtol=0, atol=0)
    torch.testing.assert_close(linear(v), plain[1], rtol=0, atol=0)
    with pytest.raises(TypeError, match="WSConv2d"):
        clientwise(nn.Sequential(WSConv2d(3, 4, 3)))


def test_fedtan_refuses_partial_participation_and_attacks():
    with pytest.raises(ConfigError, match=r"participation.*'fedtan'"):
        tiny(participation=0.5, local_steps=2)
    with pytest.raises(ConfigError, match="normalizer"):
        tiny(attack="sf", f=1)


def test_fedtan_runs_in_a_bundle_train_as_alone():
    cfgs = [tiny(local_steps=2, seed=s, heterogeneity=h) for s, h in ((0, 0.0), (1, 0.5))]
    together = train_bundle(cfgs, DATA)
    for cfg, got in zip(cfgs, together, strict=True):
        assert_same_state(got.model, train(cfg, DATA).model, tol=1e-9)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_first_step_fedtan_is_the_authors_round(momentum):
    """``fedtan_union: first_step`` (wangyanmeng/FedTAN): one step of union BN through each
    client's weights from the global model, E - 1 steps of naive BN on each client's batch,
    then the server averages weights and running statistics; two rounds. The optimizer as the
    authors' code builds it: a fresh torch.optim.SGD (momentum 0.9, weight decay) for the
    union step, and a fresh one per client for the E - 1 steps after it (their FedTAN.py line
    203), so step 2's momentum restarts from its own gradient. Written per client."""
    E = 3
    cfg = tiny(dropout=0.0, local_steps=E, steps=2 * E, momentum=momentum,
               momentum_convention="pytorch", weight_decay=1e-3 if momentum else 0.0,
               client_momentum="reset", fedtan_union="first_step", heterogeneity=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, 10).double()
    reference = copy.deepcopy(model)
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]
    batches = training_batches([cfg], DATA, [parts])
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches)
    bn_layers(reference)  # each layer's key: its name, where its reports go

    def sgd(params):
        return torch.optim.SGD(params, lr=cfg.lr[0], momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)

    def step(optimizer, params, loss):
        for p, g in zip(params, torch.autograd.grad(loss, params), strict=True):
            p.grad = g
        optimizer.step()

    for first in range(0, 2 * E, E):
        trainer.round(first)
        clients = [copy.deepcopy(reference) for _ in range(N)]
        for t in range(first, first + E):
            x, y = (v[0] for v in batches.sample(t))
            xs, ys = list(x.split(B)), list(y.split(B))
            if t == first:
                loss, _ = _reference_loss(clients, xs, ys, cfg.bn_eps, momentum=cfg.bn_momentum)
                params = [p for c in clients for p in c.parameters()]
                step(sgd(params), params, loss)
                optimizers = [sgd(c.parameters()) for c in clients]  # fresh after the union
                continue
            for client, optimizer, xb, yb in zip(clients, optimizers, xs, ys, strict=True):
                ctx = NormContext(BatchStats(), 1, N, cfg.bn_momentum)
                with norm_context(ctx):
                    loss = F.nll_loss(client(xb), yb)
                step(optimizer, list(client.parameters()), loss)
                with torch.no_grad():
                    for layer in bn_layers(client):
                        layer.running_mean.copy_(ctx.reports[layer.key].mean[0])
                        layer.running_var.copy_(ctx.reports[layer.key].var[0])
        states = [c.state_dict() for c in clients]
        reference.load_state_dict({k: torch.stack([s[k] for s in states]).mean(0)
                                   for k in states[0]})
        assert_same_state(model, reference, tol=1e-10)
    layers = len(bn_layers(model))
    assert trainer.communication_rounds(6) == 2 * (3 * layers + 1)  # two rounds of E = 3
