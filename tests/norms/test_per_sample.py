"""LayerNorm, InstanceNorm, (scaled) Weight Standardization and FedFN's feature norm
(fednorm.norms.per_sample) against
PyTorch's own layers and hand formulas, and their entries in the normalizer table.

All checks run in float64 with non-trivial inputs (channel offsets and scales differ), so
normalizing over the wrong dimensions changes the result at order 1.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fednorm import methods
from fednorm.config import NORMALIZERS, RunConfig
from fednorm.models import build_model
from fednorm.norms import (
    FeatureNorm,
    InstanceNorm2d,
    LayerNorm2d,
    ScaledWSConv2d,
    WSConv2d,
    bn_layers,
    normalizer_for,
    scaled_standardize_weight,
    standardize_weight,
)
from fednorm.norms.per_sample import RELU_GAIN, WS_EPS

N, C, H, W = 4, 6, 5, 5
EPS = 1e-5


def activations(seed: int = 0) -> torch.Tensor:
    """(N, C, H, W) float64; channel c has mean ~c and scale ~1 + c/2, sample i a shift i."""
    gen = torch.Generator().manual_seed(seed)
    c = torch.arange(C, dtype=torch.float64).reshape(1, C, 1, 1)
    i = torch.arange(N, dtype=torch.float64).reshape(N, 1, 1, 1)
    return c + i + (1 + c / 2) * torch.randn(N, C, H, W, generator=gen, dtype=torch.float64)


def affine(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (1 + torch.rand(C, generator=gen, dtype=torch.float64),
            torch.randn(C, generator=gen, dtype=torch.float64))


def with_affine(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor) -> nn.Module:
    layer = layer.double()
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


@pytest.mark.parametrize("training", [True, False])
def test_layer_norm_is_nn_layernorm_over_chw_with_a_per_channel_affine(training):
    x, (weight, bias) = activations(), affine()
    ours = with_affine(LayerNorm2d(C, eps=EPS), weight, bias).train(training)
    # nn.LayerNorm's affine is element-wise over (C, H, W): give it our per-channel values.
    ref = with_affine(nn.LayerNorm((C, H, W), eps=EPS),
                      weight[:, None, None].expand(C, H, W), bias[:, None, None].expand(C, H, W))
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)
    # ...and the normalized part alone, with the affine applied by hand.
    plain = nn.LayerNorm((C, H, W), eps=EPS, elementwise_affine=False).double()
    torch.testing.assert_close(ours(x), plain(x) * weight[:, None, None] + bias[:, None, None],
                               rtol=1e-12, atol=1e-12)
    assert ours.weight.shape == ours.bias.shape == (C,)


@pytest.mark.parametrize("training", [True, False])
def test_instance_norm_is_nn_instancenorm2d_with_the_same_affine(training):
    x, (weight, bias) = activations(), affine()
    ours = with_affine(InstanceNorm2d(C, eps=EPS), weight, bias).train(training)
    ref = with_affine(nn.InstanceNorm2d(C, eps=EPS, affine=True), weight, bias).train(training)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)
    # Per sample and channel: each (i, c) plane comes out at mean b_c and std ~w_c.
    out = ours(x)
    torch.testing.assert_close(out.mean((2, 3)), bias.expand(N, C), rtol=0, atol=1e-12)


def test_layer_and_instance_norm_normalize_over_different_sets():
    """LN keeps the differences between channels of a sample, IN removes them: the channel means
    of LN's output (unit affine) differ, IN's are all 0."""
    x = activations()
    ln, inorm = LayerNorm2d(C).double(), InstanceNorm2d(C).double()
    assert ln(x).mean((2, 3)).std() > 0.5
    assert inorm(x).mean((2, 3)).abs().max() < 1e-12


def reference_standardized(weight: torch.Tensor) -> torch.Tensor:
    """Qiao et al.'s W_hat, written out: per output channel over its I = in*kh*kw values,
    mean = sum / I, sigma = sqrt(sum((W - mean)^2) / I + eps), W_hat = (W - mean) / sigma."""
    flat = weight.double().reshape(weight.shape[0], -1)
    count = flat.shape[1]
    mean = flat.sum(1, keepdim=True) / count
    sigma = (((flat - mean) ** 2).sum(1, keepdim=True) / count + WS_EPS).sqrt()
    return ((flat - mean) / sigma).reshape(weight.shape)


def test_standardized_weight_has_zero_mean_and_unit_variance_per_output_channel():
    torch.manual_seed(0)
    conv = WSConv2d(8, 5, 3)  # PyTorch's init: per-channel variance ~1/(3*72)
    with torch.no_grad():
        conv.weight.add_(torch.arange(5.0).reshape(5, 1, 1, 1))  # and channel means 0..4
    w_hat = standardize_weight(conv.weight).double().reshape(5, -1)
    torch.testing.assert_close(w_hat.mean(1), torch.zeros(5, dtype=torch.float64),
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(w_hat.var(1, correction=0), torch.ones(5, dtype=torch.float64),
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(standardize_weight(conv.weight.double()),
                               reference_standardized(conv.weight), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("stride", "padding", "bias"), [(1, 1, True), (2, 0, False)])
def test_ws_conv_output_is_conv2d_with_the_standardized_weight(stride, padding, bias):
    torch.manual_seed(0)
    conv = WSConv2d(C, 7, 3, stride=stride, padding=padding, bias=bias).double()
    x = activations()
    want = F.conv2d(x, reference_standardized(conv.weight), conv.bias, stride, padding)
    torch.testing.assert_close(conv(x), want, rtol=1e-10, atol=1e-10)
    # ...which is not what the raw weight computes.
    plain = F.conv2d(x, conv.weight, conv.bias, stride, padding)
    assert (conv(x) - plain).abs().max() > 1.0


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine of the angle between a and b, (rows, d) -> (rows,)."""
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))


def test_ws_conv_is_invariant_to_each_output_channel_s_scale_and_shift_and_its_gradient_says_so():
    """W_hat does not change when an output channel's weights are scaled by a > 0 and shifted by
    s, so the gradient of any loss w.r.t. W sums to 0 per channel and is orthogonal to W - mean
    (up to eps / var ~ 1e-8 here): true only if the gradient flows through the standardization's
    mean and variance (through W_hat alone, the cosines would be of order 0.1)."""
    torch.manual_seed(0)
    conv = WSConv2d(C, 4, 3, padding=1).double()
    x = activations()
    target = torch.randn(N, 4, H, W, dtype=torch.float64)
    loss = ((conv(x) - target) ** 2).mean()
    loss.backward()
    g = conv.weight.grad.reshape(4, -1)
    centred = (conv.weight - conv.weight.mean((1, 2, 3), keepdim=True)).detach().reshape(4, -1)
    assert g.abs().max() > 1e-3  # the weights do get a gradient
    assert cosine(g, torch.ones_like(g)).abs().max() < 1e-6
    assert cosine(g, centred).abs().max() < 1e-6
    with torch.no_grad():
        a = torch.tensor([0.5, 2.0, 3.0, 7.0], dtype=torch.float64).reshape(4, 1, 1, 1)
        s = torch.tensor([1.0, -2.0, 0.0, 5.0], dtype=torch.float64).reshape(4, 1, 1, 1)
        moved = F.conv2d(x, standardize_weight(conv.weight * a + s), conv.bias, padding=1)
        torch.testing.assert_close(moved, conv(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["gn", "gn_ws", "ln", "in", "fixup", "fedwon", "none"])
def test_statistic_free_normalizers_have_no_rule_no_bn_layers_and_no_buffers(name):
    cfg = RunConfig(normalizer=name, model="resnet20", width=4, gn_groups=2)
    normalizer = normalizer_for(cfg)
    assert all(normalizer.rule_at(step) is None for step in (0, 1, cfg.steps - 1))
    model = build_model(cfg)
    assert bn_layers(model) == [] and list(model.buffers()) == []


@pytest.mark.parametrize("name", NORMALIZERS)
def test_only_gn_ws_and_fedwon_standardize_convolutions(name):
    expected = {"gn_ws": WSConv2d, "fedwon": ScaledWSConv2d}.get(name, nn.Conv2d)
    conv = normalizer_for(RunConfig(normalizer=name)).conv(3, 4, 3)
    assert type(conv) is expected


@pytest.mark.parametrize(("gain", "gamma"), [("relu", RELU_GAIN), ("none", 1.0)])
def test_fedwon_s_conv_gain_is_its_key_s(gain, gamma):
    """``fedwon_ws_gain``: the NF-ResNet gamma folded into every conv, or none (nfnets-pytorch's
    WSConv2d): the standardized weight times it exactly."""
    conv = normalizer_for(RunConfig(normalizer="fedwon", fedwon_ws_gain=gain)).conv(3, 4, 3)
    want = standardize_weight(conv.weight) * (gamma / math.sqrt(27))
    torch.testing.assert_close(scaled_standardize_weight(conv.weight, conv.gain, conv.gamma),
                               want)
    assert conv.gamma == gamma


def test_fedfn_s_sqrt_dim_scale_is_the_unit_feature_times_sqrt_d():
    x = torch.randn(5, 16, dtype=torch.float64)
    unit = FeatureNorm()(x)
    torch.testing.assert_close(unit.norm(dim=1), torch.ones(5, dtype=torch.float64))
    torch.testing.assert_close(FeatureNorm(sqrt_dim=True)(x), unit * 4.0)


# --- FedWon's scaled weight standardization and FedFN's feature normalization ----------------


def conv_weight(seed: int = 2) -> torch.Tensor:
    """(C_out, C_in, 3, 3) float64 with a different mean and scale per output channel."""
    gen = torch.Generator().manual_seed(seed)
    o = torch.arange(5, dtype=torch.float64).reshape(5, 1, 1, 1)
    return o - 2 + (0.1 + o) * torch.randn(5, 4, 3, 3, generator=gen, dtype=torch.float64)


def test_scaled_ws_is_fedwon_s_formula_with_the_biased_std():
    """FedWon's Eq. 1 (Brock et al. 2021a, Eq. 1): W_hat = g gamma (W - mean) / (std sqrt(N)),
    per output channel, N = C_in kh kw, std biased; written here with torch.std."""
    w = conv_weight()
    gain = torch.linspace(0.5, 2.0, 5, dtype=torch.float64)
    flat = w.reshape(5, -1)
    mean = flat.mean(1, keepdim=True)
    std = flat.std(1, correction=0, keepdim=True)
    want = (gain[:, None] * RELU_GAIN * (flat - mean) / (std * 36 ** 0.5)).reshape(w.shape)
    torch.testing.assert_close(scaled_standardize_weight(w, gain), want, rtol=1e-8, atol=0)


def test_relu_gain_keeps_unit_variance_through_a_relu_and_a_scaled_ws_layer():
    """Brock et al.'s definition of gamma: for z ~ N(0, 1), Var(relu(z)) = (1 - 1/pi) / 2 and
    a scaled-WS unit has ||W_hat_i||^2 = gamma^2 (gain 1), so its output on relu(z) has unit
    variance: checked exactly for the norm, and by sampling (2e5 draws, 1 % tolerance)."""
    w = conv_weight()
    w_hat = scaled_standardize_weight(w, torch.ones(5, dtype=torch.float64))
    torch.testing.assert_close(w_hat.reshape(5, -1).pow(2).sum(1),
                               torch.full((5,), RELU_GAIN ** 2, dtype=torch.float64),
                               rtol=1e-8, atol=0)
    z = torch.randn(200_000, 36, generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64)
    out = torch.relu(z) @ w_hat.reshape(5, -1).T
    assert torch.allclose(out.var(0), torch.ones(5, dtype=torch.float64), rtol=0.01)


def test_scaled_ws_conv_convolves_with_the_scaled_weight_and_trains_its_gain():
    conv = ScaledWSConv2d(4, 5, 3, padding=1).double()
    with torch.no_grad():
        conv.weight.copy_(conv_weight())
        conv.gain.copy_(torch.linspace(0.5, 2.0, 5))
    x = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = F.conv2d(x, scaled_standardize_weight(conv.weight, conv.gain), conv.bias, padding=1)
    torch.testing.assert_close(conv(x), want, rtol=1e-12, atol=1e-12)
    (g,) = torch.autograd.grad(conv(x).sum(), conv.gain)
    assert g.abs().min() > 0


def test_feature_norm_gives_each_sample_unit_l2_norm_in_its_own_direction():
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x[0] *= 1e3
    y = FeatureNorm()(x)
    torch.testing.assert_close(y.norm(dim=1), torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(y * x.norm(dim=1, keepdim=True), x)


@pytest.mark.parametrize("model", ["fbn_cnn", "lenet", "resnet20"])
def test_feature_norm_sits_right_before_the_classifier(model):
    """With feature_norm the classifier's input has unit norm per sample: a forward hook on the
    model's last nn.Linear sees it."""
    cfg = RunConfig(normalizer="none", model=model, width=4, hidden=8, image_size=8,
                    feature_norm=True, dropout=0.0)
    net = build_model(cfg).double().eval()
    last = [m for m in net.modules() if isinstance(m, nn.Linear)][-1]
    seen = []
    last.register_forward_hook(lambda m, inp, out: seen.append(inp[0]))
    net(torch.randn(3, 3, 8, 8, dtype=torch.float64))
    torch.testing.assert_close(seen[0].norm(dim=1), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("name", [n for n in NORMALIZERS if n != "fixup"])
def test_a_method_s_offset_flag_says_whether_its_layer_has_a_learnable_shift(name):
    """The record's ``offset`` (fednorm.methods) against the layer its normalizer builds: a
    (C,) bias parameter exactly when the flag is set; the models' conv bias is its negation."""
    normalizer = normalizer_for(RunConfig(normalizer=name))
    bias = getattr(normalizer.make_layer(64), "bias", None)  # 64 channels: gn_groups divide
    has_shift = isinstance(bias, nn.Parameter) and bias.shape == (64,)
    assert has_shift == methods.method(name).offset
    assert normalizer.conv_bias == (not has_shift)


def test_fedwon_s_biased_conv_is_a_scaled_ws_conv_plus_a_bias_per_output_channel():
    """Written out by hand in float64: W_hat = g * gamma * (W - mean) / (std * sqrt(fan_in))
    per output channel (std biased, WS_EPS inside the root), the convolution with W_hat, then
    + b per channel."""
    conv = normalizer_for(RunConfig(normalizer="fedwon", model="lenet")).conv(
        4, 5, 3, padding=1, bias=True).double()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        conv.weight.copy_(conv_weight())
        conv.gain.copy_(torch.linspace(0.5, 2.0, 5))
        conv.bias.copy_(torch.randn(5, generator=gen, dtype=torch.float64))
    x = torch.randn(2, 4, 6, 6, generator=gen, dtype=torch.float64)
    w = conv.weight.reshape(5, -1)
    mean = w.mean(1, keepdim=True)
    std = ((w - mean).pow(2).mean(1, keepdim=True) + WS_EPS).sqrt()
    w_hat = conv.gain[:, None] * RELU_GAIN * (w - mean) / (std * math.sqrt(36))
    want = F.conv2d(x, w_hat.reshape(5, 4, 3, 3), padding=1) + conv.bias[:, None, None]
    torch.testing.assert_close(conv(x), want, rtol=1e-10, atol=1e-12)
