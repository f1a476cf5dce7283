"""The FixBN paper's training dynamics (fednorm.fl.dynamics) against references computed another
way: each client's mini-batch statistics read by forward hooks on copies of the global model
(torch.var_mean of the layer's input), the global statistics read from the model between
rounds, the windowed variance with torch.var over a Python list."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from fednorm.config import run_config, with_values
from fednorm.data import Arrays
from fednorm.fl.build import make_trainer, training_batches
from fednorm.fl.dynamics import QUANTITIES
from fednorm.fl.round import FedAvg
from fednorm.fl.train import train, train_bundle
from fednorm.models import build_model
from fednorm.norms import FedBatchNorm2d, NormContext, bn_layers, norm_context, normalizer_for

N, B, SIZE, STEPS = 3, 4, 8, 5


def tiny(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=SIZE, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="bn", n_clients=N, partition="shards",
        heterogeneity=2, batch_size=B, steps=STEPS, lr=[0.05], lr_milestones=[],
        momentum=0.9, eval_every=STEPS, record_dynamics=True, dynamics_window=3, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def data(seed: int = 0) -> Arrays:
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(60) % 10
    x = torch.randn(60, 3, SIZE, SIZE, generator=gen, dtype=torch.float64)
    x = x + y.view(-1, 1, 1, 1).double() / 5  # class-dependent statistics
    test_x = torch.randn(20, 3, SIZE, SIZE, generator=gen, dtype=torch.float64)
    return Arrays(x, y, test_x, torch.arange(20) % 10, 10, "synthetic")


def client_batch_stats(model, x: torch.Tensor, rule, n: int) -> dict[str, torch.Tensor]:
    """Each BN layer's clients' mini-batch statistics S = (mean, biased var), (n, 2C), read by a
    forward pre-hook on a copy of ``model`` in a training forward of the n stacked batches."""
    model = copy.deepcopy(model)
    seen: dict[str, torch.Tensor] = {}

    def hook(layer, inputs):
        xg = inputs[0].reshape(n, -1, *inputs[0].shape[1:]).transpose(1, 2).flatten(2)
        var, mean = torch.var_mean(xg, dim=2, correction=0)
        seen[layer.key] = torch.cat([mean, var], dim=1)

    for layer in bn_layers(model):
        layer.register_forward_pre_hook(hook)
    with torch.no_grad(), norm_context(NormContext(rule, n, n, 0.1)):
        model(x)
    return seen


def global_stats(model) -> dict[str, torch.Tensor]:
    return {la.key: torch.cat([la.running_mean, la.running_var]).clone()
            for la in bn_layers(model)}


@pytest.mark.parametrize("fedavg", [False, True], ids=["dsgd", "fedavg_E1"])
def test_dynamics_equal_hooks_on_the_global_model(fedavg):
    """E = 1: every client holds the global weights at every step, so its mini-batch statistics
    are those of the global model on its batch (DSGD's fused pass and FedAvg's per-client path
    both)."""
    cfg, arrays = tiny(), data()
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, 10).double()
    parts = [torch.arange(i * 20, (i + 1) * 20) for i in range(N)]
    batches = training_batches([cfg], arrays, [parts])
    normalizer = normalizer_for(cfg)
    trainer = make_trainer([cfg], [model], normalizer, batches,
                           schedule=FedAvg if fedavg else None)
    keys = [la.key for la in trainer.layers]
    trainer.record_dynamics(cfg.dynamics_window)  # its sums in the state, run axis first
    changes, deviations, history = [], [], []
    for step in range(STEPS):  # one run: the trainer's state is a view of the model's tensors
        before = global_stats(model)
        seen = client_batch_stats(model, batches.sample(step)[0][0],
                                  normalizer.rule_at(step), N)
        trainer.round(step)
        after = global_stats(model)
        changes.append({k: (after[k] - before[k]).abs().sum() for k in keys})
        deviations.append({k: (seen[k] - before[k]).abs().sum(1).mean() for k in keys})
        history.append(seen)
    got = trainer.dynamics.take(trainer.state.dynamics)
    for i, k in enumerate(keys):
        change = torch.stack([c[k] for c in changes]).mean()
        deviation = torch.stack([d[k] for d in deviations]).mean()
        window = torch.stack([h[k] for h in history[-cfg.dynamics_window:]])  # (W, n, 2C)
        variance = window.var(0, correction=0).sum(1).mean()
        torch.testing.assert_close(got["stat_change"][0, i], change.float())
        torch.testing.assert_close(got["stat_deviation"][0, i], deviation.float())
        torch.testing.assert_close(got["stat_variance"][0, i], variance.float())
        assert change > 0 and deviation > 0 and variance > 0
    again = trainer.dynamics.take(trainer.state.dynamics)  # the sums restart, the window does not
    assert torch.isnan(again["stat_change"]).all() and torch.isnan(again["stat_deviation"]).all()
    torch.testing.assert_close(again["stat_variance"], got["stat_variance"])


def test_a_run_records_its_dynamics_per_layer_and_summed_in_its_metrics():
    arrays = data()
    result = train(tiny(steps=6, eval_every=2), arrays)
    layers = {row["layer"] for row in result.dynamics_rows}
    assert len(layers) == len(bn_layers(result.model)) > 1
    for row in result.rows:
        mine = [r for r in result.dynamics_rows if r["step"] == row["step"]]
        for q in QUANTITIES:
            total = sum(r[q] for r in mine)
            if row["step"] == 0:  # nothing observed before training
                assert math.isnan(row[q]) and all(math.isnan(r[q]) for r in mine)
            else:
                assert row[q] == pytest.approx(total) and total > 0


def test_runs_that_do_not_ask_record_nothing_and_train_the_same():
    arrays = data()
    on, off = train(tiny(), arrays), train(tiny(record_dynamics=False), arrays)
    assert off.dynamics_rows == []
    assert all(math.isnan(row[q]) for row in off.rows for q in QUANTITIES)
    for a, b in zip(on.rows, off.rows, strict=True):
        assert a["test_accuracy"] == b["test_accuracy"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=0, abs=0, nan_ok=True)
    torch.testing.assert_close(on.model.state_dict(), off.model.state_dict(), rtol=0, atol=0)


def test_layers_record_no_batch_statistics_unless_asked():
    layer = FedBatchNorm2d(2).double()
    x = torch.randn(8, 2, 3, 3, dtype=torch.float64)
    rule = normalizer_for(tiny()).rule_at(0)
    quiet, asked = NormContext(rule, 2, 2, 0.1), NormContext(rule, 2, 2, 0.1, batches={})
    for ctx in (quiet, asked):
        with norm_context(ctx):
            layer(x)
    assert quiet.batches is None
    var, mean = torch.var_mean(x.reshape(2, 4, 2, 9).transpose(1, 2).flatten(2), 2,
                               correction=0)
    torch.testing.assert_close(asked.batches[layer.key].mean, mean)
    torch.testing.assert_close(asked.batches[layer.key].var, var)


@pytest.mark.parametrize("local_steps", [1, 2])
def test_a_bundle_records_each_runs_dynamics_as_alone(local_steps):
    arrays = data()
    cfgs = [tiny(local_steps=local_steps, steps=6, eval_every=2, seed=s) for s in (0, 1)]
    cfgs.append(with_values(cfgs[0], heterogeneity=1))
    together = train_bundle(cfgs, arrays)
    for cfg, got in zip(cfgs, together, strict=True):
        alone = train(cfg, arrays)
        assert len(got.dynamics_rows) == len(alone.dynamics_rows) > 0
        for a, b in zip(got.dynamics_rows, alone.dynamics_rows, strict=True):
            assert a["layer"] == b["layer"] and a["step"] == b["step"]
            for q in QUANTITIES:
                assert a[q] == pytest.approx(b[q], rel=1e-9, abs=1e-12, nan_ok=True), (
                    cfg.seed, q)


def test_dynamics_need_every_client_of_a_round():
    with pytest.raises(Exception, match="record_dynamics"):
        tiny(participation=0.5, local_steps=2, steps=4)
