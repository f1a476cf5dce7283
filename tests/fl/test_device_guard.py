"""Every tensor the engine's hot path creates is on the bundle's device and, when floating, of
its dtype: a mistake that costs nothing on a CPU in float32 (``torch.zeros(n)`` without
``device=``, a float32 constant in a float64 run) fails here, before a GPU is lent.

:class:`Guard` (a TorchFunctionMode) sees every PyTorch call of a round
(``trainer.round``: one DSGD step, or E local steps and the server's aggregation) and records
each call that creates a tensor from nothing without ``device=`` or as a floating dtype other
than the bundle's, and each call whose result is on another device. The bundles train in
float64, so a tensor created with PyTorch's default dtype (float32) is caught. Tensors computed
from others keep their inputs' dtype by design: the counter-based uniforms are float32 on every
device (fednorm.rng: 24 random bits, exact in float32), and so are the indices and dropout
masks drawn from them.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from test_bundle import DATA64, members
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from fednorm.fl import build as training
from fednorm.fl.train import train_bundle

MAKE_TRAINER = training.make_trainer
# PyTorch's functions that create a tensor from nothing: on the default device unless told
FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.rand, torch.randn,
             torch.randint, torch.arange, torch.linspace, torch.eye, torch.tensor,
             torch.as_tensor, torch.scalar_tensor}


class Guard(TorchFunctionMode):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.device, self.dtype = device, dtype
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        problem = None
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor)]
        if func in FACTORIES and "device" not in kwargs:
            problem = "created without device="
        elif func in FACTORIES and any(t.is_floating_point() and t.dtype != self.dtype
                                       for t in tensors):
            problem = f"created as {tensors[0].dtype}"
        elif any(t.device != self.device for t in tensors):
            problem = f"a tensor on {next(t.device for t in tensors if t.device != self.device)}"
        if problem is not None:
            where = next(f for f in reversed(traceback.extract_stack())
                         if "/fednorm/" in f.filename)  # the package's line that called
            self.found.append(f"{getattr(func, '__name__', func)}: {problem} in a "
                              f"{self.dtype} bundle on {self.device} "
                              f"({where.filename.rsplit('/src/', 1)[-1]}:{where.lineno}: "
                              f"{where.line})")
        return out


def guarded(found: list[str]):
    """make_trainer whose trainers run each round under a Guard of their parameters' device
    and dtype, its findings appended to ``found``."""
    def make(*args, **kwargs):
        trainer = MAKE_TRAINER(*args, **kwargs)
        first = next(iter(trainer.state.params.values()))
        round_ = trainer.round

        def checked(step):
            guard = Guard(first.device, first.dtype)
            with guard:
                loss = round_(step)
            found.extend(guard.found)
            return loss

        trainer.round = checked
        return trainer

    return make


CASES = {f"{mode}-{n}": dict(normalizer=n, local_steps=E)
         for n in ("bn", "fbn", "fixbn", "gn", "fedtan", "hybridbn")
         for mode, E in (("dsgd", 1), ("fedavg-E2", 2))}


@pytest.mark.parametrize("shared", CASES.values(), ids=CASES.keys())
def test_the_hot_path_creates_tensors_on_the_bundle_s_device_and_dtype(shared, monkeypatch):
    found: list[str] = []
    monkeypatch.setattr(training, "make_trainer", guarded(found))
    results = train_bundle(members(**shared, steps=4), DATA64)
    assert [r.status for r in results] == ["ok"] * 3
    assert sorted(set(found)) == []
