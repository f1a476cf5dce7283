"""Training on images streamed from disk (ImageNet-1K: fednorm.data.imagenet.StreamedImages)
through the engine, on a small ImageNet-shaped tree: end to end, the streamed evaluation equal
to the in-memory one, a bundle equal to its runs alone, nothing depending on the workers."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from test_bundle import assert_same_run

from fednorm.config import run_config
from fednorm.data import load_dataset
from fednorm.data.arrays import Arrays, hold_out
from fednorm.data.imagenet import decode_centre, normalize, write_sample_tree
from fednorm.data.partition import partition
from fednorm.fl.build import make_trainer, training_batches
from fednorm.fl.evaluate import evaluate, evaluate_chunks, label_distributions
from fednorm.fl.train import train_bundle
from fednorm.models import build_model
from fednorm.norms import normalizer_for

# ResNet-18 of width 2 at 16x16, 4 clients of batch 2, 2 of them a round (the .test DAG's shape)
RUN = {"dataset": "imagenet", "model": "resnet18", "width": 2, "image_size": 16,
       "gn_groups": 2, "augment": "resized_crop_flip", "n_clients": 4, "participation": 0.5,
       "partition": "iid", "heterogeneity": None, "batch_size": 2, "local_steps": 2,
       "steps": 4, "eval_every": 2, "lr": [0.1], "lr_milestones": [], "momentum": 0.9,
       "momentum_convention": "pytorch", "normalizer": "fixbn"}
METRICS = ("test_accuracy", "test_loss", "train_loss", "norm_error_mean", "norm_error_var",
           "local_test_accuracy", "val_accuracy")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_sample_tree(root, n_classes=4, train_per_class=6, val_per_class=3)
    return root


def _data(tree, workers=0, **run):
    return load_dataset(run_config({**RUN, **run}), tree, workers=workers)


def _rows(result):
    return [{k: row[k] for k in ("step", *METRICS)} for row in result.rows]


def _same(a, b, rel=0.0):
    """Rows equal (to ``rel``), NaN equal to NaN."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        for k in ra:
            assert (math.isnan(ra[k]) and math.isnan(rb[k])) or ra[k] == pytest.approx(
                rb[k], rel=rel, abs=rel), (k, ra, rb)


@pytest.mark.parametrize("normalizer", ["fixbn", "gn"])
def test_an_imagenet_shaped_run_trains_end_to_end(tree, normalizer):
    cfg = run_config({**RUN, "normalizer": normalizer})
    (result,) = train_bundle([cfg], _data(tree))
    assert result.status == "ok" and [r["step"] for r in result.rows] == [0, 2, 4]
    last = result.rows[-1]
    assert 0 <= last["test_accuracy"] <= 1 and math.isfinite(last["test_loss"])
    assert math.isfinite(last["train_loss"]) and 0 <= last["local_test_accuracy"] <= 1
    if normalizer == "fixbn":  # BN layers: a normalization error, one row per layer
        assert math.isfinite(last["norm_error_mean"]) and last["norm_error_mean"] >= 0
        assert len({r["layer"] for r in result.layer_rows}) == 20  # ResNet-18's BN layers
    else:
        assert math.isnan(last["norm_error_mean"]) and not result.layer_rows


def test_streamed_evaluation_is_the_in_memory_one_of_the_same_images(tree):
    """The test images decoded with the evaluation transform into tensors held in memory,
    evaluated as every other dataset is, give what the chunks decoded from disk give."""
    data = _data(tree, workers=2)
    cfgs = [run_config({**RUN, "seed": s}) for s in (0, 1)]
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(build_model(c, data.n_classes))
    parts = [partition(data.train_y, "iid", 4, None, c.seed) for c in cfgs]
    trainer = make_trainer(cfgs, models, normalizer_for(cfgs[0]), training_batches(cfgs, data,
                                                                                   parts))
    trainer.round(0)  # statistics and weights that are not the initial ones
    dist = label_distributions(data, parts)
    x = torch.stack([normalize(torch.from_numpy(np.array(decode_centre(p, 16))))
                     for p in data.test.paths])
    memory = evaluate(trainer, x, data.test_y, dist)
    for size in (None, 5):  # the engine's chunks; chunks smaller than the test set
        chunks = ((lambda n: data.chunks("test", n)) if size is None else
                  (lambda n, size=size: data.chunks("test", size)))
        streamed = evaluate_chunks(trainer, chunks, dist)
        for a, b in zip(memory, streamed, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    arrays = Arrays(x, data.test_y, x, data.test_y, data.n_classes, "decoded")
    for a, b in zip(memory, evaluate_chunks(trainer, lambda n: arrays.chunks("test", n), dist),
                    strict=True):
        assert torch.equal(a, b)


@pytest.mark.filterwarnings("error:There is a performance drop")  # vmap's per-run fallback
def test_a_bundle_of_two_runs_equals_the_runs_alone(tree):
    """What streaming decides, each run's batches (files, crops, flips, labels), is the same in
    the bundle as alone, exactly; and in float64 (the decoded images normalized in float64) the
    runs' rows and weights equal the runs trained alone to 1e-9 relative (the only difference is
    the order of sums: vmap over runs against plain calls). A run trained on another's batches
    would differ at order 1."""
    data = dataclasses.replace(_data(tree), dtype=torch.float64)
    cfgs = [run_config({**RUN, "seed": 0}),
            run_config({**RUN, "seed": 1, "partition": "shards", "heterogeneity": 2})]
    parts = [partition(data.train_y, c.partition, c.n_clients, c.heterogeneity, c.seed)
             for c in cfgs]
    bundle = training_batches(cfgs, data, parts)
    alone = [training_batches([c], data, [p]) for c, p in zip(cfgs, parts, strict=True)]
    for step in range(3):
        x, y = bundle.sample(step)
        assert x.dtype == torch.float64
        for r, single in enumerate(alone):
            xa, ya = single.sample(step)
            assert torch.equal(x[r], xa[0]) and torch.equal(y[r], ya[0])
    for bundled, cfg in zip(train_bundle(cfgs, data), cfgs, strict=True):
        (single,) = train_bundle([cfg], data)
        assert_same_run(bundled, single)


def test_results_do_not_depend_on_the_number_of_workers(tree):
    cfg = run_config({**RUN, "val_fraction": 0.25})  # a held-out validation split too
    (none,) = train_bundle([cfg], _data(tree, workers=0))
    (two,) = train_bundle([cfg], _data(tree, workers=2))
    _same(_rows(none), _rows(two))
    assert all(0 <= r["val_accuracy"] <= 1 for r in none.rows)
    for a, b in zip(none.model.state_dict().values(), two.model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


def test_the_held_out_images_are_decoded_for_evaluation_only(tree):
    data = _data(tree)
    held = hold_out(data, 0.5)
    assert len(held.val.paths) == 12 and not set(held.val.paths) & set(held.train.paths)
    assert dataclasses.replace(held, workers=1).to("cpu").val_y.tolist() == held.val_y.tolist()
