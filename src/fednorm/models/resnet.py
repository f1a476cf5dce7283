"""ResNet-20 for CIFAR (He et al. 2016, §4.2) with option-A (parameter-free) shortcuts.

Three stages of three basic blocks (widths w, 2w, 4w; w = 16 is the standard network with
269,722 parameters, BN affine included). Option A: when a block halves the resolution and
doubles the width, the shortcut subsamples by 2 and pads the new channels with zeros.
``conv`` is the convolution class (``nn.Conv2d``; ``WSConv2d`` for GN+WS, fednorm.norms); the
convs carry a bias only where the norm has no offset (``conv_bias``: none, FedWon).

Normalization-free residuals (``residual_alpha``, FedWon's ResNet-20; Brock et al. 2021a,
"Characterizing Signal Propagation to Close the Performance Gap in Unnormalized ResNets", §4):
without a normalizer a plain residual sum x + f(x) with a variance-preserving f (scaled WS)
doubles the signal's variance at every block, 2^9 after nine. NF-ResNets instead compute

    h_{i+1} = h_i + alpha * f_i(h_i / beta_i),   beta_i = sqrt(Var(h_i)) (its expected value),

with f_i pre-activated (relu first; the scaled WS's gamma assumes a ReLU of unit Gaussians in
front of every conv), so Var(h_{i+1}) = Var(h_i) + alpha^2; a transition block (stride 2, more
channels) takes its shortcut from h_i / beta_i too, so its output's expected variance is reset
to 1 + alpha^2. The expected variance starts at 1 after the stem. alpha = 0.2 as in Brock et
al. (FedWon's text names scaled WS and AGC only; its code was not reachable here). Option-A
shortcuts keep that reset honest for the original channels; the zero-padded ones carry alpha^2
alone, so beta is an upper bound there (the signal shrinks a little, never grows). The stages
end with a ReLU (the blocks end with a sum, as in pre-activation ResNets).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fednorm.norms import feature_normalization


def option_a_shortcut(x: Tensor, stride: int, pad: int) -> Tensor:
    """Option A: subsample by ``stride`` and pad ``pad`` zero channels (half on each side)."""
    if stride == 1 and pad == 0:
        return x
    x = x[:, :, ::stride, ::stride]
    return F.pad(x, (0, 0, 0, 0, pad // 2, pad - pad // 2))


class BasicBlock(nn.Module):
    def __init__(
        self, c_in: int, c_out: int, stride: int, norm: Callable[[int], nn.Module],
        conv: Callable[..., nn.Conv2d] = nn.Conv2d, bias: bool = False,
    ) -> None:
        super().__init__()
        self.conv1 = conv(c_in, c_out, 3, stride=stride, padding=1, bias=bias)
        self.norm1 = norm(c_out)
        self.conv2 = conv(c_out, c_out, 3, padding=1, bias=bias)
        self.norm2 = norm(c_out)
        self.stride = stride
        self.pad = c_out - c_in

    def shortcut(self, x: Tensor) -> Tensor:
        return option_a_shortcut(x, self.stride, self.pad)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class NFBasicBlock(nn.Module):
    """A normalization-free basic block: x / beta -> relu -> conv1 -> relu -> conv2, times
    alpha, plus the shortcut (of x / beta in a transition block, of x otherwise)."""

    def __init__(self, c_in: int, c_out: int, stride: int, conv: Callable[..., nn.Conv2d],
                 alpha: float, beta: float, bias: bool = False) -> None:
        super().__init__()
        self.conv1 = conv(c_in, c_out, 3, stride=stride, padding=1, bias=bias)
        self.conv2 = conv(c_out, c_out, 3, padding=1, bias=bias)
        self.stride, self.pad, self.alpha, self.beta = stride, c_out - c_in, alpha, beta
        self.transition = stride != 1 or c_out != c_in

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta:.4f}, transition={self.transition}"

    def forward(self, x: Tensor) -> Tensor:
        scaled = x / self.beta
        branch = self.conv2(F.relu(self.conv1(F.relu(scaled))))
        skip = option_a_shortcut(scaled if self.transition else x, self.stride, self.pad)
        return skip + self.alpha * branch


def expected_variances(transitions: list[bool], alpha: float) -> list[float]:
    """Each NF block's expected input variance (beta^2), from 1 after the stem: + alpha^2
    per block, reset to 1 + alpha^2 after a transition block."""
    out, var = [], 1.0
    for transition in transitions:
        out.append(var)
        var = 1.0 + alpha**2 if transition else var + alpha**2
    return out


class ResNet20(nn.Module):
    def __init__(
        self,
        norm: Callable[[int], nn.Module],
        width: int = 16,
        n_classes: int = 10,
        in_channels: int = 3,
        blocks_per_stage: int = 3,
        conv: Callable[..., nn.Conv2d] = nn.Conv2d,
        feature_norm: bool | str = False,
        residual_alpha: float | None = None,
        conv_bias: bool = False,
    ) -> None:
        """``residual_alpha``: None, post-activation blocks with ``norm`` (He et al.); a
        number, normalization-free blocks (:class:`NFBasicBlock`, ``norm`` unused in them).
        ``conv_bias``: every conv carries a bias (when ``norm`` has no offset: none, FedWon)."""
        super().__init__()
        self.stem = nn.Sequential(
            conv(in_channels, width, 3, padding=1, bias=conv_bias), norm(width), nn.ReLU()
        )
        shapes = []  # (c_in, c_out, stride) of each block
        c_in = width
        for stage, c_out in enumerate((width, 2 * width, 4 * width)):
            for block in range(blocks_per_stage):
                shapes.append((c_in, c_out, 2 if stage > 0 and block == 0 else 1))
                c_in = c_out
        layers: list[nn.Module]
        if residual_alpha is None:
            layers = [BasicBlock(i, o, s, norm, conv, conv_bias) for i, o, s in shapes]
        else:
            variances = expected_variances([s != 1 or o != i for i, o, s in shapes],
                                           residual_alpha)
            layers = [NFBasicBlock(i, o, s, conv, residual_alpha, math.sqrt(v), conv_bias)
                      for (i, o, s), v in zip(shapes, variances, strict=True)]
            layers.append(nn.ReLU())  # the blocks end with a sum
        self.stages = nn.Sequential(*layers)
        self.feature_norm = nn.Sequential(*feature_normalization(feature_norm))  # FedFN
        self.head = nn.Linear(c_in, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stages(self.stem(x))
        return torch.log_softmax(self.head(self.feature_norm(x.mean(dim=(2, 3)))), dim=1)
