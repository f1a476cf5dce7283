"""The CNN of the FBN paper's Table 1 (Appendix C.1), with the normalization as a parameter.

Note the order of the paper's table: convolution, ReLU, *then* normalization. Dropout masks
come from the run's key (fednorm.models.dropout), so a run drops the same units alone or in a
bundle. ``conv`` is the convolution class (``nn.Conv2d``; ``WSConv2d`` for GN+WS, fednorm.norms).
With width 64, hidden 128 and 32x32 inputs it has 1,310,922 parameters (BN affine included).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from fednorm.models.dropout import KeyedDropout
from fednorm.norms import feature_normalization


class FBNCNN(nn.Module):
    def __init__(
        self,
        norm: Callable[[int], nn.Module],
        width: int = 64,
        hidden: int = 128,
        dropout: float = 0.25,
        image_size: int = 32,
        n_classes: int = 10,
        in_channels: int = 3,
        conv: Callable[..., nn.Conv2d] = nn.Conv2d,
        feature_norm: bool | str = False,
    ) -> None:
        super().__init__()
        w1, w2 = width, 2 * width

        def block(c_in: int, c_out: int) -> list[nn.Module]:
            return [conv(c_in, c_out, 3, padding=1), nn.ReLU(), norm(c_out)]

        self.features = nn.Sequential(
            *block(in_channels, w1), *block(w1, w1), nn.MaxPool2d(2), KeyedDropout(dropout, 0),
            *block(w1, w2), *block(w2, w2), nn.MaxPool2d(2), KeyedDropout(dropout, 1),
        )
        flat = w2 * (image_size // 4) ** 2
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(), *feature_normalization(feature_norm),
            nn.Linear(hidden, n_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.log_softmax(self.classifier(self.features(x)), dim=1)
