"""The normalization error of real runs, on cases whose answer is known."""

import math

import torch

from fednorm import rng
from fednorm.config import run_config
from fednorm.data import load_dataset
from fednorm.data.partition import partition
from fednorm.data.synthetic import colour_classes
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.fl.norm_error import layer_errors, union_statistics
from fednorm.fl.server import commit_stats
from fednorm.fl.train import train
from fednorm.models import build_model
from fednorm.norms import (
    BatchStats,
    NormContext,
    UnionStats,
    bn_layers,
    norm_context,
    normalizer_for,
)

N, B = 5, 6
SMALL = {"dataset": "synthetic", "n_train": 300, "n_test": 100, "image_size": 8, "width": 4,
         "hidden": 8, "dropout": 0.0, "n_clients": N, "batch_size": B}


def _model_and_batch(normalizer: str):
    torch.manual_seed(0)
    cfg = run_config({**SMALL, "normalizer": normalizer})
    model = build_model(cfg).double()
    # client i's images are shifted by i: very different client statistics (gamma = 0-like)
    x = torch.randn(N * B, 3, 8, 8, dtype=torch.float64)
    x += torch.arange(N, dtype=torch.float64).repeat_interleave(B)[:, None, None, None]
    return model, bn_layers(model), x


def _errors(model, x, normalizer: str):
    """The (mean, var) errors (1, L) of the model as a run of one measured on the batch x."""
    cfg = run_config({**SMALL, "normalizer": normalizer})
    parts = [torch.arange(i * B, (i + 1) * B) for i in range(N)]
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, torch.zeros(N * B, dtype=torch.long), [parts], B, [0]))
    return layer_errors(trainer, union_statistics(trainer, x[None], rng.run_key([0])))


def _step_stats(model, layers, x, rule):
    """One forward with beta = 1 and the server's aggregation: running stats <- this batch's."""
    ctx = NormContext(rule, N, N, beta=1.0)
    with torch.no_grad(), norm_context(ctx):
        model(x)
    commit_stats(layers, ctx.reports, rule, N, 1.0)


def test_central_has_zero_error_on_its_own_union_batch():
    model, layers, x = _model_and_batch("central")
    _step_stats(model, layers, x, UnionStats())
    mean_errors, var_errors = _errors(model, x, "central")
    assert mean_errors.shape == var_errors.shape == (1, 4)
    assert mean_errors.max() < 1e-12 and var_errors.max() < 1e-12


def test_naive_bn_variance_error_is_the_law_of_total_variance_bias():
    model, layers, x = _model_and_batch("bn")
    _step_stats(model, layers, x, BatchStats())
    mean_errors, var_errors = _errors(model, x, "bn")
    first = {"mean_error": mean_errors[0, 0].item(), "var_error": var_errors[0, 0].item()}
    # the first BN layer sees relu(conv(x)) whatever the normalization: compute its bias by hand
    conv = model.features[0]
    u = torch.relu(conv(x)).detach().transpose(0, 1).reshape(conv.out_channels, N, -1)
    K = u.shape[2]
    naive = u.var(dim=2, correction=1).mean(1)  # mean of the clients' unbiased variances
    central = u.reshape(conv.out_channels, -1).var(dim=1, correction=1)
    assert math.isclose(first["var_error"], ((naive - central).abs() / central).mean().item(),
                        rel_tol=1e-9)
    assert first["mean_error"] < 1e-12  # averaging means is exact
    within = u.var(dim=2, correction=0).mean(1)
    between = u.mean(2).var(dim=1, correction=0)
    assert torch.allclose(central * (N * K - 1) / (N * K), within + between)
    assert first["var_error"] > 0.05  # heterogeneous clients: the bias is not negligible


def test_measuring_changes_neither_model_nor_random_state():
    model, _, x = _model_and_batch("fbn")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    _errors(model, x, "fbn")
    assert model.training and torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_runs_record_the_error_at_every_evaluation_point_and_gn_has_none():
    data = colour_classes(300, 100, 8, seed=0)
    cfg = run_config({**SMALL, "normalizer": "fbn", "steps": 6, "eval_every": 3,
                      "lr": [0.05], "lr_milestones": [], "heterogeneity": 0.0})
    result = train(cfg, data)
    assert [r["step"] for r in result.layer_rows] == [0] * 4 + [3] * 4 + [6] * 4
    last = [r for r in result.layer_rows if r["step"] == 6]
    assert math.isclose(result.rows[-1]["norm_error_var"],
                        sum(r["var_error"] for r in last) / 4)
    gn = train(run_config({**cfg.identity(), "normalizer": "gn", "gn_groups": 2}), data)
    assert gn.layer_rows == [] and math.isnan(gn.rows[-1]["norm_error_mean"])


def test_under_attack_the_reference_is_the_honest_clients_union():
    """Step 0 of a run with f = 3 attackers of 10: the first BN layer's var_error is that of
    its (0, 1) start against relu(conv(x)) of a probe batch drawn from the 7 honest clients'
    data only (iid partition, a probe drawn from the run's own PROBE stream), computed by hand."""
    cfg = run_config({**SMALL, "n_clients": 10, "partition": "iid", "normalizer": "fbn",
                      "attack": "sf", "f": 3, "steps": 1, "eval_every": 1})
    result = train(cfg, load_dataset(cfg, "unused"))
    data = load_dataset(cfg, "unused")
    parts = partition(data.train_y, "iid", 10, cfg.heterogeneity, cfg.seed)
    x = ClientBatches(data.train_x, data.train_y, [parts[:7]], B, [cfg.seed],
                      rng.PROBE).sample(0)[0][0]
    torch.manual_seed(cfg.seed)
    conv = build_model(cfg).features[0]  # the run's initial weights (same seed)
    u = torch.relu(conv(x)).detach().transpose(0, 1).reshape(conv.out_channels, -1)
    central = u.var(dim=1, correction=1)
    expected = ((1.0 - central).abs() / central).mean().item()
    first = next(r for r in result.layer_rows if r["step"] == 0)
    assert x.shape[0] == 7 * B
    assert math.isclose(first["var_error"], expected, rel_tol=1e-5)
