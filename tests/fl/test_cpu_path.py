"""The CPU's per-client BatchNorm (fednorm.norms.folded: ATen's fused kernels, the clients
folded into the channels) computes what the GPU's (fednorm.norms.layer.GroupedBatchNorm)
does: every method of tests/fl/test_dispatched.py trained 3 rounds both ways on the CPU in
float64, at 1 and 3 runs, every tensor of the bundle's state and the losses equal to 1e-9;
both of the CPU path's kernels (FoldedBatchNorm above FOLD_ABOVE values, native_batch_norm
below) each taken for every layer; and whole trainings' rows (evaluation, calibration,
HeteroFL's static statistics, Hybrid BN's fresh evaluation, the dynamics)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_bitwise import TRAININGS, _data
from test_dispatched import BASE, METHODS

from fednorm.config import run_config
from fednorm.fl.build import build as bundle
from fednorm.fl.state import MODEL_PARTS
from fednorm.fl.train import train_bundle
from fednorm.norms import folded

ROUNDS = 3


def state_after_rounds(method: str, runs: int) -> dict[str, torch.Tensor]:
    cfgs = [run_config({**BASE, **METHODS[method], "seed": s}) for s in range(runs)]
    trainer = bundle(cfgs, _data())
    E = cfgs[0].local_steps
    out = {f"loss.{r}": trainer.round(r * E).clone() for r in range(ROUNDS)}
    for part in MODEL_PARTS:
        out.update({f"{part}.{k}": t.clone() for k, t in getattr(trainer.state, part).items()})
    return out


@pytest.mark.parametrize("fold_above", [0, 1 << 40], ids=["folded", "native"])
@pytest.mark.parametrize("runs", [1, 3])
@pytest.mark.parametrize("method", METHODS)
def test_the_cpu_path_equals_the_gpu_path(method, runs, fold_above, monkeypatch):
    monkeypatch.setattr(folded, "FOLD_ABOVE", fold_above)
    cpu = state_after_rounds(method, runs)
    with folded.gpu_path():
        gpu = state_after_rounds(method, runs)
    assert cpu.keys() == gpu.keys()
    for k in cpu:
        torch.testing.assert_close(cpu[k], gpu[k], rtol=1e-9, atol=1e-9, equal_nan=True,
                                   msg=lambda m, k=k: f"{method}, {k}: {m}")


def _rows(method: str) -> list:
    cfgs = [run_config({**BASE, **TRAININGS[method], "seed": s}) for s in range(2)]
    return [(res.rows, res.layer_rows, res.dynamics_rows)
            for res in train_bundle(cfgs, _data())]


@pytest.mark.parametrize("method", TRAININGS)
def test_whole_trainings_equal_on_both_paths(method):
    cpu = _rows(method)
    with folded.gpu_path():
        gpu = _rows(method)
    for a, b in zip(cpu, gpu, strict=True):
        for rows_a, rows_b in zip(a, b, strict=True):
            assert len(rows_a) == len(rows_b)
            for ra, rb in zip(rows_a, rows_b, strict=True):
                assert ra.keys() == rb.keys()
                for k, v in ra.items():
                    if isinstance(v, float):
                        assert v == pytest.approx(rb[k], rel=1e-9, abs=1e-9, nan_ok=True), k
                    else:
                        assert v == rb[k], k


def test_the_path_follows_the_device():
    x = torch.zeros(2, 3, 4, 4)
    assert folded.folded_on(x)
    with folded.gpu_path():
        assert not folded.folded_on(x)
    assert not folded.folded_on(x.to("meta"))
