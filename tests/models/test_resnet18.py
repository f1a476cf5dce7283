"""ResNet-18 from torchvision's blocks: at width 64 it is torchvision's resnet18; narrower widths
scale every stage; it takes the project's normalizers and trains under the engine."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from fednorm.config import ConfigError, run_config
from fednorm.models import ResNet18, build_model
from fednorm.norms import FedBatchNorm2d


def test_width_64_is_torchvisions_resnet18():
    torch.manual_seed(0)
    ours = ResNet18(nn.BatchNorm2d, width=64, n_classes=200).eval()
    reference = resnet18(num_classes=200, norm_layer=nn.BatchNorm2d).eval()
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == theirs
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = torch.log_softmax(reference(x), dim=1)
        torch.testing.assert_close(ours(x), expected, rtol=1e-5, atol=1e-5)


def test_parameter_count_scales_with_width():
    # every conv weight scales with width^2, norms and the head's input with width: at width 8,
    # torchvision's 11,689,512 - 513,000 (head) ... computed, not copied: count the conv weights
    def count(width, classes=10):
        return sum(p.numel() for p in ResNet18(nn.BatchNorm2d, width, classes).parameters())

    convs = lambda w: (3 * w * 49 + 4 * 9 * w * w  # stem, layer1  # noqa: E731
                       + sum(9 * c * 2 * c + 3 * 9 * (2 * c) ** 2 + c * 2 * c
                             for c in (w, 2 * w, 4 * w)))
    norms = lambda w: 2 * (w + 4 * w + sum(5 * 2 * c for c in (w, 2 * w, 4 * w)))  # noqa: E731
    for width in (4, 8, 64):
        assert count(width) == convs(width) + norms(width) + 8 * width * 10 + 10
    assert count(64, 1000) == 11_689_512  # torchvision's resnet18, as its docs state


def test_builds_with_the_projects_normalizers():
    cfg = run_config({"dataset": "synthetic", "n_train": 40, "n_test": 20, "model": "resnet18",
                      "width": 4, "image_size": 16, "normalizer": "bn", "partition": "iid",
                      "heterogeneity": None})
    model = build_model(cfg, n_classes=7)
    norms = [m for m in model.modules() if isinstance(m, FedBatchNorm2d)]
    assert len(norms) == 1 + 8 * 2 + 3  # stem, two per block, three projection shortcuts
    out = model.eval()(torch.randn(3, 3, 16, 16))
    assert out.shape == (3, 7)
    torch.testing.assert_close(out.exp().sum(1), torch.ones(3))


@pytest.mark.parametrize("normalizer", ["gn_ws", "fedtan", "fedwon"])
def test_normalizers_it_cannot_take_are_config_errors(normalizer):
    with pytest.raises(ConfigError, match=f"'model' has value 'resnet18'.*'{normalizer}'"):
        run_config({"model": "resnet18", "normalizer": normalizer, "partition": "iid",
                    "heterogeneity": None})


def test_feature_norm_gives_the_classifier_unit_features():
    """FedFN on ResNet-18: the classifier sees the pooled feature scaled to unit norm, so the
    logits are the classifier applied to the unit feature (and no parameter is added)."""
    cfg = run_config({"dataset": "synthetic", "n_train": 40, "n_test": 20, "model": "resnet18",
                      "width": 4, "image_size": 16, "normalizer": "gn", "gn_groups": 2,
                      "partition": "iid", "heterogeneity": None, "feature_norm": True})
    model = build_model(cfg, n_classes=5).eval()
    plain = build_model(replace(cfg, feature_norm=False), n_classes=5)
    assert model.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(3, 3, 16, 16)
    body = torch.nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool, model.layer1,
                               model.layer2, model.layer3, model.layer4)
    feature = body(x).mean(dim=(2, 3))
    unit = feature / feature.norm(dim=1, keepdim=True)
    torch.testing.assert_close(model(x), torch.log_softmax(model.fc(unit), dim=1))
