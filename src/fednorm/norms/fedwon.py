"""FedWon (Zhuang & Lyu, ICLR 2024, "FedWon: Triumphing Multi-domain Federated Learning Without
Normalization"): no layer normalizes (identities in the models' norm slots), every convolution
is a scaled weight-standardized one (fednorm.norms.per_sample.ScaledWSConv2d, with the
NF-ResNets' residual scaling alpha), and a client steps with adaptive gradient clipping (Brock
et al. 2021, §4.1, Eq. 3): every parameter but the classifier's (the model's last nn.Linear,
selected by type), unit-wise per output unit, every run and client on its own, before the
momentum step. The clipping is the method's gradient hook, so it runs inside the captured
local step; it needs each client's own gradient, so FedWon trains on the per-client path.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from fednorm.config import RunConfig
from fednorm.norms.hooks import Hooks
from fednorm.norms.per_sample import RELU_GAIN, ScaledWSConv2d

# Brock et al. 2021a, §4: the residual branches' scale in NF-ResNets (their default, 0.2).
NF_ALPHA = 0.2


def layers(cfg: RunConfig) -> dict:
    """FedWon's models: identities for norms, scaled WS convolutions, NF residual scaling;
    its clipping as the gradient hook."""
    gain = RELU_GAIN if cfg.fedwon_ws_gain == "relu" else 1.0
    return dict(make_layer=lambda channels: nn.Identity(), residual_alpha=NF_ALPHA,
                conv=partial(ScaledWSConv2d, gamma=gain),
                hooks=AdaptiveClipping(cfg.agc_lambda, cfg.agc_unit == "vector"))


class AdaptiveClipping(Hooks):
    """The gradient hook: :func:`adaptive_clip` of every parameter but the classifier's, with
    ``lam`` (None: no clipping); a vector (bias, gain) one unit (``vector``, as in Brock et
    al.'s code) or each element its own."""

    def __init__(self, lam: float | None, vector: bool = True) -> None:
        self.lam, self.vector = lam, vector
        self.unit_dims: dict[str, int] = {}
        self.classifier: set[str] = set()

    @property
    def per_client(self) -> bool:  # each client's own gradient, clipped by itself
        return self.lam is not None

    def bind(self, model: nn.Module, batches: Any) -> AdaptiveClipping:
        bound = AdaptiveClipping(self.lam, self.vector)
        # each parameter's unit: all dimensions but its first (a vector: one unit, or each
        # element); the classifier's parameters, never clipped
        bound.unit_dims = {name: max(p.dim() - 1, int(self.vector))
                           for name, p in model.named_parameters()}
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        bound.classifier = ({f"{name}.{p}" for name, m in model.named_modules()
                             if m is linears[-1] for p, _ in m.named_parameters(recurse=False)}
                            if linears else set())
        return bound

    def grads(self, grads: dict[str, Tensor], params: dict[str, Tensor], names: list[str]
              ) -> dict[str, Tensor]:
        if self.lam is None:
            return {k: grads[k] for k in names}
        return {k: adaptive_clip(grads[k], params[k], self.lam, self.unit_dims[k])
                if k not in self.classifier else grads[k] for k in names}


AGC_EPS = 1e-3  # Brock et al. (2021), §4.1: the floor of a unit's weight norm (its epsilon)


@torch.no_grad()
def adaptive_clip(grad: Tensor, weight: Tensor, lam: float, unit_dims: int) -> Tensor:
    """Adaptive gradient clipping (Brock et al. 2021, "High-Performance Large-Scale Image
    Recognition Without Normalization", §4.1, Eq. 3), unit-wise: for each unit i (an output
    channel of a conv, a row of a linear layer, one element of a vector),

        G_i <- lam * max(||W_i||, eps) / ||G_i|| * G_i   if ||G_i|| / max(||W_i||, eps) > lam,

    else unchanged, with Frobenius norms over the unit's ``unit_dims`` trailing dimensions
    (0: each element its own unit) and eps = AGC_EPS. Any leading dimensions (runs, clients)
    are units' batches: each is clipped on its own."""
    dims = tuple(range(grad.dim() - unit_dims, grad.dim()))
    g_norm = torch.linalg.vector_norm(grad, dim=dims, keepdim=True) if dims else grad.abs()
    w_norm = (torch.linalg.vector_norm(weight, dim=dims, keepdim=True) if dims
              else weight.abs()).clamp_min(AGC_EPS)
    limit = lam * w_norm
    return torch.where(g_norm > limit, grad * (limit / g_norm.clamp_min(1e-30)), grad)
