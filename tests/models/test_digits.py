"""FedBN's digits network (fednorm.models.digits): its size, its computation against plain
PyTorch layers, and which normalizers and image sizes it takes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fednorm import methods
from fednorm.config import ConfigError, RunConfig, run_config
from fednorm.models import DigitsCNN, build_model
from fednorm.models.digits import OnVectors
from fednorm.norms import BatchStats, NormContext, bn_layers, norm_context, normalizer_for


def conv5(c_in: int, c_out: int) -> int:
    return c_in * c_out * 25 + c_out  # FedBN's convs keep their bias


def linear(d_in: int, d_out: int) -> int:
    return d_in * d_out + d_out


NORM = 2  # affine weight and bias per channel or unit

# FedBN's DigitModel (med-air/FedBN, nets/models.py) on 28x28x3: convs 3 -> 64 -> 64 -> 128, two
# 2x2 pools (28 -> 7), then 6272 -> 2048 -> 512 -> 10, a BN after every conv and hidden linear.
FEDBN_PARAMS = (
    conv5(3, 64) + NORM * 64 + conv5(64, 64) + NORM * 64 + conv5(64, 128) + NORM * 128
    + linear(128 * 7 * 7, 2048) + NORM * 2048 + linear(2048, 512) + NORM * 512
    + linear(512, 10)
)


def small(normalizer: str = "bn", **keys) -> RunConfig:
    return RunConfig(model="digits_cnn", normalizer=normalizer, width=2, image_size=12,
                     gn_groups=2, **keys)


@pytest.mark.parametrize("normalizer", ["bn", "gn", "fedbn"])
def test_fedbn_s_network_at_width_64_has_its_parameter_count(normalizer):
    model = build_model(RunConfig(model="digits_cnn", normalizer=normalizer, width=64,
                                  image_size=28))
    assert FEDBN_PARAMS == 14_219_210
    assert sum(p.numel() for p in model.parameters()) == FEDBN_PARAMS


class Reference(nn.Module):
    """FedBN's DigitModel written with plain PyTorch layers (BatchNorm1d on the hidden units),
    at width w and side // 4 pixels after the pools."""

    def __init__(self, w: int, side: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(3, w, 5, padding=2), nn.Conv2d(w, w, 5, padding=2),
                                    nn.Conv2d(w, 2 * w, 5, padding=2)])
        self.bns = nn.ModuleList([nn.BatchNorm2d(w), nn.BatchNorm2d(w), nn.BatchNorm2d(2 * w)])
        self.fcs = nn.ModuleList([nn.Linear(2 * w * side * side, 32 * w),
                                  nn.Linear(32 * w, 8 * w), nn.Linear(8 * w, 10)])
        self.bn1d = nn.ModuleList([nn.BatchNorm1d(32 * w), nn.BatchNorm1d(8 * w)])

    def forward(self, x):
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns, strict=True)):
            x = F.relu(bn(conv(x)))
            x = F.max_pool2d(x, 2) if i < 2 else x
        x = x.flatten(1)
        for fc, bn in zip(self.fcs, self.bn1d, strict=False):
            x = F.relu(bn(fc(x)))
        return F.log_softmax(self.fcs[-1](x), dim=1)


def copy_into_reference(model: DigitsCNN, ref: Reference) -> None:
    """The model's weights (randomized affine and running statistics) into the reference."""
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    linears = [m for m in model.classifier if isinstance(m, nn.Linear)]
    norms = bn_layers(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for ours, theirs in zip(convs + linears, [*ref.convs, *ref.fcs], strict=True):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        for ours, theirs in zip(norms, [*ref.bns, *ref.bn1d], strict=True):
            c = ours.num_features
            for name in ("weight", "bias", "running_mean"):
                getattr(ours, name).copy_(torch.randn(c, generator=g, dtype=torch.float64))
            ours.running_var.copy_(torch.rand(c, generator=g, dtype=torch.float64) + 0.5)
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(theirs, name).copy_(getattr(ours, name))


@pytest.mark.parametrize("training", [True, False])
def test_digits_cnn_computes_fedbn_s_network_with_batchnorm1d_on_the_hidden_units(training):
    """Train mode (each batch's own statistics) and eval mode (the running ones), float64:
    the hidden norms on (N, C, 1, 1) views are BatchNorm1d on (N, C)."""
    torch.manual_seed(0)
    model = build_model(small()).double()
    ref = Reference(2, 3).double()
    copy_into_reference(model, ref)
    model.train(training), ref.train(training)
    x = torch.randn(6, 3, 12, 12, generator=torch.Generator().manual_seed(2),
                    dtype=torch.float64)
    with norm_context(NormContext(BatchStats(), n_groups=1, n_clients=1, beta=0.1)):
        got = model(x)
    torch.testing.assert_close(got, ref(x), rtol=1e-10, atol=1e-12)


def test_every_normalizer_s_layer_sits_after_each_conv_and_hidden_linear():
    """Five norm layers (three convs, two hidden linears) of the method's own type; the BN
    family's are found by type (bn_layers), the hidden ones inside OnVectors."""
    for name in methods.NAMES:
        if name in ("in", "fixup"):
            continue
        model = build_model(small(name))
        kind = type(normalizer_for(small(name)).make_layer(4))
        assert sum(type(m) is kind for m in model.modules()) == 5, name
        hidden = [m.layer for m in model.modules() if isinstance(m, OnVectors)]
        assert [type(m) for m in hidden] == [kind, kind], name
        if methods.method(name).statistics:
            assert bn_layers(model)[-2:] == hidden, name


def test_image_sizes_below_two_pools_and_instance_norm_are_refused_naming_the_key():
    base = dict(dataset="synthetic", n_train=40, n_test=20, model="digits_cnn", width=2,
                normalizer="bn")
    assert run_config({**base, "image_size": 4}).image_size == 4  # 4 -> 2 -> 1
    with pytest.raises(ConfigError, match=r"key 'image_size' has value 3.*>= 4"):
        run_config({**base, "image_size": 3})
    with pytest.raises(ValueError, match="at least 4x4"):
        DigitsCNN(nn.BatchNorm2d, width=2, image_size=3)
    with pytest.raises(ConfigError, match=r"key 'model' has value 'digits_cnn'.*'in'"):
        run_config({**base, "image_size": 8, "normalizer": "in"})
    assert run_config({**base, "image_size": 8, "normalizer": "in", "model": "lenet"})
