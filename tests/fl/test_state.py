"""A bundle's state is one object, run axis first (fednorm.fl.state.BundleState): selecting
runs picks every field of those runs and nothing else, its state_dict round-trips through a
file into a live trainer in place, and a trainer built for a selection of runs continues them
exactly as the whole bundle does."""

from __future__ import annotations

import torch
from test_bundle import DATA, DATA64, members

from fednorm.data.partition import partition
from fednorm.fl.build import make_trainer, training_batches
from fednorm.fl.state import HISTORY, BundleState
from fednorm.models import build_model
from fednorm.norms import normalizer_for


def trainer_of(cfgs, record_dynamics=False, data=DATA):
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(build_model(c, data.n_classes).to(data.train_x.dtype))
    parts = [partition(data.train_y, c.partition, c.n_clients, c.heterogeneity, c.seed)
             for c in cfgs]
    trainer = make_trainer(cfgs, models, normalizer_for(cfgs[0]),
                           training_batches(cfgs, data, parts))
    if record_dynamics:
        trainer.record_dynamics(cfgs[0].dynamics_window)
    return trainer


def fedbn_bundle():
    """FedBN at E = 2 with the dynamics recorded: every field of the state is filled."""
    return members(normalizer="fedbn", local_steps=2, record_dynamics=True, dynamics_window=3)


def trained(cfgs, rounds=2, data=DATA):
    trainer = trainer_of(cfgs, record_dynamics=True, data=data)
    for first in range(0, 2 * rounds, 2):
        trainer.state.loss_sum = trainer.state.loss_sum + trainer.round(first)
        trainer.state.step, trainer.state.since = first + 2, trainer.state.since + 2
    for r, h in enumerate(trainer.state.history):
        h["rows"].append({"step": 4, "run": r})
    return trainer


def leaves(state):
    tensors = {f"{part}.{k}": t for part in ("params", "stats", "momenta", "local")
               for k, t in getattr(state, part).items()}
    tensors |= {f"ring.{k}": t for k, t in state.dynamics["ring"].items()}
    return {**tensors, "change": state.dynamics["change"],
            "deviation": state.dynamics["deviation"], "loss_sum": state.loss_sum}


def test_select_picks_every_field_of_the_runs_along_their_leading_axis():
    state = trained(fedbn_bundle()).state
    assert state.local and state.dynamics["ring"]  # clients' own parts, dynamics' window
    picked = state.select([2, 0])
    assert picked.runs == [state.runs[2], state.runs[0]]
    assert picked.history == [state.history[2], state.history[0]]
    assert (picked.step, picked.since) == (state.step, state.since) == (4, 4)
    assert picked.dynamics["filled"] == state.dynamics["filled"] == 3
    whole, part = leaves(state), leaves(picked)
    assert whole.keys() == part.keys()
    for k, t in whole.items():
        assert t.shape[0] == 3, k  # run axis first, the ring's included
        assert torch.equal(part[k], t[[2, 0]]), k
        assert part[k].data_ptr() != t.data_ptr(), k  # new tensors: the bundle's stay as they are


def test_a_state_dict_saved_and_loaded_continues_bit_identical(tmp_path):
    """Saved after two rounds, loaded into a fresh trainer of the same runs: its tensors are
    written in place (a one-run state stays a view of its model) and two more rounds equal
    the trainer never saved."""
    cfgs = fedbn_bundle()
    going = trained(cfgs)
    torch.save(going.state.state_dict(), tmp_path / "state.pt")
    fresh = trainer_of(cfgs, record_dynamics=True)
    before = {k: t.data_ptr() for k, t in leaves(fresh.state).items() if "." in k}
    fresh.state.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert {k: t.data_ptr() for k, t in leaves(fresh.state).items() if k in before} == before
    for trainer in (going, fresh):
        trainer.round(4)
        trainer.round(6)
    for (k, a), b in zip(leaves(going.state).items(), leaves(fresh.state).values(), strict=True):
        assert torch.equal(a, b), k
    assert fresh.state.history == going.state.history
    fresh.state.history[0]["rows"].append({"step": 8})  # loaded rows are its own lists
    assert len(going.state.history[0]["rows"]) == 1


def test_a_trainer_built_for_selected_runs_continues_them_as_the_bundle_does():
    """An out-of-memory split is a selection of the state, loaded into a trainer of those runs:
    after two more rounds each selected run is where it is in the whole bundle (float64, to
    1e-9: a bundle of two sums in another order than one of three; another run's state would
    differ at order 1)."""
    cfgs = fedbn_bundle()
    whole = trained(cfgs, data=DATA64)
    part = trainer_of([cfgs[2], cfgs[0]], record_dynamics=True, data=DATA64)
    part.state.load_state_dict(whole.state.select([2, 0]).state_dict())
    for trainer in (whole, part):
        trainer.round(4)
        trainer.round(6)
    want, got = leaves(whole.state), leaves(part.state)
    for k, t in want.items():
        torch.testing.assert_close(got[k], t[[2, 0]], rtol=1e-9, atol=1e-12, msg=k)
    assert [r["run"] for h in part.state.history for r in h["rows"]] == [2, 0]


def test_a_saved_state_selects_as_the_live_one():
    state = trained(members()).state
    saved = BundleState.from_state_dict(state.state_dict())
    assert saved.size == 3 and saved.select([1]).runs == [state.runs[1]]
    assert set(HISTORY) == {"rows", "layer_rows", "dynamics_rows"}
