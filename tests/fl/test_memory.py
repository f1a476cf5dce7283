"""A bundle that does not fit the device's memory is split and goes on (fednorm.fl.train), and
``bundle_size: auto`` trains as many runs together as the measured footprint lets the free
memory hold (fednorm.fl.memory).

Running out of memory is simulated on CPU: :class:`Capacity` wraps the trainer so that a round
of more than ``runs`` runs from step ``at`` on raises CUDA's OutOfMemoryError, as a GPU would.
The references are the same runs trained alone in float64 (tests/fl/test_bundle.py), so a split
that loses a run's state, continues a run from another run's state or from a stale step fails
at order 1.
"""

from __future__ import annotations

import logging

import pytest
import torch
from test_bundle import DATA64, assert_same_run, members, small

from fednorm.config import ConfigError
from fednorm.fl import build as training
from fednorm.fl import memory
from fednorm.fl.resume import ResumeStore
from fednorm.fl.train import train, train_bundle
from fednorm.plan import AUTO_BUNDLE_RUNS, load_execution

MAKE_TRAINER = training.make_trainer


class Killed(Exception):
    pass


class Capacity:
    """make_trainer whose trainers run out of memory in a round of more than ``runs`` runs
    from step ``at``; ``kill``: (runs, step): a trainer of exactly these runs is killed before
    its round from that step (its state saved just before, as the store saves every round)."""

    def __init__(self, runs: int, at: int = 0, kill: tuple[list, int] | None = None):
        self.runs, self.at, self.kill = runs, at, kill
        self.sizes: list[int] = []  # the runs of each trainer built

    def __call__(self, cfgs, *args, **kwargs):
        trainer = MAKE_TRAINER(cfgs, *args, **kwargs)
        self.sizes.append(trainer.runs)
        ids = [c.run_id for c in cfgs]
        round_ = trainer.round

        def limited(first):
            if self.kill is not None and ids == self.kill[0] and first >= self.kill[1]:
                raise Killed(first)
            if trainer.runs > self.runs and first >= self.at:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
            return round_(first)

        trainer.round = limited
        return trainer


def four():
    return [*members(local_steps=2, normalizer="bn"),
            small(local_steps=2, normalizer="bn", seed=3, lr=[0.03])]


@pytest.fixture(scope="module")
def alone():
    return [train(c, DATA64) for c in four()]


def test_a_bundle_out_of_memory_is_split_and_each_half_continues_where_it_was(
        alone, tmp_path, monkeypatch, caplog):
    """Four runs fit two at a time from step 2 on: the bundle fails its round from step 2,
    each half continues from the bundle's resume point at step 2 and equals its runs alone;
    every resume point is gone at the end."""
    capacity = Capacity(runs=2, at=2)
    monkeypatch.setattr(training, "make_trainer", capacity)
    finished = []
    store = ResumeStore(tmp_path / "bundle.pt", every_s=1e-9)  # a save before every round
    with caplog.at_level(logging.INFO):
        got = train_bundle(four(), DATA64, resume=store,
                           on_finish=lambda i, r: finished.append(i))
    for bundled, want in zip(got, alone, strict=True):
        assert_same_run(bundled, want)
    assert sorted(finished) == [0, 1, 2, 3]
    assert capacity.sizes == [4, 2, 2]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("4 runs together do not fit the memory of cpu" in m for m in messages) == 1
    assert sum(m.startswith("resumed at step 2 of 4 (2 runs training)") for m in messages) == 2
    assert list(tmp_path.iterdir()) == []


def test_halves_that_do_not_fit_are_split_again_down_to_single_runs(alone, monkeypatch):
    capacity = Capacity(runs=1)
    monkeypatch.setattr(training, "make_trainer", capacity)
    got = train_bundle(four()[:3], DATA64)  # no resume point: the halves start over
    for bundled, want in zip(got, alone[:3], strict=True):
        assert_same_run(bundled, want)
    assert capacity.sizes == [3, 1, 2, 1, 1]


def test_a_run_that_does_not_fit_alone_and_other_errors_are_raised(monkeypatch):
    capacity = Capacity(runs=0)
    monkeypatch.setattr(training, "make_trainer", capacity)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        train_bundle(four()[:2], DATA64)
    assert capacity.sizes == [2, 1]
    capacity = Capacity(runs=4, kill=([c.run_id for c in four()[:2]], 0))
    monkeypatch.setattr(training, "make_trainer", capacity)
    with pytest.raises(Killed):  # not a memory error: no split
        train_bundle(four()[:2], DATA64)
    assert capacity.sizes == [2]


def killed_after_a_split(killed, path, monkeypatch):
    """Four runs of which two fit together, split at step 0; the half ``killed`` (its
    configs) is killed before its round from step 2, its state saved just before. The bundle
    keeps one resume point, whatever the split."""
    ids = [c.run_id for c in killed]
    monkeypatch.setattr(training, "make_trainer", Capacity(runs=2, kill=(ids, 2)))
    with pytest.raises(Killed):
        train_bundle(four(), DATA64, resume=ResumeStore(path, every_s=1e-9))
    assert list(path.parent.iterdir()) == [path]
    monkeypatch.setattr(training, "make_trainer", MAKE_TRAINER)


def test_a_split_off_half_killed_later_resumes_from_its_own_point(
        alone, tmp_path, monkeypatch, caplog):
    """The second half is killed at step 2 after the split; the job run again asks for its two
    runs alone (the first half's files exist) and continues from the half's newest state, at
    step 2, not from the older one of the split."""
    path = tmp_path / "bundle.pt"
    killed_after_a_split(four()[2:], path, monkeypatch)
    with caplog.at_level(logging.INFO, logger="fednorm.train"):
        got = train_bundle(four()[2:], DATA64, resume=ResumeStore(path))
    for bundled, want in zip(got, alone[2:], strict=True):
        assert_same_run(bundled, want)
    assert any(r.getMessage().startswith("resumed at step 2 of 4") for r in caplog.records)
    assert list(tmp_path.iterdir()) == []


def test_killed_while_the_first_half_trains_each_half_resumes_where_it_was(
        alone, tmp_path, monkeypatch, caplog):
    """One resume point holds every slice of a split bundle: the first half is killed at step
    2 while the second waits at step 0 (the split's point); the job run again for all four
    runs continues the first half from step 2 and the second from step 0, each equal to its
    runs alone."""
    path = tmp_path / "bundle.pt"
    killed_after_a_split(four()[:2], path, monkeypatch)
    with caplog.at_level(logging.INFO, logger="fednorm.train"):
        got = train_bundle(four(), DATA64, resume=ResumeStore(path))
    for bundled, want in zip(got, alone, strict=True):
        assert_same_run(bundled, want)
    messages = [r.getMessage() for r in caplog.records]
    for step in (2, 0):
        assert sum(m.startswith(f"resumed at step {step} of 4 (2 runs training)")
                   for m in messages) == 1
    assert list(tmp_path.iterdir()) == []


def test_size_trains_a_bundle_in_consecutive_parts(alone, tmp_path, monkeypatch):
    capacity = Capacity(runs=4)
    monkeypatch.setattr(training, "make_trainer", capacity)
    got = train_bundle(four()[:3], DATA64, size=2,
                       resume=ResumeStore(tmp_path / "bundle.pt", every_s=1e-9))
    for bundled, want in zip(got, alone[:3], strict=True):
        assert_same_run(bundled, want)
    assert capacity.sizes == [2, 1]
    assert list(tmp_path.iterdir()) == []


def test_runs_that_fit_divide_the_free_memory_by_the_footprint():
    footprint = memory.Footprint(fixed=1000, per_run=100)
    assert footprint.peak(3) == 1300
    assert footprint.runs_that_fit(2000, margin=0.85) == 7  # 1000 + 7 * 100 <= 1700 < 1800
    assert footprint.runs_that_fit(2000, margin=1.0) == 10
    assert footprint.runs_that_fit(500) == 1  # not even one fits: one, which fails as it would


def test_measure_solves_the_two_probes_for_fixed_and_per_run_bytes(monkeypatch):
    """The probe bundles are two and four runs like the bundle's first, one short round each;
    their peaks (here 700 + 300 R bytes) give the two terms."""
    built = []

    def fake_train(cfgs, data, device):
        built.append(cfgs)

    monkeypatch.setattr(memory.training, "train_bundle", fake_train)
    monkeypatch.setattr(memory, "peak_bytes",
                        lambda work, device: (work(), 700 + 300 * len(built[-1]))[1])
    cfgs = members(local_steps=5, normalizer="bn", steps=20)
    assert memory.measure(cfgs, DATA64, torch.device("cpu")) == memory.Footprint(700, 300)
    two, four = built
    assert four[:2] == two and [c.seed for c in four] == [0, 1, 2, 3]
    assert len({c.run_id for c in four}) == 4
    assert {(c.steps, c.local_steps, c.eval_every) for c in four} == {(2, 2, 2)}  # FedAvg
    assert {c.partition for c in four} == {cfgs[0].partition}
    assert {(c.steps, c.local_steps) for c in memory.probe_configs(members())} == {(1, 1)}


@pytest.mark.skipif(not memory._reset_high_water_mark(), reason="needs Linux /proc")
def test_a_cpu_peak_is_read_from_the_process_high_water_mark():
    size = 200 * 2**20
    got = memory.peak_bytes(lambda: torch.ones(size, dtype=torch.uint8), torch.device("cpu"))
    assert 0.9 * size <= got <= 1.2 * size


def test_bundle_size_auto_plans_large_bundles_and_trains_what_fits():
    execution = load_execution({"bundle_size": "auto"})
    assert execution.planned_bundle_size == AUTO_BUNDLE_RUNS and execution.together == "auto"
    assert load_execution({"bundle_size": 4}).together is None
    with pytest.raises(ConfigError, match=r"execution: key 'bundle_size' has value 'big'; "
                                          r"allowed: an integer >= 1, or auto"):
        load_execution({"bundle_size": "big"})
