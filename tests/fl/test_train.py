"""fednorm.fl.train.train: evaluation schedule, divergence handling and determinism."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from fednorm.config import run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.build import training_batches
from fednorm.fl.train import train
from fednorm.metrics import METRIC_COLUMNS

DATA = colour_classes(n_train=60, n_test=20, image_size=8, seed=0)


def small_config(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=8, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="fbn", gn_groups=2, n_clients=3, partition="gamma",
        heterogeneity=0.0, batch_size=4, steps=10, lr=[0.05], lr_milestones=[], momentum=0.9,
        eval_every=5, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def same_float(a: float, b: float) -> bool:
    """Bit-identical, with NaN equal to NaN."""
    return (math.isnan(a) and math.isnan(b)) or a == b


# --- 12. Divergence and the evaluation schedule ----------------------------------------------


@pytest.mark.parametrize("normalizer", ["gn", "bn", "fbn"])
def test_diverged_run_stops_with_a_non_finite_train_loss(normalizer):
    """Evaluating every 4 steps, a blown-up model's mean training loss over the last 4 steps is
    non-finite: the run stops at that row (step 4 of 12) with status 'diverged'."""
    cfg = small_config(normalizer=normalizer, lr=[1e6], momentum=0.0, steps=12, eval_every=4)
    result = train(cfg, DATA)
    assert result.status == "diverged"
    assert len(result.rows) < cfg.steps // cfg.eval_every + 1
    last = result.rows[-1]
    assert not math.isfinite(last["train_loss"])
    assert last["step"] < cfg.steps
    # Only the last row is bad: the initial evaluation was finite.
    assert all(math.isfinite(r["test_loss"]) for r in result.rows[:-1])


def test_diverged_run_evaluated_every_step_stops_at_the_first_non_finite_loss():
    cfg = small_config(normalizer="gn", lr=[1e6], momentum=0.0, steps=8, eval_every=1)
    result = train(cfg, DATA)
    assert result.status == "diverged"
    steps = [r["step"] for r in result.rows]
    assert steps == list(range(len(steps))) and len(steps) < cfg.steps + 1
    last = result.rows[-1]
    assert not (math.isfinite(last["train_loss"]) and math.isfinite(last["test_loss"]))
    for row in result.rows[1:-1]:
        assert math.isfinite(row["train_loss"]) and math.isfinite(row["test_loss"])


@pytest.mark.parametrize(("steps", "every", "expected"),
                         [(10, 5, [0, 5, 10]), (10, 4, [0, 4, 8, 10]), (3, 1, [0, 1, 2, 3])])
def test_normal_run_is_ok_with_rows_at_multiples_of_eval_every_and_at_the_end(
    steps, every, expected
):
    result = train(small_config(steps=steps, eval_every=every), DATA)
    assert result.status == "ok"
    assert [r["step"] for r in result.rows] == expected
    for row in result.rows:
        assert set(row) == set(METRIC_COLUMNS)
        assert 0.0 <= row["test_accuracy"] <= 1.0 and math.isfinite(row["test_loss"])
    assert math.isnan(result.rows[0]["train_loss"])  # nothing trained yet at step 0
    assert all(math.isfinite(r["train_loss"]) for r in result.rows[1:])
    assert result.model is not None and result.model.training  # evaluate() restores train mode


# --- 13. Determinism ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [dict(normalizer="fbn"),
     dict(normalizer="bn", local_steps=2, augment="crop_flip", dropout=0.25),
     dict(normalizer="fixbn", partition="dirichlet", heterogeneity=0.5)],
    ids=["fbn-dsgd", "bn-fedavg-augment-dropout", "fixbn-dirichlet"],
)
def test_same_config_twice_gives_bit_identical_rows_and_weights(overrides):
    cfg = small_config(steps=6, eval_every=2, **overrides)
    first = train(cfg, DATA)
    second = train(cfg, DATA)
    assert first.status == second.status == "ok"
    assert len(first.rows) == len(second.rows)
    for a, b in zip(first.rows, second.rows, strict=True):
        assert a.keys() == b.keys()
        assert all(same_float(a[k], b[k]) for k in a), (a, b)
    sa, sb = first.model.state_dict(), second.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # ...and the seed matters: another seed gives another run.
    other = train(small_config(steps=6, eval_every=2, **{**overrides, "seed": 1}), DATA)
    assert any(not same_float(a["train_loss"], b["train_loss"])
               for a, b in zip(first.rows[1:], other.rows[1:], strict=True))


# --- 14. Augmentation: crop_padding reaches the batches -----------------------------------------


def crop_of(out: torch.Tensor, x: torch.Tensor, padding: int) -> tuple[int, int, bool]:
    """(row offset, column offset, flipped) of ``out``, one channel of a crop of one of the
    images ``x`` (N, S, S) whose pixel values are 1 + their flat index, read from where its
    pixels came from, then checked pixel by pixel against that crop of the zero-padded image."""
    size = x.shape[-1]
    h, w = (int(t) for t in out.nonzero()[0])  # the first kept pixel (row-major)
    image, local = divmod(int(out[h, w]) - 1, size * size)
    row, col = divmod(local, size)
    flipped = bool(out[h, w + 1] == out[h, w] - 1)  # columns run backwards in a flipped crop
    i = row - h + padding
    j = (col - (size - 1 - w) if flipped else col - w) + padding
    padded = torch.nn.functional.pad(x[image], (padding,) * 4)
    expected = padded[i:i + size, j:j + size]
    assert torch.equal(out, expected.flip(-1) if flipped else expected)
    return i, j, flipped


@pytest.mark.parametrize("padding", [0, 1, 2, 3])
def test_crop_padding_gives_crops_whose_offsets_span_zero_to_twice_the_padding(padding):
    """The config's crop_padding p reaches the training batches: every image is a crop of its
    p-padded copy, and over many draws the row and column offsets take every value of
    {0, ..., 2p} and no other (so p = 0 only flips)."""
    cfg = small_config(augment="crop_flip", crop_padding=padding)
    size, n = DATA.train_x.shape[-1], len(DATA.train_x)
    marks = 1 + torch.arange(n * size * size, dtype=torch.float32).view(n, 1, size, size)
    data = dataclasses.replace(DATA, train_x=marks.expand(n, 3, size, size).contiguous())
    parts = [[torch.arange(i * 20, (i + 1) * 20) for i in range(3)]]
    batches = training_batches([cfg], data, parts)
    assert batches.augment is not None and batches.augment.draws == 3
    rows, cols, flips = set(), set(), set()
    for step in range(30):
        xb, _ = batches.sample(step)
        for out in xb[0, :, 0]:
            i, j, flipped = crop_of(out, marks[:, 0], padding)
            rows.add(i)
            cols.add(j)
            flips.add(flipped)
    assert rows == cols == set(range(2 * padding + 1))
    assert flips == {False, True}


def test_crop_padding_is_unused_without_crop_flip():
    cfg = small_config(crop_padding=2)
    parts = [[torch.arange(i * 20, (i + 1) * 20) for i in range(3)]]
    assert training_batches([cfg], DATA, parts).augment is None
    assert small_config().crop_padding == 4  # the former constant


# --- Normalizers without batch statistics (FixBN paper Table 4) ------------------------------

EASY = colour_classes(n_train=60, n_test=40, image_size=8, seed=0, separation=3.0)


@pytest.mark.parametrize(
    ("normalizer", "model", "local_steps", "lr"),
    [("gn_ws", "fbn_cnn", 1, 0.1), ("ln", "fbn_cnn", 1, 0.1), ("in", "fbn_cnn", 1, 0.1),
     ("gn_ws", "resnet20", 2, 0.1), ("ln", "resnet20", 2, 0.1), ("in", "resnet20", 2, 0.1),
     ("fixup", "resnet20", 1, 0.1), ("fixup", "resnet20", 2, 0.1),
     # without any normalization, each at a step size where it moves within 30 steps (at 0.1
     # FedWon's CNN barely moves and the plain CNN stays at chance; FedWon's ResNet-20, with
     # its NF residual scaling, takes the others' 0.1: at 0.01 before that scaling)
     ("fedwon", "fbn_cnn", 1, 0.3), ("fedwon", "resnet20", 2, 0.1), ("none", "resnet20", 2, 0.1)],
)
def test_models_without_bn_layers_train_through_the_engine(normalizer, model, local_steps, lr):
    """No BN layer, so no statistics to report or commit (DSGD and FedAvg alike): 30 steps on
    well-separated colour classes lower the training loss by 10 % and the test loss."""
    cfg = small_config(normalizer=normalizer, model=model, local_steps=local_steps, n_test=40,
                       partition="iid", heterogeneity=None, steps=30, eval_every=10, lr=[lr])
    result = train(cfg, EASY)
    assert result.status == "ok" and [r["step"] for r in result.rows] == [0, 10, 20, 30]
    first, last = result.rows[1]["train_loss"], result.rows[-1]["train_loss"]
    assert last < 0.9 * first, [r["train_loss"] for r in result.rows]
    assert result.rows[-1]["test_loss"] < result.rows[0]["test_loss"]


# --- Validation split: what a learning rate is chosen on -------------------------------------


def test_val_accuracy_is_the_accuracy_on_the_held_out_images_and_training_never_sees_them():
    """With val_fraction 0.2, round(0.2 x 6) = 1 image of each of the 10 classes (6 each) is
    held out: the run's val_accuracy is its global model's accuracy on those 10 (checked by
    evaluating the returned model by hand), and it trains on the other 50 (a run with those 50
    as its whole training set gives the same test rows). Without a validation split the column
    is NaN."""
    from fednorm.data.arrays import hold_out

    cfg = small_config(normalizer="gn", val_fraction=0.2, partition="iid", heterogeneity=None)
    result = train(cfg, DATA)
    held = hold_out(DATA, 0.2)
    assert len(held.val_y) == 10 and len(held.train_y) == 50
    model = result.model.eval()
    with torch.no_grad():
        want = (model(held.val_x).argmax(1) == held.val_y).double().mean().item()
    assert result.rows[-1]["val_accuracy"] == pytest.approx(want)
    alone = train(dataclasses.replace(cfg, val_fraction=0.0, n_train=50),
                  dataclasses.replace(held, val_x=None, val_y=None))
    assert [r["test_loss"] for r in alone.rows] == [r["test_loss"] for r in result.rows]
    assert all(math.isnan(r["val_accuracy"]) for r in alone.rows)


def test_lr_scale_multiplies_every_value_of_the_schedule():
    """lr [0.05, 0.01] at lr_scale 2 trains exactly as lr [0.1, 0.02] (the same run's steps)."""
    scaled = small_config(normalizer="bn", lr=[0.05, 0.01], lr_milestones=[5], lr_scale=2.0)
    plain = small_config(normalizer="bn", lr=[0.1, 0.02], lr_milestones=[5])
    assert scaled.lr_at(6) == pytest.approx(0.02)
    a, b = train(scaled, DATA), train(plain, DATA)
    assert [r["test_loss"] for r in a.rows] == [r["test_loss"] for r in b.rows]
