"""The LeNet-like CNN of the FixBN paper's CIFAR-10 experiments, with the normalization as a
parameter.

Source, and what is verified. The FixBN paper (§4, Table F) names a "LeNet-like CNN (LeCun et
al., 1998)" for CIFAR-10 and says it follows Hsieh et al. (2020, "The Non-IID Data Quagmire of
Decentralized Machine Learning") for its training setup and GN with 2 groups; it gives no layer
list. Hsieh et al.'s public Caffe definitions of their BN-LeNet and GN-LeNet (repository
kevinhsieh/non_iid_dml, apps/caffe/examples/cifar10/2parts/{bn,gn}lenet_train_val.prototxt
.template; read, not copied) give these layers, which we build here with width w = 32:

    conv 5x5, 3 -> w, pad 2, no bias  - max-pool 3x3 stride 2 - norm(w)  - ReLU
    conv 5x5, w -> w, pad 2, no bias  - norm(w)  - ReLU - avg-pool 3x3 stride 2
    conv 5x5, w -> 2w, pad 2, no bias - norm(2w) - ReLU - avg-pool 3x3 stride 2
    fully connected 2w * 4 * 4 -> 10 (with bias)                       (32x32 inputs)

Caffe pools in ceil mode (32 -> 16 -> 8 -> 4) and averages over the part of a window inside the
image; PyTorch's ``ceil_mode=True`` without padding does both the same way. Not verified: that
the FixBN authors used exactly this network (we found no code of theirs). Deliberate
differences from the Caffe files: the normalization layer comes from ``norm`` and so has our
layers' learnable affine part (Caffe's BatchNorm layer there has none and no Scale layer
follows it; PyTorch's BatchNorm2d, which the FixBN paper's code presumably used, has it), and
weights take PyTorch's default initialization (Caffe: Gaussian, std 1e-4 for conv1, 1e-2
elsewhere).

With w = 32 and 32x32 inputs it has 89,706 parameters (norm affine included). Where the
norm has no learnable offset (``none``, FedWon: ``conv_bias``, fednorm.norms) the convs carry a
bias instead (Caffe's default; the files above build these convs, each followed by a norm,
without one). Any image size >= 8 works (three poolings leave at least 1x1; the config refuses
smaller ones).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from fednorm.norms import feature_normalization


def _pooled(size: int) -> int:
    """Side after one 3x3 stride-2 pooling in ceil mode, no padding."""
    return -(-(size - 3) // 2) + 1


class LeNet(nn.Module):
    def __init__(
        self,
        norm: Callable[[int], nn.Module],
        width: int = 32,
        image_size: int = 32,
        n_classes: int = 10,
        in_channels: int = 3,
        conv: type[nn.Conv2d] = nn.Conv2d,
        feature_norm: bool | str = False,
        conv_bias: bool = False,
    ) -> None:
        """``conv_bias``: the convs carry a bias (when ``norm`` has no offset: none, FedWon)."""
        super().__init__()
        w1, w2 = width, 2 * width
        conv_class = conv
        side = _pooled(_pooled(_pooled(image_size)))
        if image_size < 8:
            raise ValueError(f"LeNet needs images of at least 8x8 pixels, got {image_size}")

        def conv(c_in: int, c_out: int) -> nn.Conv2d:  # WS convs for gn_ws (fednorm.norms)
            return conv_class(c_in, c_out, 5, padding=2, bias=conv_bias)

        def pool(kind: type[nn.Module]) -> nn.Module:
            return kind(3, stride=2, ceil_mode=True)

        self.features = nn.Sequential(
            conv(in_channels, w1), pool(nn.MaxPool2d), norm(w1), nn.ReLU(),
            conv(w1, w1), norm(w1), nn.ReLU(), pool(nn.AvgPool2d),
            conv(w1, w2), norm(w2), nn.ReLU(), pool(nn.AvgPool2d),
        )
        self.classifier = nn.Sequential(nn.Flatten(), *feature_normalization(feature_norm),
                                        nn.Linear(w2 * side * side, n_classes))

    def forward(self, x: Tensor) -> Tensor:
        return torch.log_softmax(self.classifier(self.features(x)), dim=1)
