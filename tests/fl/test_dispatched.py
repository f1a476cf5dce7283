"""What a local step dispatches (fednorm.gpucheck.dispatched): for every method, no host
synchronization, no tensor made from a Python number, and the same operators with the same
arguments at every local step of a round, across the learning rate's milestones too (what a
CUDA graph of the step needs: STYLE.md's CUDA graphs anchor). Counted on the CPU."""

from __future__ import annotations

import itertools

import pytest
import torch

from fednorm.config import run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.build import build as bundle
from fednorm.gpucheck.dispatched import Dispatched, local_steps
from fednorm.norms import folded

DATA = colour_classes(n_train=80, n_test=20, image_size=8, seed=0)
# E = 2, a milestone at step 4 (crossed inside the run), dropout and augmentation drawn
BASE = dict(dataset="synthetic", n_train=80, n_test=20, image_size=8, model="fbn_cnn", width=4,
            hidden=8, dropout=0.25, normalizer="bn", gn_groups=2, n_clients=4,
            partition="gamma", heterogeneity=0.5, batch_size=4, steps=8, lr=[0.05, 0.02],
            lr_milestones=[4], momentum=0.9, eval_every=4, local_steps=2, augment="crop_flip",
            crop_padding=1)
METHODS = {
    "bn, FedAvg E = 2": {},
    "fbn, DSGD": dict(normalizer="fbn", local_steps=1),
    "fixbn (freezes at step 4)": dict(normalizer="fixbn", fixbn_freeze=0.5),
    "fixbn, fix both": dict(normalizer="fixbn", fixbn_freeze=0.5, fixbn_fix="both"),
    "fedbn": dict(normalizer="fedbn"),
    "gn": dict(normalizer="gn"),
    "fedwon": dict(normalizer="fedwon"),
    "hybridbn": dict(normalizer="hybridbn", hybridbn_stats_images=4),
    "hybridbn, DSGD": dict(normalizer="hybridbn", hybridbn_stats_images=4, local_steps=1),
    "fedtan": dict(normalizer="fedtan"),
    "fedtan, first step": dict(normalizer="fedtan", fedtan_union="first_step"),
    "participation 0.5": dict(participation=0.5),
    "sf attack, median": dict(normalizer="fbn", local_steps=1, attack="sf", f=1,
                              aggregator="median", n_clients=5),
    "attacked updates, median": dict(normalizer="gn", local_steps=1, attack="sf", f=1,
                                     aggregator="median", n_clients=5, attack_updates=True),
}


@pytest.fixture(autouse=True)
def gpu_path():
    """The GPU's path (what a CUDA graph captures): per-client BatchNorm as GroupedBatchNorm on
    the CPU too (fednorm.norms.folded); the CPU's own path is checked apart below."""
    with folded.gpu_path():
        yield


def trainer_of(overrides: dict, runs: int):
    """A bundle's trainer, built as a training job builds it (the GPU check's builder)."""
    return bundle([run_config({**BASE, **overrides, "seed": s}) for s in range(runs)], DATA)


def recorded_steps(trainer) -> list[tuple[tuple, Dispatched]]:
    """Each local step of a whole run with what decides its operators per round: the step's
    kind (a fused or per-client step), the round's rule and the parameters it trains."""
    cfg, out = trainer.cfg, []
    for first in range(0, cfg.steps, cfg.local_steps):
        with local_steps(trainer) as steps:
            trainer.round(first)
        per_round = (repr(trainer.normalizer.rule_at(first)), tuple(trainer.trainable(first)))
        out += [((step.kind, *per_round), step) for step in steps]
    return out


@pytest.mark.parametrize("runs", [1, 2])
@pytest.mark.parametrize("method", METHODS)
def test_a_local_step_reads_nothing_back_and_repeats_its_operators(method, runs):
    steps = recorded_steps(trainer_of(METHODS[method], runs))
    assert len(steps) == BASE["steps"]
    for _, step in steps:
        assert step.syncs() == [] and step.from_python() == []
    first_of: dict[tuple, Dispatched] = {}
    for decided, step in steps:  # every step the same as the first one of its kind and rule
        assert step.ops == first_of.setdefault(decided, step).ops


@pytest.mark.parametrize("method", METHODS)
def test_the_cpu_path_reads_nothing_back_either(method):
    with folded._FOLDED.bound(True):
        steps = recorded_steps(trainer_of(METHODS[method], 2))
    assert all(step.syncs() == [] and step.from_python() == [] for _, step in steps)


def test_sixteen_runs_too():
    steps = recorded_steps(trainer_of(dict(participation=0.5), 16))
    assert all(step.syncs() == [] and step.from_python() == [] for _, step in steps)
    assert all(step.ops == steps[0][1].ops for _, step in steps)


def test_the_record_sees_host_reads_and_tensors_made_from_python_numbers():
    """What the tests above rely on: each way of reading a value back, or making a tensor of
    a number, is recorded (on the CPU, where none of them is a synchronization)."""
    x = torch.arange(4.0)
    mode = Dispatched()
    with mode.watching_host_reads():
        x.sum().item()
        bool(x[0] > 0)
        x.tolist()
        x.cpu()
        x.nonzero()
        torch.as_tensor(3)
    assert mode.syncs() == ["aten._local_scalar_dense.default"] * 2 + [
        "host.tolist", "host.cpu", "aten.nonzero.default"]
    assert mode.from_python() == ["aten.lift_fresh.default"]


def test_a_python_number_that_changes_changes_the_record():
    """A step index as a Python int reaches the operators' arguments: two steps differ."""
    x = torch.arange(6.0).view(2, 3)
    records = []
    for k in (0, 1):
        mode = Dispatched()
        with mode:
            x[:, k].sum()
        records.append(mode.ops)
    assert records[0] != records[1]


@pytest.mark.parametrize("runs", [1, 16])
@pytest.mark.parametrize("method", METHODS)
def test_consecutive_local_steps_dispatch_the_same_operator_sequence(method, runs):
    """Step k and step k + 1 of a run, inside a round (and across rounds where the round's
    rule and trained parameters stay; FedTAN's union step and its naive steps are two kinds),
    dispatch the same sequence of operators: what one captured CUDA graph replays at every
    step (fednorm.fl.graphed)."""
    steps = recorded_steps(trainer_of(METHODS[method], runs))
    of_kind: dict[tuple, list[Dispatched]] = {}
    for decided, step in steps:  # in order: a step and the next one of its kind
        of_kind.setdefault(decided, []).append(step)
    pairs = [pair for same in of_kind.values() for pair in itertools.pairwise(same)]
    assert pairs  # every method has consecutive steps of one kind
    for one, after in pairs:
        assert one.names() == after.names()


STATIC = [m for m in METHODS if not m.startswith("fedtan")]  # FedTAN: its own per-round copies


@pytest.mark.parametrize("method", STATIC)
def test_every_local_step_of_a_bundle_steps_the_same_buffers(method):
    """The clients' parameters, statistics and momenta are buffers allocated once per bundle
    and updated in place (copy_, never rebound): every local step of every round hands the
    step the same tensors, which a captured graph needs."""
    trainer = trainer_of(METHODS[method], 2)
    seen = []

    def recorder(name):
        method_ = getattr(trainer, name)

        def step(step_fn, params, *args, **kwargs):
            stats = args[0] if name == "_local_step" else trainer.state.stats
            tensors = [*params.values(), *stats.values(), *trainer.state.momenta.values()]
            seen.append((name, tuple(t.data_ptr() for t in tensors)))
            return method_(step_fn, params, *args, **kwargs)
        return step

    for name in ("_local_step", "_fused_step"):
        if hasattr(trainer, name):
            setattr(trainer, name, recorder(name))
    for first in range(0, trainer.cfg.steps, trainer.cfg.local_steps):
        trainer.round(first)
    assert len(seen) == BASE["steps"]
    for name in {name for name, _ in seen}:
        assert len({ptrs for n, ptrs in seen if n == name}) == 1
