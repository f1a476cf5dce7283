"""Normalizers without batch statistics: LayerNorm, InstanceNorm and Weight Standardization.

Each of these normalizes one sample at a time (or a weight tensor), so a client computes the
same thing alone, in a fused DSGD pass over all clients, under ``vmap`` or at test time: there
are no statistics to report, aggregate or keep, and no training/test mismatch. They are pure
functions of (parameters, input) and hold no buffers.

- :class:`LayerNorm2d` (Ba et al. 2016): per sample over (C, H, W), with a per-channel affine
  (weight, bias of shape (C,)), as GroupNorm with one group (Wu & He 2018, §3.1); note that
  ``nn.LayerNorm((C, H, W))`` has an element-wise affine (C·H·W values) instead.
- :class:`InstanceNorm2d` (Ulyanov et al. 2016): per sample and channel over (H, W), affine;
  GroupNorm with one channel per group. Unlike ``nn.InstanceNorm2d`` it keeps no running
  statistics: test time normalizes each image with its own, as training does.
- :class:`WSConv2d` (Qiao et al. 2019, "Micro-Batch Training with Batch-Channel Normalization
  and Weight Standardization"): a convolution whose weight is standardized per output channel
  at every forward, W_hat = (W - mean) / sqrt(var + eps) over (in, kh, kw) (biased variance, as
  the paper's 1/I), before convolving; the stored parameter stays unstandardized.
- :class:`ScaledWSConv2d` (Brock et al. 2021a, "Characterizing Signal Propagation to Close the
  Performance Gap in Unnormalized ResNets", §4, Eq. 1; FedWon, Zhuang & Lyu 2024, Eq. 1): the
  scaled weight standardization of normalization-free networks,
  W_hat = g * gamma * (W - mean) / (std * sqrt(N)), N = fan-in, std biased, gamma the ReLU gain
  sqrt(2 / (1 - 1/pi)) (so that a ReLU of unit Gaussians keeps unit variance through it) and g
  a learnable gain per output channel (init 1).
- :class:`FeatureNorm` (FedFN, Kim et al. 2023): each sample's feature vector scaled to unit L2
  norm, as the issue and FedFN's name say. The FedFN baseline in the Hybrid BN authors' code
  (Hongyao-Chen/HybridBN, FedBaseline/models/Nets.py, SimpleCNN with fn) multiplies the unit
  vector by sqrt(D) (D: the feature's size); not done here: in a 60-step probe (LeNet, width 4,
  synthetic 8x8, no other normalizer) the unit norm reached 44 % and the sqrt(D) one 33 %.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Guards the division only: a conv's per-channel weight variance is ~1/(3 fan_in) at PyTorch's
# init (>= 1e-5 for fan_in <= 3e4) and, without weight decay, only grows under WS (the loss is
# scale-invariant in W), so W_hat has unit variance to ~eps/var <= 1e-5 relative.
WS_EPS = 1e-10


class _GroupedNorm(nn.Module):
    """GroupNorm with a fixed grouping rule and a per-channel affine (weight 1, bias 0)."""

    def __init__(self, num_channels: int, groups: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_channels, self.groups, self.eps = num_channels, groups, eps
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))

    def extra_repr(self) -> str:
        return f"{self.num_channels}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)


class LayerNorm2d(_GroupedNorm):
    """LayerNorm of each sample over (C, H, W), per-channel affine."""

    def __init__(self, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__(num_channels, 1, eps)


class InstanceNorm2d(_GroupedNorm):
    """InstanceNorm of each sample and channel over (H, W), per-channel affine."""

    def __init__(self, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__(num_channels, num_channels, eps)


def standardize_weight(weight: Tensor, eps: float = WS_EPS) -> Tensor:
    """(C_out, C_in, kh, kw) -> the same weight, each output channel at mean 0 and (biased)
    variance var / (var + eps) ~ 1 over its C_in*kh*kw values."""
    var, mean = torch.var_mean(weight, dim=(1, 2, 3), correction=0, keepdim=True)
    return (weight - mean) * torch.rsqrt(var + eps)


class WSConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same signature, parameters and init) convolving with the standardized
    weight :func:`standardize_weight`; gradients flow through the standardization."""

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, standardize_weight(self.weight), self.bias)


# Brock et al. 2021a, §4 and their Appendix: E[relu(z)^2] - E[relu(z)]^2 = (1 - 1/pi) / 2 for
# z ~ N(0, 1), so gamma^2 * that = 1.
RELU_GAIN = math.sqrt(2.0 / (1.0 - 1.0 / math.pi))


def scaled_standardize_weight(weight: Tensor, gain: Tensor, gamma: float = RELU_GAIN) -> Tensor:
    """(C_out, C_in, kh, kw) -> gain * gamma * (W - mean) / (std * sqrt(fan_in)) per output
    channel (``gain``: (C_out,)); :func:`standardize_weight` divided by sqrt(fan_in)."""
    fan_in = weight[0].numel()
    scale = gain.view(-1, 1, 1, 1) * (gamma / math.sqrt(fan_in))
    return standardize_weight(weight) * scale


class ScaledWSConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same signature and init) convolving with
    :func:`scaled_standardize_weight`; adds the learnable gain ``gain`` (C_out,), init 1;
    ``gamma``: the fixed factor (RELU_GAIN, or 1: nfnets-pytorch's WSConv2d)."""

    def __init__(self, *args, gamma: float = RELU_GAIN, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gamma = gamma
        self.gain = nn.Parameter(torch.ones(self.out_channels))

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, scaled_standardize_weight(self.weight, self.gain,
                                                               self.gamma), self.bias)


class FeatureNorm(nn.Module):
    """x (N, D) -> x / max(||x||, eps) per sample (eps 1e-12): unit L2 norm, no parameters;
    times sqrt(D) with ``sqrt_dim`` (the Hybrid BN authors' FedFN baseline, ``Nets.py``)."""

    def __init__(self, sqrt_dim: bool = False) -> None:
        super().__init__()
        self.sqrt_dim = sqrt_dim

    def forward(self, x: Tensor) -> Tensor:
        out = F.normalize(x, dim=1)
        return out * math.sqrt(x.shape[1]) if self.sqrt_dim else out
