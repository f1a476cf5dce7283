"""The local step through fednorm.fl.graphed: on CUDA captured once and replayed, bit for bit
the eager step over several rounds; on the CPU (or ``off``) the eager step itself, so a
trainer with the wrapper computes exactly what one without it does."""

from __future__ import annotations

import pytest
import torch

from fednorm.config import run_config
from fednorm.data.partition import partition
from fednorm.data.synthetic import colour_classes
from fednorm.fl.build import make_trainer, training_batches
from fednorm.fl.graphed import Graphed
from fednorm.models import build_model
from fednorm.norms import normalizer_for

DATA = colour_classes(n_train=80, n_test=20, image_size=8, seed=0)
BASE = dict(dataset="synthetic", n_train=80, n_test=20, image_size=8, model="fbn_cnn", width=4,
            hidden=8, dropout=0.25, normalizer="bn", n_clients=4, partition="gamma",
            heterogeneity=0.5, batch_size=4, steps=12, lr=[0.05, 0.02], lr_milestones=[6],
            momentum=0.9, eval_every=12, local_steps=2, augment="crop_flip", crop_padding=1)
CASES = {
    "FedAvg E = 2, BN": {},
    "DSGD, FBN": dict(normalizer="fbn", local_steps=1),
    "FedAvg, participation 0.5": dict(participation=0.5),
    "FedAvg, ResNet-20": dict(model="resnet20", dropout=0.0),
}


def trained(overrides: dict, runs: int, cuda_graph: str, device: str) -> dict:
    """The bundle's parameters, statistics and momenta after ``steps`` steps."""
    cfgs = [run_config({**BASE, **overrides, "seed": s}) for s in range(runs)]
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(build_model(c, DATA.n_classes).to(device))
    parts = [partition(DATA.train_y, c.partition, c.n_clients, c.heterogeneity, c.seed)
             for c in cfgs]
    trainer = make_trainer(cfgs, models, normalizer_for(cfgs[0]),
                           training_batches(cfgs, DATA.to(device), parts),
                           cuda_graph=cuda_graph)
    losses = [trainer.round(first) for first in range(0, cfgs[0].steps, cfgs[0].local_steps)]
    state = {f"{part}.{k}": t.cpu() for part in ("params", "stats", "momenta")
             for k, t in getattr(trainer.state, part).items()}
    state["losses"] = torch.stack(losses).cpu()
    state["captured"] = torch.tensor(trainer.graphed.captured)
    return state


@pytest.mark.parametrize("runs", [1, 3])
@pytest.mark.parametrize("case", CASES)
def test_the_wrapper_on_the_cpu_is_the_eager_step(case, runs):
    graphed = trained(CASES[case], runs, "auto", "cpu")
    eager = trained(CASES[case], runs, "off", "cpu")
    assert graphed.pop("captured").item() == 0  # no graph on the CPU
    eager.pop("captured")
    assert graphed.keys() == eager.keys()
    for k in eager:
        assert torch.equal(graphed[k], eager[k]), k


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("runs", [1, 3])
@pytest.mark.parametrize("case", CASES)
def test_a_captured_step_replays_the_eager_step_bit_for_bit(case, runs):
    graphed = trained(CASES[case], runs, "auto", "cuda")
    eager = trained(CASES[case], runs, "off", "cuda")
    assert graphed.pop("captured").item() >= 1  # a graph was captured and replayed
    eager.pop("captured")
    for k in eager:
        assert torch.equal(graphed[k], eager[k]), k


def test_a_mode_that_is_neither_auto_nor_off_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match=r"execution.cuda_graph: 'on'; allowed: auto, off"):
        Graphed("on")


def test_off_and_the_cpu_call_the_step_each_time():
    calls = []
    for wrapper in (Graphed("off", "cuda"), Graphed("auto", "cpu")):
        for _ in range(3):
            wrapper("key", lambda: calls.append(1))
    assert len(calls) == 6
