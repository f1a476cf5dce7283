"""ResNet-18 (He et al. 2016) as torchvision builds it, with the project's normalizers and a width.

torchvision's ``resnet18(norm_layer=...)`` takes our normalizer but fixes the widths at 64, 128,
256, 512; the quick and test scales need narrower networks. So the network is assembled here from
torchvision's own ``BasicBlock`` (with ``norm_layer=``), in torchvision's layout and module
names: at ``width = 64`` it *is* torchvision's resnet18 (same state-dict keys and shapes, same
outputs for the same weights: tests/models/test_resnet18.py), with stages of width w, 2w, 4w, 8w.

The stem is torchvision's ImageNet stem (7×7 convolution of stride 2, then 3×3 max-pooling of
stride 2) at every input size, Tiny-ImageNet's 64×64 included: the FixBN paper trains
"ResNet18" on Tiny-ImageNet with "the official PyTorch ImageNet training script" (its Appendix
A.1), whose ResNet-18 is torchvision's, unmodified; it names no CIFAR-style stem. At 64×64 the
last stage then sees 2×2 pixels (16× less compute than a stride-1 stem without max-pooling).

``feature_norm`` puts FedFN's unit-norm scaling (parameter-free) before the classifier.

Initialization as torchvision's: convolutions Kaiming-normal (fan-out, ReLU gain); normalization
layers keep their own (weight 1, bias 0); the classifier is PyTorch's default ``nn.Linear``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torchvision.models.resnet import BasicBlock

from fednorm.norms import feature_normalization

BLOCKS_PER_STAGE = (2, 2, 2, 2)


def _stage(c_in: int, c_out: int, stride: int, norm: Callable[[int], nn.Module]) -> nn.Sequential:
    """Two basic blocks; the first changes width/resolution with a 1×1 projection shortcut
    (torchvision's ``downsample``: conv, then norm) when it must."""
    downsample = None
    if stride != 1 or c_in != c_out:
        downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                   norm(c_out))
    return nn.Sequential(BasicBlock(c_in, c_out, stride, downsample, norm_layer=norm),
                         BasicBlock(c_out, c_out, norm_layer=norm))


class ResNet18(nn.Module):
    def __init__(self, norm: Callable[[int], nn.Module], width: int = 64,
                 n_classes: int = 1000, in_channels: int = 3,
                 feature_norm: bool | str = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = norm(width)  # torchvision's name, whatever the normalizer
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        widths = [width * 2**k for k in range(len(BLOCKS_PER_STAGE))]
        c_in = width
        for k, c_out in enumerate(widths):
            setattr(self, f"layer{k + 1}", _stage(c_in, c_out, 1 if k == 0 else 2, norm))
            c_in = c_out
        self.feature_norm = nn.Sequential(*feature_normalization(feature_norm))  # FedFN
        self.fc = nn.Linear(c_in, n_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.log_softmax(self.fc(self.feature_norm(x.mean(dim=(2, 3)))), dim=1)
