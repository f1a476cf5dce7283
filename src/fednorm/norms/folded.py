"""Per-client BatchNorm on the CPU: ATen's fused batch norm with the clients folded into the
channels (docs/speed.md, "The CPU's rate").

:class:`~fednorm.norms.layer.GroupedBatchNorm` normalizes each client's batch with elementwise
operators on the grouped input as it is: few operators to launch on a GPU (and a CUDA graph
of them), but on a CPU seven passes over the activation forward and backward, and under vmap
the Python cost of a generated batching rule at every call. :class:`FoldedBatchNorm` computes
the same function (the same outputs: y, each client's mean and biased variance) with ATen's
fused CPU kernels, ``native_batch_norm`` and ``native_batch_norm_backward``, two or three
passes each: every lane of vmap (a client of FedAvg's vmap over the (run, client) pairs, a run
of DSGD's vmap over runs) is folded into the channels, (N, L, C, ...) -> (N, L*C, ...), which
is a view of the layout a vmapped convolution leaves (its batch dimension next to the
channels), and each of a grouped input's g clients (DSGD's n clients in one forward) is one
call on its own contiguous rows. Its batching rules (``vmap`` staticmethods) are written, not
generated. The layer (:meth:`FedBatchNorm2d._own_batch_norm`) takes it for CPU tensors;
CUDA keeps GroupedBatchNorm (:func:`folded_on`).

The same values as GroupedBatchNorm up to rounding (ATen's sums in another order, the
variance from ATen's inverse standard deviation): tests/norms/test_folded.py, and every
method trained both ways in float64, tests/fl/test_cpu_path.py.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fednorm.scoped import Scoped

# Whether CPU tensors take FoldedBatchNorm (True) or the GPU's GroupedBatchNorm (False): the
# tests' switch to train the GPU's path on the CPU
_FOLDED: Scoped[bool] = Scoped(True)


def folded_on(x: Tensor) -> bool:
    """Whether a per-client BatchNorm of ``x`` takes :class:`FoldedBatchNorm`: on the CPU, out
    of torch.compile (whose graph of the vmapped step keeps GroupedBatchNorm's formula). Read
    from the tensor's device, host metadata: nothing is synchronized."""
    return x.device.type == "cpu" and _FOLDED.get() and not torch.compiler.is_compiling()


def gpu_path() -> Any:
    """``with gpu_path():`` per-client BatchNorm takes the GPU's GroupedBatchNorm on the CPU
    too (the float64 tests of the two paths' equality)."""
    return _FOLDED.bound(False)


# The core, on tensors with the lanes already folded into the channels: x (G, N, K, *spatial)
# for G groups of K channels, each group normalized over (N, *spatial) per channel


def _bn_groups(x: Tensor, weight: Tensor, bias: Tensor, eps: float
               ) -> tuple[Tensor, Tensor, Tensor]:
    """(y like x, mean (G, K), inverse std (G, K)): each group's training-mode BatchNorm,
    one fused call a group."""
    if x.shape[0] == 1:
        y, mean, invstd = torch.native_batch_norm(x[0], weight, bias, None, None, True, 0.0,
                                                  eps)
        return y.unsqueeze(0), mean.unsqueeze(0), invstd.unsqueeze(0)
    G, K = x.shape[0], x.shape[2]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean, invstd = x.new_empty(G, K), x.new_empty(G, K)
    with torch.no_grad():  # (differentiated by FoldedBatchNorm, not by its operators)
        for i in range(G):  # each group's rows are contiguous
            torch.ops.aten.native_batch_norm.out(x[i], weight, bias, None, None, True, 0.0,
                                                 eps,
                                                 out=y[i], save_mean=mean[i],
                                                 save_invstd=invstd[i])
    return y, mean, invstd


def _bn_groups_backward(dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor, invstd: Tensor,
                        eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(dx like x, dweight (K,), dbias (K,)) of :func:`_bn_groups`, the affine parameters'
    gradients summed over the groups."""
    outs = [torch.ops.aten.native_batch_norm_backward(dy[i], x[i], weight, None, None, mean[i],
                                                      invstd[i], True, eps, [True, True, True])
            for i in range(x.shape[0])]
    if len(outs) == 1:
        dx, dw, db = outs[0]
        return dx.unsqueeze(0), dw, db
    dx = torch.stack([o[0] for o in outs])
    return dx, torch.stack([o[1] for o in outs]).sum(0), torch.stack([o[2] for o in outs]).sum(0)


# Lanes: vmap's batch dimension moved to the front, (L, [g,] N, C, *spatial), folded into the
# channels as (g, N, L*C, *spatial), and back


def _lanes_first(t: Tensor | None, bdim: int | None, lanes: int) -> Tensor:
    """``t`` with its lane dimension first (expanded when vmap left it unbatched)."""
    if bdim is None:
        return t.unsqueeze(0).expand(lanes, *t.shape)
    return t.movedim(bdim, 0)


def _fold(x: Tensor, grouped: bool) -> Tensor:
    """(L, [g,] N, C, *sp) -> (g, N, L*C, *sp): a view where the layout allows (a vmapped
    convolution's output), else a copy."""
    if not grouped:
        x = x.unsqueeze(1)
    L, g, N, C, *sp = x.shape
    return x.permute(1, 2, 0, *range(3, x.dim())).reshape(g, N, L * C, *sp)


def _unfold(y: Tensor, lanes: int, grouped: bool) -> Tensor:
    """(g, N, L*C, *sp) -> (L, [g,] N, C, *sp), a view."""
    g, N, K, *sp = y.shape
    y = y.view(g, N, lanes, K // lanes, *sp).permute(2, 0, 1, *range(3, y.dim() + 1))
    return y if grouped else y.squeeze(1)


def _stats_fold(s: Tensor) -> Tensor:
    """Statistics (L, g, C) -> (g, L*C)."""
    L, g, C = s.shape
    return s.transpose(0, 1).reshape(g, L * C)


def _stats_unfold(s: Tensor, lanes: int) -> Tensor:
    """(g, L*C) -> (L, g, C), a view."""
    return s.view(s.shape[0], lanes, -1).transpose(0, 1)


def _lanes_of(in_dims: tuple, args: tuple) -> int:
    return next(a.shape[d] for a, d in zip(args, in_dims, strict=False) if d is not None)


class FoldedBatchNorm(torch.autograd.Function):
    """Training-mode BatchNorm of each group (client) of x (g, b, C, *spatial) with its own
    batch statistics, or of x (N, C, *spatial) as one group (not ``grouped``): the function
    of :class:`~fednorm.norms.layer.GroupedBatchNorm`, by ATen's fused CPU kernels. Returns
    (y, mean, biased variance, mean, inverse std), the statistics (g, C) as data."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor, eps: float, grouped: bool = True
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        y, mean, invstd = _bn_groups(x if grouped else x.unsqueeze(0), weight, bias, eps)
        return (y if grouped else y.squeeze(0)), mean, _variance(invstd, eps), invstd

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, weight, _, eps, grouped = inputs
        _, mean, var, invstd = output
        ctx.mark_non_differentiable(mean, var, invstd)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.eps, ctx.grouped = eps, grouped

    @staticmethod
    def backward(ctx: Any, dy: Tensor | None, *_: Tensor) -> tuple:
        if dy is None:
            return None, None, None, None, None
        x, weight, mean, invstd = ctx.saved_tensors
        dx, dw, db = FoldedBatchNormBackward.apply(dy, x, weight, mean, invstd, ctx.eps,
                                                   ctx.grouped)
        return dx, dw, db, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: Tensor, weight: Tensor, bias: Tensor, eps: float,
             grouped: bool = True) -> tuple[tuple, tuple]:
        L = info.batch_size
        xf = _fold(_lanes_first(x, in_dims[0], L), grouped)
        w = _lanes_first(weight, in_dims[1], L).reshape(-1)
        b = _lanes_first(bias, in_dims[2], L).reshape(-1)
        y, mean, invstd = _bn_groups(xf, w, b, eps)
        mean, invstd = _stats_unfold(mean, L), _stats_unfold(invstd, L)
        return ((_unfold(y, L, grouped), mean, _variance(invstd, eps), invstd),
                (0, 0, 0, 0))


class FoldedBatchNormBackward(torch.autograd.Function):
    """(dx, dweight, dbias) of :class:`FoldedBatchNorm` (not differentiated again)."""

    @staticmethod
    def forward(dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor, invstd: Tensor,
                eps: float, grouped: bool) -> tuple[Tensor, Tensor, Tensor]:
        if not grouped:
            dy, x = dy.unsqueeze(0), x.unsqueeze(0)
        dx, dw, db = _bn_groups_backward(dy, x, weight, mean, invstd, eps)
        return (dx if grouped else dx.squeeze(0)), dw, db

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple:
        raise RuntimeError("FoldedBatchNorm's backward is not differentiated")

    @staticmethod
    def vmap(info: Any, in_dims: tuple, dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor,
             invstd: Tensor, eps: float, grouped: bool) -> tuple[tuple, tuple]:
        L = info.batch_size
        dyf = _fold(_lanes_first(dy, in_dims[0], L), grouped)
        xf = _fold(_lanes_first(x, in_dims[1], L), grouped)
        w = _lanes_first(weight, in_dims[2], L).reshape(-1)
        mean = _stats_fold(_lanes_first(mean, in_dims[3], L))
        invstd = _stats_fold(_lanes_first(invstd, in_dims[4], L))
        dx, dw, db = _bn_groups_backward(dyf, xf, w, mean, invstd, eps)
        return (_unfold(dx, L, grouped), dw.view(L, -1), db.view(L, -1)), (0, 0, 0)


def _variance(invstd: Tensor, eps: float) -> Tensor:
    """The biased variance from ATen's inverse standard deviation, 1 / sqrt(var + eps)."""
    return torch.reciprocal(invstd * invstd) - eps


# Above this many values of an activation, all lanes together, FoldedBatchNorm's fewer passes
# pay for its Python cost under functorch (about 1.5 ms a call); below it, ATen's own batching
# rule of native_batch_norm (the affine part and its gradients as extra elementwise passes, in
# C++) is faster (docs/speed.md, "The CPU's rate")
FOLD_ABOVE = 1 << 19


def _values(x: Tensor) -> int:
    """Values of ``x`` with every functorch wrapper (vmap's lanes, grad's) unwrapped: the
    activation of all lanes together. Host metadata."""
    f = torch._C._functorch
    while f.is_gradtrackingtensor(x) or f.is_batchedtensor(x) or f.is_functionaltensor(x):
        x = f.get_unwrapped(x)
    return x.numel()


def cpu_batch_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float, grouped: bool
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """Per-client BatchNorm on the CPU, as FedBatchNorm2d._own_batch_norm returns it: (y,
    mean, biased variance), the statistics (g, C) as data (g = 1 if not ``grouped``). Large
    activations: :class:`FoldedBatchNorm`; small ones: ``native_batch_norm`` of each group
    (one call, or g calls and a stack), whose autograd and batching rules are ATen's."""
    if _values(x) >= FOLD_ABOVE:
        y, mean, var, _ = FoldedBatchNorm.apply(x, weight, bias, eps, grouped)
        return y, mean, var
    outs = [torch.native_batch_norm(xi, weight, bias, None, None, True, 0.0, eps)
            for xi in (x.unbind(0) if grouped else (x,))]
    y = torch.stack([o[0] for o in outs]) if grouped else outs[0][0]
    mean = torch.stack([o[1] for o in outs]).detach()
    invstd = torch.stack([o[2] for o in outs]).detach()
    return y, mean, _variance(invstd, eps)
