"""The engine's gradient step under torch.compile (``make_trainer(..., compile=...)``,
:meth:`fednorm.fl.trainer.Trainer.gradient_step`): one graph (``fullgraph``: a graph break is
an error, such as a ``contextvars.ContextVar`` set inside the forward pass, which made the
whole step run eagerly), built once and reused every round, and the same training as the
eager step in float64 (compiled kernels sum in another order: ~1e-15, where a wrong capture
of a round-dependent value, a step's key or a rule, would differ at order 1)."""

from __future__ import annotations

import pytest
import torch

from fednorm.fl.build import build as bundle
from fednorm.scoped import Scoped
from tests.fl.test_bundle import DATA64, small


def test_scoped_values_nest_and_restore():
    value = Scoped("outside")
    with value.bound("a"):
        with value.bound("b"):
            assert value.get() == "b"
        assert value.get() == "a"
        with pytest.raises(KeyError), value.bound("c"):
            raise KeyError
        assert value.get() == "a"
    assert value.get() == "outside"


# The oldest torch seen to trace the step whole; torch 2.4.1 stops at the layers' context (a
# `with` on a user object; a contextlib generator; functional_call passed as a value)
TRACES = torch.__version__ >= "2.14"


@pytest.mark.skipif(not TRACES, reason="torch.compile traces the engine's step from torch 2.14")
@pytest.mark.parametrize("local_steps", [1, 2], ids=["dsgd", "fedavg-E2"])
def test_a_compiled_step_is_one_graph_and_trains_as_the_eager_one(local_steps):
    """Dynamo's capture, run by a backend that counts the graphs and runs them as captured
    (inductor's code generation, PyTorch's own, would cost a minute of this suite)."""
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    cfgs = [small(normalizer="bn", local_steps=local_steps, steps=6, seed=s,
                  lr=[0.05 + 0.01 * s]) for s in (0, 1)]
    eager, compiled = bundle(cfgs, DATA64), bundle(cfgs, DATA64, compile={"backend": counting})
    for r in range(3):
        torch.testing.assert_close(compiled.round(local_steps * r),
                                   eager.round(local_steps * r), rtol=1e-9, atol=1e-12)
    assert len(graphs) == 1  # traced once, replayed in every step of every round
    for name, want in {**eager.state.params, **eager.state.stats}.items():
        got = {**compiled.state.params, **compiled.state.stats}[name]
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, msg=name)
