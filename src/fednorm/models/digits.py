"""FedBN's network for its Digits-Five feature-shift benchmark, with the normalization as a
parameter.

Source, and what is verified. FedBN (Li, Jiang, Zhang, Kamp, Dou, ICLR 2021) trains a CNN on
the digits; its code (repository med-air/FedBN, nets/models.py, class ``DigitModel``; read at
commit 655f5f3, not copied) gives these layers, which we build here with width w = 64:

    conv 5x5, 3 -> w, pad 2, bias   - norm(w)  - ReLU - max-pool 2
    conv 5x5, w -> w, pad 2, bias   - norm(w)  - ReLU - max-pool 2
    conv 5x5, w -> 2w, pad 2, bias  - norm(2w) - ReLU
    flatten; linear 2w * 7 * 7 -> 32w (bias) - norm1d(32w) - ReLU       (28x28 inputs)
             linear 32w -> 8w (bias)        - norm1d(8w)  - ReLU
             linear 8w -> 10 (bias)

Verified there: every layer above at w = 64 (convs 3 -> 64 -> 64 -> 128, linears 6272 -> 2048
-> 512 -> 10, all with PyTorch's default bias), BatchNorm2d after each conv and BatchNorm1d
after each hidden linear, the ReLU after the norm, the pools after the first two blocks only,
PyTorch's default initialization. Our parametrisation: the hidden sizes are 32w and 8w, FedBN's
2048 and 512 at its w = 64, so that ``width`` scales the whole network as one knob (a width of
8 at the quick scale: 256 and 64 hidden units). Not verified: the paper's own description of
the network (we read the code, not the paper's appendix), nor that its reported results came
from this exact file.
Deliberate differences: the norm layers come from ``norm``; the output is log-probabilities
(FedBN's returns logits and trains with cross-entropy: the same loss).

The hidden layers are normalized with the same factory as the convs, on the (N, C) features
viewed as (N, C, 1, 1) maps (:class:`OnVectors`): BatchNorm2d over N x 1 x 1 values per channel
is BatchNorm1d over N, so every normalizer's layer (each client's BN statistics, FedBN's local
parts, FixBN, FBN, Hybrid BN, GN and LN over the channels of one sample) acts on them unchanged,
and the engine finds them by their type like the convs' (fednorm.norms.bn_layers). InstanceNorm
would normalize each value by itself there (a constant output): the configuration refuses it
with this model (fednorm.methods, ``in``'s check).

With w = 64 and 28x28 inputs it has 14,219,210 parameters (norm affine included). Any image
size >= 4 works (two 2x2 poolings leave at least 1x1; the config refuses smaller ones for
every model).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from fednorm.norms import feature_normalization


class OnVectors(nn.Module):
    """A normalization layer for (N, C, H, W) maps applied to (N, C) features as (N, C, 1, 1)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x[:, :, None, None]).flatten(1)


class DigitsCNN(nn.Module):
    def __init__(
        self,
        norm: Callable[[int], nn.Module],
        width: int = 64,
        image_size: int = 28,
        n_classes: int = 10,
        in_channels: int = 3,
        conv: Callable[..., nn.Conv2d] = nn.Conv2d,
        feature_norm: bool | str = False,
    ) -> None:
        super().__init__()
        if image_size < 4:
            raise ValueError(f"DigitsCNN needs images of at least 4x4 pixels, got {image_size}")
        w1, w2, h1, h2 = width, 2 * width, 32 * width, 8 * width
        side = image_size // 4  # two 2x2 max-pools, floor mode

        def block(c_in: int, c_out: int) -> list[nn.Module]:
            return [conv(c_in, c_out, 5, padding=2), norm(c_out), nn.ReLU()]

        def hidden(d_in: int, d_out: int) -> list[nn.Module]:
            return [nn.Linear(d_in, d_out), OnVectors(norm(d_out)), nn.ReLU()]

        self.features = nn.Sequential(
            *block(in_channels, w1), nn.MaxPool2d(2), *block(w1, w1), nn.MaxPool2d(2),
            *block(w1, w2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), *hidden(w2 * side * side, h1), *hidden(h1, h2),
            *feature_normalization(feature_norm), nn.Linear(h2, n_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.log_softmax(self.classifier(self.features(x)), dim=1)
