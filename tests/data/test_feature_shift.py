"""Feature shift wired into the data: the quick digits rendered in domains, Digits-Five's
domains side by side, the split by domain, and the configuration's rules for them."""

from __future__ import annotations

import pytest
import torch

from fednorm.config import ConfigError, run_config
from fednorm.data.digits5 import load_digits5_arrays, write_sample_archives
from fednorm.data.mnist5k import split_and_normalize
from fednorm.data.partition import partition

FIVE = ("mnist", "inverted", "colour", "noise", "blur")
QUICK = dict(dataset="mnist5k", n_train=400, n_test=100, image_size=8, domains=list(FIVE),
             partition="domains", heterogeneity=None, n_clients=10)


def digits(n: int = 510) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return (torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=gen),
            torch.arange(n) % 10)


def test_each_training_digit_is_in_one_domain_and_each_test_digit_in_every_one():
    """403 training digits in 5 domains: 80 a domain (3 dropped, in no domain), normalized per
    channel; the 100 test digits in each of the 5 domains (500, domain by domain, labels
    repeated); the plain digits (no domains) keep their scalar normalization."""
    images, labels = digits()
    data = split_and_normalize(images, labels, 403, 100, 8, FIVE)
    assert data.domains == FIVE and len(data.train_x) == 400 == len(data.train_domain)
    assert torch.bincount(data.train_domain).tolist() == [80] * 5
    assert data.test_domain.tolist() == [d for d in range(5) for _ in range(100)]
    assert torch.equal(data.test_y, data.test_y[:100].repeat(5))
    std, mean = torch.std_mean(data.train_x, dim=(0, 2, 3))
    torch.testing.assert_close(mean, torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(std, torch.ones(3), atol=1e-5, rtol=0)
    # the domains differ: a test digit's renderings are not one image
    n = 100
    assert not torch.allclose(data.test_x[:n], data.test_x[n:2 * n])
    plain = split_and_normalize(images, labels, 403, 100, 8)
    assert plain.train_domain is None and len(plain.test_x) == 100


def test_the_split_by_domain_gives_each_client_one_domain_and_no_image_twice():
    images, labels = digits()
    data = split_and_normalize(images, labels, 403, 100, 8, FIVE)
    parts = partition(data.train_y, "domains", 10, None, seed=3, domains=data.train_domain)
    assert len(parts) == 10 and all(len(p) == 40 for p in parts)
    for c, part in enumerate(parts):  # clients 2d and 2d + 1 hold domain d
        assert set(data.train_domain[part].tolist()) == {c // 2}
    every = torch.cat(parts)
    assert len(every.unique()) == len(every) == 400
    with pytest.raises(ValueError, match="domain"):
        partition(data.train_y, "domains", 10, None, seed=3)
    with pytest.raises(ValueError, match="multiple of the 5 domains"):
        partition(data.train_y, "domains", 7, None, seed=3, domains=data.train_domain)


def test_digits5_domains_sit_side_by_side_with_their_ids(tmp_path):
    written = write_sample_archives(tmp_path, per_class=2)
    data = load_digits5_arrays(tmp_path, ("usps", "svhn"), 16, n_train=10, n_test=20)
    assert data.domains == ("usps", "svhn") and data.train_x.shape[1:] == (3, 16, 16)
    assert data.train_domain.tolist() == [0] * 10 + [1] * 10
    assert data.test_domain.tolist() == [0] * 20 + [1] * 20
    assert sorted(data.test_y[20:].tolist()) == sorted(written["svhn"]["test"][1].tolist())


@pytest.mark.parametrize(("values", "key", "allowed"), [
    ({"domains": ["svhn"]}, "domains", "with dataset 'mnist5k'"),
    ({"domains": ["mnist", "mnist"]}, "domains", "distinct names"),
    ({"dataset": "synthetic", "domains": ["mnist"], "partition": "iid"}, "domains",
     "[] with dataset 'synthetic'"),
    ({"domains": []}, "partition", "a non-empty list of domains"),
    ({"heterogeneity": 0.5}, "heterogeneity", "null with partition 'domains'"),
    ({"n_clients": 7}, "n_clients", "a multiple of the 5 domains"),
    ({"dataset": "digits5", "domains": ["usps"], "n_train": 8000, "n_clients": 5}, "n_train",
     "at most 7291"),
    ({"dataset": "digits5", "domains": [], "partition": "iid"}, "domains",
     "a non-empty list"),
])
def test_bad_feature_shift_values_name_the_key_and_what_is_allowed(values, key, allowed):
    with pytest.raises(ConfigError, match=rf"key '{key}'.*{allowed}".replace("[", r"\[")
                       .replace("]", r"\]")):
        run_config({**QUICK, **values})


def test_a_feature_shift_run_names_its_split_and_keeps_other_runs_ids():
    cfg = run_config(QUICK)
    assert cfg.split == "Domains(5)" and cfg.run_id.startswith("fbn-domains-E1-s0-")
    plain = {k: v for k, v in QUICK.items() if k not in ("domains", "partition",
                                                          "heterogeneity")}
    assert run_config(plain).domains == ()
