"""execution.precision (fednorm.fl.precision): float32 is what training was before the key;
bf16 autocasts the gradient steps' convolutions on the CPU as on CUDA, which moves the loss,
while the state (parameters, momenta, statistics) and the reports the server aggregates stay
float32; tf32 sets CUDA's flags for the block alone; a bad value names the key and the
allowed ones."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fednorm.config import ConfigError, run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.buffers import per_client
from fednorm.fl.build import build as bundle
from fednorm.fl.precision import job_math
from fednorm.fl.train import train_bundle
from fednorm.plan.jobs import load_execution
from fednorm.run import train_and_write

DATA = colour_classes(n_train=120, n_test=40, image_size=8, seed=0)


def small(**overrides):
    values = dict(
        dataset="synthetic", n_train=120, n_test=40, image_size=8, model="fbn_cnn", width=4,
        hidden=8, dropout=0.25, normalizer="fbn", n_clients=5, partition="gamma",
        heterogeneity=0.0, batch_size=4, steps=4, lr=[0.05], lr_milestones=[], momentum=0.9,
        eval_every=2, seed=0)
    return run_config({**values, **overrides})


class ConvolutionDtypes(TorchDispatchMode):
    """The dtypes of every convolution's output (forward) dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.convolution.default:
            self.dtypes.add(out.dtype)
        return out


def trainer_for(cfgs, precision):
    """A bundle's trainer under ``precision``'s autocast (the GPU check's builder)."""
    return bundle(cfgs, DATA, precision=precision)


# DSGD's fused step and FedAvg's clients; FBN (normalized with the running statistics) and BN
# (batch_norm on each client's batch, in float32 under autocast: fednorm.norms.layer)
@pytest.mark.parametrize(("normalizer", "local_steps"),
                         [("fbn", 1), ("fbn", 2), ("bn", 1), ("bn", 2)])
def test_bf16_convolves_in_bfloat16_and_keeps_the_state_float32(normalizer, local_steps):
    cfgs = [small(local_steps=local_steps, normalizer=normalizer),
            small(local_steps=local_steps, normalizer=normalizer, seed=1)]
    losses, convolved = {}, {}
    for precision in ("float32", "bf16"):
        trainer = trainer_for(cfgs, precision)
        with ConvolutionDtypes() as seen:
            losses[precision] = torch.stack([trainer.round(local_steps * k) for k in range(2)])
        convolved[precision] = seen.dtypes
        state = trainer.state
        for group in (state.params, state.momenta, state.stats):
            assert {t.dtype for t in group.values()} == {torch.float32}
        assert losses[precision].dtype == torch.float32
    assert convolved == {"float32": {torch.float32}, "bf16": {torch.bfloat16}}
    # bfloat16's 8-bit mantissa moves the loss, by little
    assert not torch.equal(losses["bf16"], losses["float32"])
    assert torch.allclose(losses["bf16"], losses["float32"], rtol=0.05)


def test_the_bfloat16_steps_gradients_and_reports_are_float32():
    """The clients' reports, as the gradient step returns them to the server, are float32."""
    cfgs = [small(local_steps=2)]
    trainer = trainer_for(cfgs, "bf16")
    trainer.round(0)
    (step,) = trainer._steps.values()
    x, y = trainer.batches.sample(0)
    R, n, b = 1, cfgs[0].n_clients, cfgs[0].batch_size
    # the step's inputs as the engine hands them over: every client of every run flattened
    params = {k: per_client(p, n).flatten(0, 1) for k, p in trainer.state.params.items()}
    stats = {k: per_client(s, n).flatten(0, 1) for k, s in trainer.state.stats.items()}
    grads, (loss, reports, _) = step(params, stats, x.reshape(R * n, b, *x.shape[2:]),
                                     y.reshape(R * n, b), trainer._client_keys(None))
    assert {g.dtype for g in grads.values()} == {torch.float32}
    assert reports and {t.dtype for pair in reports.values() for t in pair} == {torch.float32}
    assert loss.dtype == torch.float32


def test_float32_is_bit_equal_to_no_precision_key(tmp_path):
    """A bundle written under precision float32 is byte for byte the one written without the
    key, and its run.json records the arithmetic: float32, TF32 off, no autocast."""
    cfgs = [small(), small(seed=1)]
    train_and_write(cfgs, [tmp_path / "a0", tmp_path / "a1"], device="cpu")
    train_and_write(cfgs, [tmp_path / "b0", tmp_path / "b1"], device="cpu", precision="float32")
    for a, b in (("a0", "b0"), ("a1", "b1")):
        for name in ("metrics.csv", "norm_error.csv"):
            assert (tmp_path / a / name).read_bytes() == (tmp_path / b / name).read_bytes()
    math = json.loads((tmp_path / "b0/run.json").read_text())["math"]
    assert math == {"precision": "float32", "matmul_tf32": False, "cudnn_tf32": False,
                    "autocast": None, "cuda_graph": "off"}


def test_bf16_is_recorded_and_its_metrics_differ(tmp_path):
    cfgs = [small()]
    train_and_write(cfgs, [tmp_path / "a"], device="cpu")
    train_and_write(cfgs, [tmp_path / "b"], device="cpu", precision="bf16", cuda_graph="off")
    meta = json.loads((tmp_path / "b/run.json").read_text())
    assert meta["math"] == {"precision": "bf16", "matmul_tf32": False, "cudnn_tf32": False,
                            "autocast": "bfloat16", "cuda_graph": "off"}
    assert (tmp_path / "a/metrics.csv").read_bytes() != (tmp_path / "b/metrics.csv").read_bytes()


def test_tf32_sets_cudas_flags_within_the_block_and_restores_them():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = matmul.allow_tf32, cudnn.allow_tf32
    with job_math("tf32") as flags:
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, True)
        assert flags["matmul_tf32"] and flags["cudnn_tf32"] and flags["autocast"] is None
    with job_math("float32"):
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (False, False)
    assert (matmul.allow_tf32, cudnn.allow_tf32) == before


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("precision", "fp16", "one of ['float32', 'tf32', 'bf16']"),
    ("precision", 32, "one of ['float32', 'tf32', 'bf16']"),
    ("cuda_graph", "on", "one of ['auto', 'off']"),
    ("jobs_per_gpu", 0, "an integer >= 1"),
    ("jobs_per_gpu", 1.5, "an integer >= 1"),
])
def test_a_bad_execution_value_names_the_key_and_what_is_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        load_execution({key: value})
    assert f"execution: key '{key}' has value {value!r}; allowed: {allowed}" in str(err.value)


def test_the_defaults_are_float32_eager_and_one_job_a_gpu():
    """cuda_graph off until a GPU run shows the graphed step equal to the eager one bit for
    bit (benchmarks/gpu/run.sh measures it)."""
    execution = load_execution({})
    assert execution.job_keys == {"precision": "float32", "cuda_graph": "off",
                                  "jobs_per_gpu": 1}
    with pytest.raises(ValueError, match="precision 'fp16'; allowed: one of"):
        train_bundle([small()], DATA, precision="fp16")
