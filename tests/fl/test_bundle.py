"""A bundle gives each run exactly what it would get alone, isolates a diverged run, and keeps
its runs' files apart (fednorm.fl.train.train_bundle, fednorm.run.train_and_write).

The references are the same runs trained alone. In float64 the only difference between a
bundle (vmap over runs: one grouped convolution over all runs' weights) and a run alone (plain
calls) is the order of floating-point sums, so rows and weights must agree to ~1e-9 relative;
a bug that mixes runs (a reduction over the run dimension, a wrong seed, partition or learning
rate, a dropout mask or batch of another run) changes them at order 1.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math

import pytest
import torch

from fednorm.config import bundle_key, run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.train import train, train_bundle
from fednorm.run import train_and_write as train_and_write_bundle

# vmap falls back to a slow per-run loop for an operator without a batching rule, and says so:
# in a bundle that is a bug.
pytestmark = pytest.mark.filterwarnings("error:There is a performance drop")

DATA = colour_classes(n_train=120, n_test=40, image_size=8, seed=0)
DATA64 = dataclasses.replace(DATA, train_x=DATA.train_x.double(), test_x=DATA.test_x.double())


def small(**overrides):
    values = dict(
        dataset="synthetic", n_train=120, n_test=40, image_size=8, model="fbn_cnn", width=4,
        hidden=8, dropout=0.25, normalizer="fbn", gn_groups=2, n_clients=5, partition="gamma",
        heterogeneity=0.0, batch_size=4, steps=4, lr=[0.05], lr_milestones=[], momentum=0.9,
        eval_every=2, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def members(**shared):
    """Three runs of one bundle: other seeds, partitions, heterogeneity and learning rates."""
    return [small(**shared),
            small(**shared, seed=1, partition="iid", heterogeneity=None, lr=[0.08]),
            small(**shared, seed=2, partition="dirichlet", heterogeneity=0.5)]


def assert_same_run(bundled, alone, rtol=1e-9):
    """Same rows; same final weights for a run that finished (a diverged run's weights are
    ~1e77 and chaotic: its rows up to the divergence are what must match)."""
    assert bundled.status == alone.status
    assert [r["step"] for r in bundled.rows] == [r["step"] for r in alone.rows]
    # the rows at which a run diverged hold the blow-up itself (losses ~1e89, amplified from
    # the last bits that the CPU's kernels sum in another order alone and in a bundle): only
    # which of their values are finite must match
    chaotic = bundled.rows[-1]["step"] if alone.status == "diverged" else None
    for got, want in zip(bundled.rows + bundled.layer_rows, alone.rows + alone.layer_rows,
                         strict=True):
        for key, value in want.items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(got[key]), (key, got, want)
            elif isinstance(value, float) and got["step"] == chaotic:
                assert math.isfinite(got[key]) == math.isfinite(value), (key, got, want)
            elif isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=rtol, abs=1e-12), (key, got, want)
            else:
                assert got[key] == value
    if alone.status != "ok":
        return
    sa, sb = bundled.model.state_dict(), alone.model.state_dict()
    for key in sb:
        torch.testing.assert_close(sa[key], sb[key], rtol=rtol, atol=1e-12,
                                   msg=lambda m, key=key: f"{key}: {m}")


CASES = {
    **{f"dsgd-{n}": dict(normalizer=n)
       for n in ("central", "bn", "fbn", "fixbn", "gn", "gn_ws", "ln", "in")},
    **{f"fedavg-E2-{n}": dict(normalizer=n, local_steps=2)
       for n in ("bn", "fbn", "fixbn", "gn", "gn_ws", "ln", "in")},
    "dsgd-fixup": dict(normalizer="fixup", model="resnet20"),
    "fedavg-E2-fixup": dict(normalizer="fixup", model="resnet20", local_steps=2),
    "fedavg-E2-gn_ws-resnet20": dict(normalizer="gn_ws", model="resnet20", local_steps=2),
    "fbn-first-batch-crop-flip": dict(fbn_init="first_batch", augment="crop_flip"),
    "bn-sf-median-nnm": dict(normalizer="bn", attack="sf", f=2, aggregator="median", nnm=True),
    "fbn-E2-alie-trimmed-nnm": dict(local_steps=2, attack="alie", f=2,
                                    aggregator="trimmed_mean", nnm=True),
    "gn-sf-updates-median": dict(normalizer="gn", attack="sf", f=2, attack_updates=True,
                                 aggregator="median", nnm=True),
    "lenet-dsgd-fbn-crop-flip": dict(model="lenet", augment="crop_flip", crop_padding=2),
    "lenet-fedavg-E2-fixbn-global-momentum": dict(model="lenet", normalizer="fixbn",
                                                  local_steps=2, client_momentum="global"),
    "fedavg-E2-gn-reset-momentum": dict(normalizer="gn", local_steps=2, client_momentum="reset"),
    "dsgd-bn-participation": dict(normalizer="bn", participation=0.4),
    "resnet18-fedavg-E2-fixbn-resized-crop-participation": dict(
        model="resnet18", normalizer="fixbn", local_steps=2, augment="resized_crop_flip",
        participation=0.6),
    "fedavg-E2-fbn-participation": dict(local_steps=2, participation=0.6),
    "dsgd-fixbn-affine": dict(normalizer="fixbn", fixbn_fix="affine", weight_decay=0.01),
    "fedavg-E2-fixbn-both-global": dict(normalizer="fixbn", fixbn_fix="both", local_steps=2,
                                        client_momentum="global"),
    **{f"dsgd-{n}": dict(normalizer=n) for n in ("hybridbn", "fedwon", "none")},
    **{f"fedavg-E2-{n}": dict(normalizer=n, local_steps=2) for n in ("hybridbn", "fedwon")},
    "lenet-fedavg-E2-fedwon-agc": dict(model="lenet", normalizer="fedwon", local_steps=2,
                                       agc_lambda=0.001),
    "resnet20-dsgd-hybridbn": dict(normalizer="hybridbn", model="resnet20"),
    "fedavg-E2-hybridbn-batch-global": dict(normalizer="hybridbn", local_steps=2,
                                            hybridbn_report="batch", hybridbn_eval="global",
                                            hybridbn_momentum=0.1, hybridbn_stats_images=3),
    # the statistics pass before each test through a model with dropout: its masks from each
    # run's own stream
    "heterofl-dropout": dict(normalizer="heterofl_sbn"),
    "dsgd-fedfn": dict(normalizer="none", feature_norm=True),
    "lenet-fedavg-E2-bn-fedfn": dict(model="lenet", normalizer="bn", feature_norm=True,
                                     local_steps=2),
    "lenet-dsgd-none": dict(model="lenet", normalizer="none"),  # conv biases (``offset``)
    # FedBN's digits network: BN on its hidden linear units too (FedBN keeps them local)
    **{f"digits-fedavg-E2-{n}": dict(model="digits_cnn", width=2, normalizer=n, local_steps=2)
       for n in ("bn", "fedbn", "gn", "fedwon", "none")},
    # FedTAN's client-stacked layers: the hidden linears' weights and BN parts per client
    "digits-dsgd-fedtan": dict(model="digits_cnn", width=2, normalizer="fedtan"),
}


@pytest.mark.parametrize("local_steps", [1, 2])
def test_runs_with_different_attacks_and_server_rules_share_a_bundle(local_steps):
    """The attack on the statistics and the server's rule are per run: SF with the mean, FOE
    with the median after NNM and ALIE with the trimmed mean in one bundle, each as alone."""
    servers = (dict(attack="sf"), dict(attack="foe", aggregator="median", nnm=True),
               dict(attack="alie", aggregator="trimmed_mean"))
    cfgs = [dataclasses.replace(c, **server) for c, server in zip(
        members(normalizer="fbn", f=2, attack="sf", local_steps=local_steps), servers,
        strict=True)]
    bundled = train_bundle(cfgs, DATA64)
    for cfg, result in zip(cfgs, bundled, strict=True):
        assert_same_run(result, train(cfg, DATA64))


def test_runs_with_different_client_momentum_share_a_bundle_and_get_what_they_get_alone():
    """client_momentum is a per-run mask: reset, local and global runs in one FedAvg bundle."""
    cfgs = [dataclasses.replace(c, client_momentum=mode) for c, mode in zip(
        members(normalizer="fixbn", local_steps=2), ("reset", "local", "global"), strict=True)]
    bundled = train_bundle(cfgs, DATA64)
    for cfg, result in zip(cfgs, bundled, strict=True):
        assert_same_run(result, train(cfg, DATA64))
    same_but_local = dataclasses.replace(cfgs[0], client_momentum="local")
    assert train(same_but_local, DATA64).rows[-1] != bundled[0].rows[-1]


@pytest.mark.parametrize(("normalizer", "local_steps"),
                         [("fbn", 1), ("bn", 2), ("gn", 2), ("hybridbn", 2)])
def test_runs_with_different_participation_share_a_bundle_and_get_what_they_get_alone(
        normalizer, local_steps):
    """participation is a per-run draw: 0.5, 0.55 and 0.6 of 5 clients (m = 3 each: 2.5 and
    2.75 round up) in one bundle, with different client momentum modes, each exactly as alone;
    runs with a different m train in another bundle."""
    modes = ("local", "global", "reset")
    cfgs = [dataclasses.replace(c, participation=p, client_momentum=mode) for c, p, mode in zip(
        members(normalizer=normalizer, local_steps=local_steps, participation=0.5),
        (0.5, 0.55, 0.6), modes, strict=True)]
    assert [c.participants for c in cfgs] == [3, 3, 3]
    bundled = train_bundle(cfgs, DATA64)
    for cfg, result in zip(cfgs, bundled, strict=True):
        assert result.status == "ok"
        assert_same_run(result, train(cfg, DATA64))
    fewer = dataclasses.replace(cfgs[0], participation=0.2)  # m = 1
    assert bundle_key(fewer) != bundle_key(cfgs[0])
    assert train(fewer, DATA64).rows[-1] != bundled[0].rows[-1]


@pytest.mark.parametrize("shared", CASES.values(), ids=CASES.keys())
def test_each_run_of_a_bundle_gets_what_it_gets_alone(shared):
    cfgs = members(**shared)
    bundled = train_bundle(cfgs, DATA64)
    for cfg, result in zip(cfgs, bundled, strict=True):
        assert result.status == "ok"
        assert_same_run(result, train(cfg, DATA64))
    # ...and the runs are not one run three times: their trajectories differ.
    finals = {r.rows[-1]["train_loss"] for r in bundled}
    assert len(finals) == 3


@pytest.mark.parametrize("shared", [{"normalizer": "bn"},
                                    {"normalizer": "fixbn", "model": "lenet", "dropout": 0.0,
                                     "local_steps": 2}])
def test_a_diverged_run_stops_alone_and_leaks_nothing_into_the_others(shared):
    """The middle run's learning rate blows it up in its first steps: it is recorded
    'diverged' exactly as alone (same rows up to that point), handed to on_finish first, and
    the two others, which share every vectorized call with it until then, train exactly as
    alone: finite rows, the same numbers. Also with local steps and a model without dropout
    (its constant keys, R·n of them, made again for the runs kept)."""
    cfgs = members(steps=8, **shared)
    cfgs[1] = dataclasses.replace(cfgs[1], lr=(1e6,))
    finished = []
    bundled = train_bundle(cfgs, DATA64,
                           on_finish=lambda i, r: finished.append((i, r.rows[-1]["step"])))
    assert [r.status for r in bundled] == ["ok", "diverged", "ok"]
    assert finished[0][0] == 1 and finished[0][1] < cfgs[1].steps
    assert sorted(i for i, _ in finished) == [0, 1, 2]
    for cfg, result in zip(cfgs, bundled, strict=True):
        assert_same_run(result, train(cfg, DATA64))
    for result in (bundled[0], bundled[2]):
        assert all(math.isfinite(r["train_loss"]) for r in result.rows[1:])
        assert all(math.isfinite(r["test_loss"]) for r in result.rows)


def test_runs_of_different_shape_cannot_share_a_bundle():
    with pytest.raises(ValueError, match="bundle_key"):
        train_bundle([small(), small(normalizer="bn")], DATA)
    with pytest.raises(ValueError, match="at least one run"):
        train_bundle([], DATA)


def test_a_bundle_logs_one_progress_line_per_evaluation_point(caplog):
    cfgs = members(normalizer="bn", steps=6, eval_every=2)
    cfgs[1] = dataclasses.replace(cfgs[1], lr=(1e6,))
    with caplog.at_level(logging.INFO, logger="fednorm.train"):
        train_bundle(cfgs, DATA)
    lines = [r.getMessage() for r in caplog.records if r.name == "fednorm.train"]
    assert [line.split()[1] for line in lines] == ["2/6", "4/6", "6/6"]
    assert "runs going 2/3" in lines[-1]  # the diverged run left the bundle
    assert all("mean accuracy" in line and "images/s" in line and "s left" in line
               for line in lines)


def test_written_runs_name_their_bundle_and_a_diverged_run_is_written_first(tmp_path):
    cfgs = members(normalizer="bn", steps=8)
    cfgs[0] = dataclasses.replace(cfgs[0], lr=(1e6,))
    dirs = [tmp_path / c.run_id for c in cfgs]
    statuses = train_and_write_bundle(cfgs, dirs, bundle_id="bn-E1-x3-abc", device="cpu")
    assert statuses == ["diverged", "ok", "ok"]
    meta = [json.loads((d / "run.json").read_text()) for d in dirs]
    assert all(m["bundle"] == {"id": "bn-E1-x3-abc", "size": 3} for m in meta)
    assert [m["run_id"] for m in meta] == [c.run_id for c in cfgs]
    assert meta[0]["wall_time_s"] < meta[1]["wall_time_s"]
    assert (dirs[0] / "run.json").stat().st_mtime_ns <= (dirs[1] / "metrics.csv").stat().st_mtime_ns
    with pytest.raises(ValueError, match="one output directory per run"):
        train_and_write_bundle(cfgs, dirs[:2], device="cpu")
