"""The engine on a CUDA device (``pytest -m cuda``; skipped without one; ``make gpu-check``
runs them on a lent GPU). The CPU tests' facts, on CUDA, with their helpers and cases:

- each run of a bundle equals the run alone, in float64 (tests/fl/test_bundle.py);
- a run trained on CUDA equals the same run on the CPU to 1e-9 over 20 steps, in float64: the
  counter-based randomness (fednorm.rng) draws the same batches, crops and masks on both;
- a killed bundle resumes bit-identical (tests/fl/test_resume.py), with cuDNN's deterministic
  algorithms;
- a real out-of-memory error (the allocator capped with
  ``torch.cuda.set_per_process_memory_fraction``) splits the bundle and every run equals
  itself alone (tests/fl/test_memory.py simulates the error on a CPU).
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import test_resume
import torch
from test_bundle import CASES, DATA64, assert_same_run, members, small
from test_resume import KillAt, Killed, assert_identical

from fednorm.data.synthetic import colour_classes
from fednorm.fl import memory
from fednorm.fl.resume import ResumeStore
from fednorm.fl.train import train, train_bundle

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.filterwarnings("error:There is a performance drop"),  # as test_bundle.py
]
CUDA = "cuda"
# the main normalizers, DSGD and FedAvg, attacks, augmentation, ResNets, partial participation
BUNDLED = ["dsgd-bn", "dsgd-fbn", "dsgd-fixbn", "dsgd-gn", "fedavg-E2-bn", "fedavg-E2-fbn",
           "fedavg-E2-fixbn", "fedavg-E2-gn", "fedavg-E2-fixup", "bn-sf-median-nnm",
           "lenet-dsgd-fbn-crop-flip", "resnet18-fedavg-E2-fixbn-resized-crop-participation",
           "dsgd-hybridbn", "fedavg-E2-fedwon"]


@pytest.mark.parametrize("case", BUNDLED)
def test_each_run_of_a_cuda_bundle_gets_what_it_gets_alone(case):
    cfgs = members(**CASES[case])
    for cfg, result in zip(cfgs, train_bundle(cfgs, DATA64, CUDA), strict=True):
        assert result.status == "ok"
        assert_same_run(result, train(cfg, DATA64, CUDA))


@pytest.mark.parametrize("case", ["dsgd-fbn", "fedavg-E2-bn", "lenet-dsgd-fbn-crop-flip",
                                  "fedavg-E2-gn", "fbn-first-batch-crop-flip"])
def test_a_run_on_cuda_equals_the_run_on_the_cpu_in_float64(case):
    cfg = small(**{**CASES[case], "steps": 20, "eval_every": 10})
    on_cuda = train(cfg, DATA64, CUDA)
    on_cuda.model.cpu()
    assert_same_run(on_cuda, train(cfg, DATA64, "cpu"))


@pytest.fixture
def deterministic():
    """cuDNN's deterministic algorithms (a bundle's resume is bit-identical only with them:
    its default may pick an algorithm per call that sums in another order)."""
    saved = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.are_deterministic_algorithms_enabled())
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[:2]
    torch.use_deterministic_algorithms(saved[2])


@pytest.mark.parametrize(("case", "at"), [("dsgd-fbn", 2), ("fedavg-E2-bn-momenta", 4),
                                          ("fixbn-freeze-both", 4), ("fedtan-E2", 2)])
def test_a_killed_cuda_bundle_resumes_bit_identical(case, at, tmp_path, deterministic):
    cfgs = test_resume.members(**test_resume.CASES[case])
    data = test_resume.DATA
    want = train_bundle(cfgs, data, CUDA)
    path = tmp_path / "bundle.pt"
    with pytest.raises(Killed):
        train_bundle(cfgs, data, CUDA, resume=KillAt(path, at=at))
    assert path.exists()
    assert_identical(train_bundle(cfgs, data, CUDA, resume=ResumeStore(path)), want)


def test_a_real_cuda_out_of_memory_splits_the_bundle_and_each_run_equals_itself_alone(caplog):
    """Four runs of about 100 MB each (FedAvg, 5 clients x 16 images of 32x32, width 16, in
    float64); the allocator capped at what holds three: the bundle fails its first round with
    CUDA's own OutOfMemoryError, is split, and each run equals the run alone."""
    data = colour_classes(n_train=400, n_test=40, image_size=32, seed=0)
    data = dataclasses.replace(data, train_x=data.train_x.double(), test_x=data.test_x.double())
    base = small(n_train=400, image_size=32, width=16, batch_size=16, normalizer="bn",
                 local_steps=2, steps=4)
    cfgs = [dataclasses.replace(base, seed=s) for s in range(4)]
    alone = [train(c, data, CUDA) for c in cfgs]
    device = torch.device(CUDA)
    index = torch.cuda.current_device() if device.index is None else device.index
    footprint = memory.measure(cfgs, data, device)
    assert footprint is not None and footprint.per_run > 20 * 2**20, footprint
    torch.cuda.empty_cache()
    allowed = torch.cuda.memory_allocated(device) + footprint.fixed + 3 * footprint.per_run
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(allowed / total, index)
    try:
        with caplog.at_level(logging.WARNING, logger="fednorm.train"):
            got = train_bundle(cfgs, data, CUDA)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
    assert any("4 runs together do not fit the memory of cuda" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    for result, want in zip(got, alone, strict=True):
        assert_same_run(result, want)
