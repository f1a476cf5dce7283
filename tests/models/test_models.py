"""The FBN paper's CNN, ResNet-20 and the FixBN paper's LeNet: parameter counts, layer order,
outputs, shortcuts."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fednorm import methods
from fednorm.config import RunConfig
from fednorm.models import FBNCNN, LeNet, ResNet20, build_model
from fednorm.models.dropout import KeyedDropout
from fednorm.models.resnet import BasicBlock, NFBasicBlock, expected_variances
from fednorm.norms import (
    NF_ALPHA,
    FedBatchNorm2d,
    InstanceNorm2d,
    LayerNorm2d,
    ScaledWSConv2d,
    WSConv2d,
    scaled_standardize_weight,
    standardize_weight,
)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def conv3(c_in: int, c_out: int, bias: bool = True) -> int:
    return c_in * c_out * 9 + (c_out if bias else 0)


def conv5(c_in: int, c_out: int) -> int:
    return c_in * c_out * 25  # no bias (a normalization follows)


def linear(d_in: int, d_out: int) -> int:
    return d_in * d_out + d_out


NORM = 2  # affine weight and bias per channel (BatchNorm and GroupNorm alike)

# The FBN paper's CNN (Table 1) on 32x32x3 inputs: four 3x3 convolutions (64, 64, 128, 128
# channels, each followed by a normalization), two 2x2 max-pools (32 -> 8), then 8*8*128 -> 128
# -> 10 fully connected.
CNN_PARAMS = (
    conv3(3, 64) + NORM * 64
    + conv3(64, 64) + NORM * 64
    + conv3(64, 128) + NORM * 128
    + conv3(128, 128) + NORM * 128
    + linear(8 * 8 * 128, 128)
    + linear(128, 10)
)


def _stage(c_in: int, c_out: int) -> int:
    """Three basic blocks, bias-free convolutions, parameter-free shortcuts."""
    first = conv3(c_in, c_out, bias=False) + conv3(c_out, c_out, bias=False) + 2 * NORM * c_out
    other = 2 * conv3(c_out, c_out, bias=False) + 2 * NORM * c_out
    return first + 2 * other


# ResNet-20 (He et al. 2016, §4.2): stem conv 3 -> 16, stages of widths 16, 32, 64, linear head.
RESNET_PARAMS = (
    conv3(3, 16, bias=False) + NORM * 16
    + _stage(16, 16) + _stage(16, 32) + _stage(32, 64)
    + linear(64, 10)
)


# Hsieh et al.'s LeNet (w = 32) on 32x32x3: three bias-free 5x5 convolutions (32, 32, 64
# channels, each normalized), poolings 32 -> 16 -> 8 -> 4, then 64*4*4 -> 10 fully connected.
LENET_PARAMS = (
    conv5(3, 32) + NORM * 32
    + conv5(32, 32) + NORM * 32
    + conv5(32, 64) + NORM * 64
    + linear(64 * 4 * 4, 10)
)


def test_arithmetic_matches_the_published_counts():
    assert CNN_PARAMS == 1_310_922
    assert RESNET_PARAMS == 269_722
    assert LENET_PARAMS == 2400 + 64 + 25600 + 64 + 51200 + 128 + 10250 == 89_706


@pytest.mark.parametrize("normalizer", ["fbn", "gn"])
def test_paper_cnn_parameter_count(normalizer):
    model = build_model(RunConfig(model="fbn_cnn", normalizer=normalizer, width=64, hidden=128))
    assert n_params(model) == CNN_PARAMS == 1_310_922
    norm_type = FedBatchNorm2d if normalizer == "fbn" else nn.GroupNorm
    assert sum(isinstance(m, norm_type) for m in model.modules()) == 4


@pytest.mark.parametrize("normalizer", ["fbn", "gn"])
def test_resnet20_parameter_count(normalizer):
    model = build_model(RunConfig(model="resnet20", normalizer=normalizer, width=16,
                                  gn_groups=16))
    assert n_params(model) == RESNET_PARAMS == 269_722
    norm_type = FedBatchNorm2d if normalizer == "fbn" else nn.GroupNorm
    assert sum(isinstance(m, norm_type) for m in model.modules()) == 19  # stem + 9 blocks x 2


@pytest.mark.parametrize("normalizer", ["central", "bn", "fbn", "fixbn", "gn"])
def test_lenet_parameter_count(normalizer):
    model = build_model(RunConfig(model="lenet", normalizer=normalizer, width=32, gn_groups=2))
    assert isinstance(model, LeNet)
    assert n_params(model) == LENET_PARAMS == 89_706
    norm_type = nn.GroupNorm if normalizer == "gn" else FedBatchNorm2d
    assert [m.num_channels if normalizer == "gn" else m.num_features
            for m in model.modules() if isinstance(m, norm_type)] == [32, 32, 64]


def test_lenet_layers_and_feature_map_sizes():
    """Hsieh et al.'s order: conv, max-pool, norm, ReLU; conv, norm, ReLU, avg-pool; conv, norm,
    ReLU, avg-pool; 3x3 stride-2 poolings in ceil mode (32 -> 16 -> 8 -> 4, 8 -> 4 -> 2 -> 1)."""
    model = LeNet(FedBatchNorm2d, width=4, image_size=32)
    types = [type(m) for m in model.features]
    assert types == [nn.Conv2d, nn.MaxPool2d, FedBatchNorm2d, nn.ReLU,
                     nn.Conv2d, FedBatchNorm2d, nn.ReLU, nn.AvgPool2d,
                     nn.Conv2d, FedBatchNorm2d, nn.ReLU, nn.AvgPool2d]
    model.eval()
    for size, sides in ((32, [32, 16, 16, 16, 16, 16, 16, 8, 8, 8, 8, 4]),
                        (8, [8, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 1]),
                        (10, [10, 5, 5, 5, 5, 5, 5, 2, 2, 2, 2, 1])):
        model = LeNet(FedBatchNorm2d, width=4, image_size=size).eval()
        x = torch.randn(2, 3, size, size)
        seen = []
        for layer in model.features:
            x = layer(x)
            seen.append(x.shape[-1])
        assert seen == sides
        assert model.classifier[1].in_features == 8 * sides[-1] ** 2
    # The average pools average over the part of each window inside the map (Caffe's rule):
    # a 2x2 map's one 3x3 window is its mean.
    pool = model.features[-1]
    x = torch.arange(4.0).view(1, 1, 2, 2)
    torch.testing.assert_close(pool(x), x.mean().view(1, 1, 1, 1))
    with pytest.raises(ValueError, match="at least 8x8"):
        LeNet(FedBatchNorm2d, image_size=7)


def test_cnn_module_order_is_conv_relu_norm():
    model = FBNCNN(FedBatchNorm2d, width=4, hidden=8, dropout=0.25, image_size=8)
    types = [type(m) for m in model.features]
    block = [nn.Conv2d, nn.ReLU, FedBatchNorm2d]
    assert types == [*block, *block, nn.MaxPool2d, KeyedDropout,
                     *block, *block, nn.MaxPool2d, KeyedDropout]
    assert [type(m) for m in model.classifier] == [nn.Flatten, nn.Linear, nn.ReLU, nn.Linear]
    # The normalization acts on the ReLU's (non-negative) output: its input is the ReLU output.
    seen = {}
    model.features[2].register_forward_hook(lambda m, inp, out: seen.update(x=inp[0]))
    model.eval()
    model(torch.randn(2, 3, 8, 8))
    assert seen["x"].min() >= 0


@pytest.mark.parametrize("model_name", ["fbn_cnn", "resnet20", "lenet"])
def test_output_is_log_probabilities(model_name):
    cfg = RunConfig(model=model_name, normalizer="gn", gn_groups=2, width=4, hidden=8,
                    image_size=8, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, n_classes=7)
    out = model(3 * torch.randn(5, 3, 8, 8))
    assert out.shape == (5, 7)
    assert torch.all(out <= 0)
    torch.testing.assert_close(out.exp().sum(1), torch.ones(5), rtol=1e-5, atol=1e-5)
    # Not a constant: different inputs give different distributions.
    assert not torch.allclose(out[0], out[1])


def test_resnet_stride2_blocks_have_parameter_free_option_a_shortcuts():
    model = ResNet20(FedBatchNorm2d, width=4)
    blocks = [m for m in model.modules() if isinstance(m, BasicBlock)]
    assert len(blocks) == 9
    downsampling = [b for b in blocks if b.stride == 2]
    assert len(downsampling) == 2
    for block in downsampling:
        names = {name for name, _ in block.named_parameters()}
        assert names == {"conv1.weight", "norm1.weight", "norm1.bias",
                         "conv2.weight", "norm2.weight", "norm2.bias"}
        assert sum(isinstance(m, nn.Conv2d) for m in block.modules()) == 2
        # Option A: subsample by 2, pad the new channels with zeros.
        c_in = block.conv1.in_channels
        x = torch.randn(2, c_in, 8, 8)
        s = block.shortcut(x)
        assert s.shape == (2, 2 * c_in, 4, 4)
        lo = block.pad // 2
        torch.testing.assert_close(s[:, lo : lo + c_in], x[:, :, ::2, ::2], rtol=0, atol=0)
        assert torch.count_nonzero(s[:, :lo]) == 0 and torch.count_nonzero(s[:, lo + c_in :]) == 0
    identity = [b for b in blocks if b.stride == 1]
    x = torch.randn(2, identity[0].conv1.in_channels, 8, 8)
    assert identity[0].shortcut(x) is x


# --- Normalizers without batch statistics (FixBN paper Table 4) --------------------------------

PER_SAMPLE = {"gn": nn.GroupNorm, "gn_ws": nn.GroupNorm, "ln": LayerNorm2d, "in": InstanceNorm2d}


@pytest.mark.parametrize("model_name", ["fbn_cnn", "resnet20", "lenet"])
@pytest.mark.parametrize("normalizer", PER_SAMPLE)
def test_per_sample_normalizers_build_their_layers_and_convolutions(model_name, normalizer):
    """GN+WS: every conv is a WSConv2d (each feeds a normalization) and every norm a GroupNorm
    with gn_groups groups; the others keep plain convs. Same parameter count as GN/BN."""
    cfg = RunConfig(model=model_name, normalizer=normalizer, width=16, gn_groups=4)
    model = build_model(cfg)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, PER_SAMPLE[normalizer])]
    assert len(convs) == len(norms) == {"fbn_cnn": 4, "resnet20": 19, "lenet": 3}[model_name]
    ws = normalizer == "gn_ws"
    assert all(isinstance(c, WSConv2d) == ws for c in convs)
    if normalizer in ("gn", "gn_ws"):
        assert all(n.num_groups == 4 for n in norms)
    bn_like = build_model(RunConfig(model=model_name, normalizer="fbn", width=16))
    assert n_params(model) == n_params(bn_like)


def test_gn_ws_network_computes_with_standardized_weights():
    """The same weights through GN and GN+WS: outputs differ, and GN+WS's equal GN's once each
    conv weight is replaced by its standardization (WS is the only difference)."""
    cfg = RunConfig(model="resnet20", normalizer="gn_ws", width=4, gn_groups=2)
    torch.manual_seed(0)
    ws_model = build_model(cfg).double()
    gn_model = build_model(RunConfig(model="resnet20", normalizer="gn", width=4,
                                     gn_groups=2)).double()
    gn_model.load_state_dict(ws_model.state_dict())
    x = torch.randn(3, 3, 8, 8, dtype=torch.float64)
    assert (ws_model(x) - gn_model(x)).abs().max() > 1e-3
    with torch.no_grad():
        for m in gn_model.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.copy_(standardize_weight(m.weight))
    torch.testing.assert_close(ws_model(x), gn_model(x), rtol=1e-10, atol=1e-10)


# --- FedWon's ResNet-20: normalization-free residuals (Brock et al. 2021a) -------------------


def fedwon_resnet(seed: int, residual_alpha: float | None = NF_ALPHA) -> ResNet20:
    """FedWon's ResNet-20 (width 16) from build_model; ``residual_alpha`` None: the same convs
    with plain residual sums (what FedWon's ResNet-20 was before the NF blocks), biases and all."""
    torch.manual_seed(seed)
    if residual_alpha == NF_ALPHA:
        return build_model(RunConfig(model="resnet20", normalizer="fedwon", width=16))
    return ResNet20(lambda c: nn.Identity(), 16, conv=ScaledWSConv2d,
                    residual_alpha=residual_alpha, conv_bias=True)


def block_variances(model: ResNet20, x: torch.Tensor) -> list[float]:
    """The variance of the signal after the stem and after every block."""
    with torch.no_grad():
        h = model.stem(x)
        out = [h.var().item()]
        for block in model.stages:
            if isinstance(block, NFBasicBlock | BasicBlock):
                h = block(h)
                out.append(h.var().item())
    return out


def test_nf_blocks_expected_variances_grow_by_alpha_squared_and_reset_at_transitions():
    """ResNet-20's nine blocks: transitions are the first blocks of stages 2 and 3 (by hand);
    beta^2 = 1, 1 + a^2, 1 + 2a^2, then 1 + 3a^2 into the first transition, then reset."""
    a2 = NF_ALPHA**2
    model = fedwon_resnet(0)
    blocks = [b for b in model.stages if isinstance(b, NFBasicBlock)]
    assert [b.transition for b in blocks] == [False] * 3 + [True, False, False] * 2
    want = [1, 1 + a2, 1 + 2 * a2, 1 + 3 * a2, 1 + a2, 1 + 2 * a2, 1 + 3 * a2, 1 + a2,
            1 + 2 * a2]
    assert [b.beta**2 for b in blocks] == pytest.approx(want, rel=1e-12)
    assert expected_variances([True, False], 0.5) == [1.0, 1.25]


def test_nf_block_is_x_plus_alpha_times_the_branch_of_x_over_beta():
    """A non-transition block against h + alpha f(h / beta) written with F.conv2d on the
    blocks' standardized weights; a transition block's shortcut is the scaled input,
    subsampled and zero-padded (half the new channels on each side)."""
    torch.manual_seed(0)
    same = NFBasicBlock(4, 4, 1, ScaledWSConv2d, 0.2, 1.5).double()
    down = NFBasicBlock(4, 8, 2, ScaledWSConv2d, 0.2, 1.5).double()
    x = torch.randn(2, 4, 8, 8, dtype=torch.float64)

    def branch(block, h, stride):
        w1 = scaled_standardize_weight(block.conv1.weight, block.conv1.gain)
        w2 = scaled_standardize_weight(block.conv2.weight, block.conv2.gain)
        inner = torch.relu(F.conv2d(torch.relu(h), w1, stride=stride, padding=1))
        return F.conv2d(inner, w2, padding=1)

    torch.testing.assert_close(same(x), x + 0.2 * branch(same, x / 1.5, 1))
    zeros = torch.zeros(2, 2, 4, 4, dtype=torch.float64)  # option A: 2 new channels each side
    skip = torch.cat([zeros, x[:, :, ::2, ::2] / 1.5, zeros], 1)
    torch.testing.assert_close(down(x), skip + 0.2 * branch(down, x / 1.5, 2))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fedwon_resnet20_starts_near_chance_and_its_signal_stays_bounded(seed):
    """Random images, 64 of 32x32: the initial loss is ln 10 within 0.3 and the signal's
    variance stays within [0.1, 2] through the nine blocks (expected at most 1 + 3 alpha^2
    on the original channels); with plain residual sums the same convs double it per block
    (above 100 after nine) and the loss starts far above chance."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)
    model = fedwon_resnet(seed)
    with torch.no_grad():
        loss = F.nll_loss(model(x), y).item()
    assert abs(loss - math.log(10)) < 0.3
    assert all(0.1 < v < 2 for v in block_variances(model, x))
    plain = fedwon_resnet(seed, residual_alpha=None)
    with torch.no_grad():
        assert F.nll_loss(plain(x), y).item() > math.log(10) + 3
    assert block_variances(plain, x)[-1] > 100


def test_fedwon_resnet20_has_the_parameters_of_the_plain_one_and_only_fedwon_scales():
    """The NF blocks hold the same convolutions (weights and gains) as FedWon's plain-sum
    ResNet-20, in the same order; every other normalizer keeps post-activation blocks."""
    nf, plain = fedwon_resnet(0), fedwon_resnet(0, residual_alpha=None)
    assert [(k, p.shape) for k, p in nf.named_parameters()] == [
        (k, p.shape) for k, p in plain.named_parameters()]
    for name in ("bn", "gn", "none", "hybridbn"):
        model = build_model(RunConfig(model="resnet20", normalizer=name, width=4, gn_groups=2))
        assert not any(isinstance(m, NFBasicBlock) for m in model.modules()), name


# --- Conv biases where no normalization supplies an offset (the records' ``offset``) ---------


@pytest.mark.parametrize("model_name", ["lenet", "resnet20", "fbn_cnn"])
def test_convs_carry_a_bias_exactly_where_the_method_s_layer_has_no_offset(model_name):
    """LeNet and ResNet-20: a bias in every conv (selected by type) for the methods without a
    learnable offset (none, FedWon), in none for the others, whose parameter counts stay those
    pinned above; FBNCNN keeps its paper's biases with every method."""
    for record in methods.METHODS:
        if record.name == "fixup" or (record.models and model_name not in record.models):
            continue
        model = build_model(RunConfig(model=model_name, normalizer=record.name, width=4,
                                      gn_groups=2))
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        want = model_name == "fbn_cnn" or not record.offset
        assert convs and all((c.bias is not None) == want for c in convs), record.name


def test_lenet_without_normalization_is_convs_with_biases_pools_and_relus():
    """LeNet with normalizer none, float64, against the same layers as plain functions."""
    torch.manual_seed(0)
    model = build_model(RunConfig(model="lenet", normalizer="none", width=3,
                                  image_size=16)).double()
    c1, c2, c3 = (m for m in model.modules() if isinstance(m, nn.Conv2d))
    head = model.classifier[-1]
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1),
                    dtype=torch.float64)

    def conv(m: nn.Conv2d, h: torch.Tensor) -> torch.Tensor:
        return F.conv2d(h, m.weight, padding=2) + m.bias[:, None, None]

    h = F.relu(F.max_pool2d(conv(c1, x), 3, 2, ceil_mode=True))
    h = F.avg_pool2d(F.relu(conv(c2, h)), 3, 2, ceil_mode=True)
    h = F.avg_pool2d(F.relu(conv(c3, h)), 3, 2, ceil_mode=True)
    want = F.log_softmax(h.flatten(1) @ head.weight.T + head.bias, dim=1)
    torch.testing.assert_close(model(x), want, rtol=1e-10, atol=1e-12)
