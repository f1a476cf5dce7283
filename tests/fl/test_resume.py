"""A bundle stopped between rounds and continued from its resume point computes exactly what it
would have uninterrupted (fednorm.fl.resume, fednorm.fl.train.train_bundle): the same metric
rows, statuses and final parameters, bit for bit on CPU (float32, as the pipeline trains).

A kill is simulated in-process: :class:`KillAt` saves the bundle's state before the round from
the first step >= ``at`` and raises there, as a ``kill -9`` right after that save would leave
it (a kill in the middle of a round or of an evaluation resumes from the last save before it,
the same thing). The stop points cover the start (step 0), a round boundary between two
evaluation points (a partial training-loss sum in flight), an evaluation point, FixBN's freeze
step and a point after a run diverged.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import signal
from dataclasses import dataclass

import pytest
import torch
from test_bundle import assert_same_run

from fednorm.config import run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.resume import Interrupted, ResumeStore
from fednorm.fl.train import train_bundle

DATA = colour_classes(n_train=120, n_test=40, image_size=8, seed=0)


class Killed(Exception):
    pass


@dataclass
class KillAt(ResumeStore):
    at: int = 0

    def between_rounds(self, step, snapshot):
        if step >= self.at:
            self.save(snapshot())
            raise Killed(step)


def small(**overrides):
    values = dict(
        dataset="synthetic", n_train=120, n_test=40, image_size=8, model="fbn_cnn", width=4,
        hidden=8, dropout=0.25, normalizer="fbn", gn_groups=2, n_clients=5, partition="gamma",
        heterogeneity=0.0, batch_size=4, steps=8, lr=[0.05], lr_milestones=[], momentum=0.9,
        eval_every=4, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def members(**shared):
    """Three runs of one bundle (other seeds, splits, learning rates and client momenta)."""
    return [small(**shared, client_momentum="local"),
            small(**shared, seed=1, partition="iid", heterogeneity=None, lr=[0.08],
                  client_momentum="reset"),
            small(**shared, seed=2, partition="dirichlet", heterogeneity=0.5,
                  client_momentum="global")]


def assert_identical(got, want):
    """Same statuses, rows (NaN where NaN) and final parameters and statistics, bit for bit."""
    assert [r.status for r in got] == [r.status for r in want]
    for g, w in zip(got, want, strict=True):
        for rows_g, rows_w in ((g.rows, w.rows), (g.layer_rows, w.layer_rows),
                               (g.dynamics_rows, w.dynamics_rows)):
            assert len(rows_g) == len(rows_w)
            for a, b in zip(rows_g, rows_w, strict=True):
                assert a.keys() == b.keys()
                for k in b:
                    same = a[k] == b[k] or (isinstance(b[k], float) and math.isnan(b[k])
                                            and math.isnan(a[k]))
                    assert same, (k, a, b)
        if w.status == "ok":
            for (k, a), b in zip(g.model.state_dict().items(), w.model.state_dict().values(),
                                 strict=True):
                assert torch.equal(a, b), k


CASES = {
    "dsgd-fbn": dict(),
    "fedavg-E2-bn-momenta": dict(normalizer="bn", local_steps=2),
    "fedtan-E2": dict(normalizer="fedtan", local_steps=2),
    "fedtan-E2-first-step": dict(normalizer="fedtan", local_steps=2, fedtan_union="first_step"),
    "fixbn-freeze-both": dict(normalizer="fixbn", fixbn_fix="both", local_steps=2),
    "fbn-E2-alie-trimmed": dict(local_steps=2, attack="alie", f=2, aggregator="trimmed_mean"),
    "dsgd-fbn-sf-median": dict(attack="sf", f=2, aggregator="median"),
    "fedavg-E2-fbn-participation": dict(local_steps=2, participation=0.6),
    "fedavg-E2-bn-dynamics": dict(normalizer="bn", local_steps=2, record_dynamics=True,
                                  dynamics_window=3),
    "fedbn-E2": dict(normalizer="fedbn", local_steps=2),
}


@functools.cache
def uninterrupted(case):
    return train_bundle(members(**CASES[case]), DATA)


# 2: between evaluation points; 4: an evaluation point and FixBN's T* (0.5 * 8 steps)
POINTS = [(case, at) for case in CASES for at in (2, 4)] + [
    (case, at) for case in ("dsgd-fbn", "fedavg-E2-bn-momenta") for at in (0, 6)]


@pytest.mark.parametrize(("case", "at"), POINTS)
def test_a_killed_bundle_resumes_bit_identical(case, at, tmp_path):
    cfgs, want = members(**CASES[case]), uninterrupted(case)
    path = tmp_path / "bundle.pt"
    with pytest.raises(Killed):
        train_bundle(cfgs, DATA, resume=KillAt(path, at=at))
    assert path.exists()
    finished = []
    got = train_bundle(cfgs, DATA, resume=ResumeStore(path),
                       on_finish=lambda i, r: finished.append(i))
    assert_identical(got, want)
    assert sorted(finished) == [0, 1, 2]
    assert not path.exists()  # a finished bundle purges its resume point


def test_killed_twice_and_after_a_run_diverged(tmp_path):
    """The middle run diverges at the first evaluation point (step 4); killed at 6, the bundle
    resumes with two runs, hands the diverged run to on_finish again at once, and is killed and
    resumed once more; asked again without the diverged run (its files exist), it resumes too."""
    cfgs = members(normalizer="bn")
    cfgs[1] = dataclasses.replace(cfgs[1], lr=(1e6,))
    want = train_bundle(cfgs, DATA)
    assert [r.status for r in want] == ["ok", "diverged", "ok"]
    path = tmp_path / "bundle.pt"
    with pytest.raises(Killed):
        train_bundle(cfgs, DATA, resume=KillAt(path, at=5))
    finished = []
    with pytest.raises(Killed):
        train_bundle(cfgs, DATA, resume=KillAt(path, at=7),
                     on_finish=lambda i, r: finished.append((i, r.status)))
    assert finished == [(1, "diverged")]
    saved = path.read_bytes()
    assert_identical(train_bundle(cfgs, DATA, resume=ResumeStore(path)), want)
    path.write_bytes(saved)
    kept = [cfgs[0], cfgs[2]]
    assert_identical(train_bundle(kept, DATA, resume=ResumeStore(path)), [want[0], want[2]])


@pytest.mark.parametrize("spoil", ["corrupt", "code", "config", "format"])
def test_a_foreign_or_corrupt_resume_point_is_refused_and_the_bundle_starts_over(
        spoil, tmp_path, caplog):
    cfgs = members(normalizer="bn", local_steps=2)
    want = train_bundle(cfgs, DATA)
    path = tmp_path / "bundle.pt"
    with pytest.raises(Killed):
        train_bundle(cfgs, DATA, resume=KillAt(path, at=4, code="v1"))
    store, asked = ResumeStore(path, code="v1"), cfgs
    if spoil == "corrupt":
        path.write_bytes(path.read_bytes()[:200])
    elif spoil == "code":
        store = ResumeStore(path, code="v2")
    elif spoil == "config":  # same seeds and splits, another learning rate
        asked = [dataclasses.replace(c, lr=(0.01,)) for c in cfgs]
        want = train_bundle(asked, DATA)
    else:  # format
        saved = torch.load(path, weights_only=True)
        saved["header"]["format"] = -1
        torch.save(saved, path)
    with caplog.at_level(logging.WARNING, logger="fednorm.resume"):
        got = train_bundle(asked, DATA, resume=store)
    assert_identical(got, want)
    messages = [r.getMessage() for r in caplog.records if r.name == "fednorm.resume"]
    assert len(messages) == 1 and "refused" in messages[0]
    assert "training from step 0" in messages[0]


def test_a_signal_saves_at_the_next_round_boundary_and_stops(tmp_path, caplog):
    """SIGTERM or SIGUSR1 inside ``signals()`` only sets a flag (the process lives on); the
    loop then saves and raises Interrupted (exit code 128 + signal); run again, it resumes and
    says where."""
    cfgs = members(normalizer="bn", local_steps=2)
    want = train_bundle(cfgs, DATA)
    path = tmp_path / "bundle.pt"
    store = ResumeStore(path)
    with store.signals():
        os.kill(os.getpid(), signal.SIGUSR1)
        assert store.signalled == signal.SIGUSR1
        with pytest.raises(Interrupted) as stop:
            train_bundle(cfgs, DATA, resume=store)
    assert stop.value.step == 0 and stop.value.exit_code == 128 + signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    with caplog.at_level(logging.INFO, logger="fednorm.train"):
        got = train_bundle(cfgs, DATA, resume=ResumeStore(path))
    assert_identical(got, want)
    assert any(r.getMessage().startswith("resumed at step 0 of 8") for r in caplog.records)


def test_saves_come_at_the_interval_only(tmp_path, monkeypatch):
    """No save before ``every_s`` has passed; one at the first round boundary after."""
    clock = [0.0]
    monkeypatch.setattr("fednorm.fl.resume.time.monotonic", lambda: clock[0])
    store = ResumeStore(tmp_path / "b.pt", every_s=60.0)
    calls = []
    store.between_rounds(2, lambda: calls.append(2) or {"step": 2})
    clock[0] = 59.9
    store.between_rounds(4, lambda: calls.append(4) or {"step": 4})
    assert calls == [] and not store.path.exists()
    clock[0] = 60.0
    store.between_rounds(6, lambda: calls.append(6) or {"step": 6})
    assert calls == [6] and store.path.exists()
    with pytest.raises(ValueError, match="every_s"):
        ResumeStore(tmp_path / "c.pt", every_s=0)


def test_runs_no_longer_requested_leave_the_others_their_resume_point(tmp_path, caplog):
    """Saved while three runs trained; one of them finished before the kill (its files exist,
    so the job run again asks for the other two): those two continue from the save, each as
    the uninterrupted bundle computed it. A bundle of two sums in another order than one of
    three, so the comparison is in float64, to 1e-9 relative (a run continued from another
    run's state would differ at order 1)."""
    data = dataclasses.replace(DATA, train_x=DATA.train_x.double(), test_x=DATA.test_x.double())
    cfgs = members(normalizer="bn", local_steps=2)
    want = train_bundle(cfgs, data)
    path = tmp_path / "bundle.pt"
    with pytest.raises(Killed):
        train_bundle(cfgs, data, resume=KillAt(path, at=4))
    with caplog.at_level(logging.INFO):
        got = train_bundle([cfgs[0], cfgs[2]], data, resume=ResumeStore(path))
    for g, w in zip(got, [want[0], want[2]], strict=True):
        assert_same_run(g, w)
    messages = [r.getMessage() for r in caplog.records]
    assert any("1 of its runs still training are not requested" in m for m in messages)
    assert any(m.startswith("resumed at step 4 of 8 (2 runs training)") for m in messages)
    assert not any("refused" in m for m in messages) and not path.exists()



def test_a_resume_point_of_the_previous_format_is_refused_in_one_line(tmp_path, caplog):
    """A resume point written before the bundle's state was one object (FORMAT 1: the trainer's
    parts, ``active`` and per-run ``results`` beside it, rebuilt here by hand from a save of
    the same bundle at step 4) is refused with one line naming both formats, and the bundle
    trains from step 0 to the same result."""
    cfgs = members(normalizer="bn", local_steps=2)
    want = train_bundle(cfgs, DATA)
    path = tmp_path / "bundle.pt"
    with pytest.raises(Killed):
        train_bundle(cfgs, DATA, resume=KillAt(path, at=4, code="v1"))
    saved = torch.load(path, weights_only=True)
    state = saved["slices"][0]
    torch.save({"header": {**saved["header"], "format": 1}, "step": 4, "steps": 8,
                "active": [0, 1, 2],
                "results": [{**h, "status": "ok", "model": None} for h in state["history"]],
                "trainer": {k: state[k] for k in ("params", "stats", "momenta", "local",
                                                   "dynamics")},
                "loss_sum": state["loss_sum"], "since": state["since"]}, path)
    with caplog.at_level(logging.INFO):
        got = train_bundle(cfgs, DATA, resume=ResumeStore(path, code="v1"))
    assert_identical(got, want)
    messages = [r.getMessage() for r in caplog.records if r.name == "fednorm.resume"]
    assert messages == [f"resume point {path} refused: written by another format (1, this is "
                        f"2); training from step 0"]
    assert not any(r.getMessage().startswith("resumed") for r in caplog.records)
    assert not path.exists()
