"""Models; each takes its normalization layer as a parameter (a factory: channels -> module)."""

from __future__ import annotations

from torch import nn

from fednorm.config import ConfigError, RunConfig
from fednorm.models.clientwise import clientwise
from fednorm.models.cnn import FBNCNN
from fednorm.models.digits import DigitsCNN
from fednorm.models.fixup import FixupResNet20
from fednorm.models.lenet import LeNet
from fednorm.models.resnet import ResNet20
from fednorm.models.resnet18 import ResNet18
from fednorm.norms import normalizer_for

__all__ = ["FBNCNN", "DigitsCNN", "FixupResNet20", "LeNet", "ResNet18", "ResNet20", "build_model"]


def build_model(cfg: RunConfig, n_classes: int = 10) -> nn.Module:
    normalizer = normalizer_for(cfg)
    norm, conv = normalizer.make_layer, normalizer.conv
    # FedFN's unit feature (``feature_norm``), times sqrt(D) with feature_norm_scale: sqrt_dim
    feature_norm = cfg.feature_norm and cfg.feature_norm_scale
    if norm is None:  # normalization-free (fixup): a ResNet-20 only, as run_config checks
        if cfg.model != "resnet20":
            raise ConfigError(f"key 'model' has value {cfg.model!r}; allowed: 'resnet20' "
                              f"with normalizer '{cfg.normalizer}'")
        return FixupResNet20(cfg.width, n_classes)
    if cfg.model == "fbn_cnn":
        model = FBNCNN(norm, cfg.width, cfg.hidden, cfg.dropout, cfg.image_size, n_classes,
                       conv=conv, feature_norm=feature_norm)
    elif cfg.model == "lenet":
        model = LeNet(norm, cfg.width, cfg.image_size, n_classes, conv=conv,
                      feature_norm=feature_norm, conv_bias=normalizer.conv_bias)
    elif cfg.model == "digits_cnn":
        model = DigitsCNN(norm, cfg.width, cfg.image_size, n_classes, conv=conv,
                          feature_norm=feature_norm)
    elif cfg.model == "resnet18":
        model = ResNet18(norm, cfg.width, n_classes, feature_norm=feature_norm)
    else:
        model = ResNet20(norm, cfg.width, n_classes, conv=conv, feature_norm=feature_norm,
                         residual_alpha=normalizer.residual_alpha, conv_bias=normalizer.conv_bias)
    return clientwise(model) if normalizer.stacked_weights else model
