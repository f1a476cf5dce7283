"""ResNet-20 for CIFAR (He et al. 2016, §4.2) with option-A (parameter-free) shortcuts.

Three stages of three basic blocks (widths w, 2w, 4w; w = 16 is the standard network with
269,722 parameters, BN affine included). Option A: when a block halves the resolution and
doubles the width, the shortcut subsamples by 2 and pads the new channels with zeros.
``conv`` is the convolution class (``nn.Conv2d``; ``WSConv2d`` for GN+WS, fednorm.norms).
"""

from __future__ import annotations

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
        conv: Callable[..., nn.Conv2d] = nn.Conv2d,
    ) -> None:
        super().__init__()
        self.conv1 = conv(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(c_out)
        self.conv2 = conv(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = norm(c_out)
        self.stride = stride
        self.pad = c_out - c_in

    def shortcut(self, x: Tensor) -> Tensor:
        return option_a_shortcut(x, self.stride, self.pad)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(
        self,
        norm: Callable[[int], nn.Module],
        width: int = 16,
        n_classes: int = 10,
        in_channels: int = 3,
        blocks_per_stage: int = 3,
        conv: Callable[..., nn.Conv2d] = nn.Conv2d,
        feature_norm: bool = False,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            conv(in_channels, width, 3, padding=1, bias=False), norm(width), nn.ReLU()
        )
        layers: list[nn.Module] = []
        c_in = width
        for stage, c_out in enumerate((width, 2 * width, 4 * width)):
            for block in range(blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(c_in, c_out, stride, norm, conv))
                c_in = c_out
        self.stages = nn.Sequential(*layers)
        self.feature_norm = nn.Sequential(*feature_normalization(feature_norm))  # FedFN
        self.head = nn.Linear(c_in, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stages(self.stem(x))
        return torch.log_softmax(self.head(self.feature_norm(x.mean(dim=(2, 3)))), dim=1)
