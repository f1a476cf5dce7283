"""The counts the docs state, checked against the plan that `fednorm plan` prints, so that
they cannot go stale: the paper scale's runs and jobs in README.md and docs/paper-scale.md,
the hour profile's runs and bundles in docs/hour.md."""

import re
from pathlib import Path

import pytest

from fednorm.plan import load_plan, merged_config

ROOT = Path(__file__).resolve().parents[1]


def _number(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.fixture(scope="module")
def paper():
    return load_plan(merged_config([ROOT / "config/config.yaml"]))


@pytest.mark.parametrize(("doc", "pattern"), [
    ("docs/paper-scale.md", r"The paper scale is ([\d,]+) training runs in ([\d,]+) jobs"),
    ("README.md", r"([\d,]+) training runs in ([\d,]+) jobs \(`fednorm plan config/config.yaml`"),
])
def test_the_paper_scale_s_counts_are_the_plan_s(paper, doc, pattern):
    found = re.search(pattern, " ".join((ROOT / doc).read_text().split()))
    assert found, f"{doc}: no sentence matching {pattern!r}"
    assert (_number(found[1]), _number(found[2])) == (len(paper.runs), len(paper.jobs))


def test_the_hour_s_counts_are_the_plan_s():
    hour = load_plan(merged_config([ROOT / "config/config.yaml", ROOT / "config/hour.yaml"]))
    text = " ".join((ROOT / "docs/hour.md").read_text().split())
    found = re.search(r"# ([\d,]+) runs in ([\d,]+) bundles", text)
    assert found and (_number(found[1]), _number(found[2])) == (len(hour.runs),
                                                                len(hour.bundles))
