"""Fixtures shared by several test modules."""

import os
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import torch
from dag import snakemake, work_copy
from hypothesis import settings

# Under pytest-xdist (`make test`: one worker per core) each worker computes on one thread:
# two workers of one thread each keep both cores busy, where two threads each would fight.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

# Property tests (tests/test_config_properties.py): 'ci', derandomized with a fixed number of
# examples, is what `make test` runs; 'thorough' searches much longer, on demand:
# FEDNORM_HYPOTHESIS=thorough python -m pytest tests/test_config_properties.py
# (or pytest's --hypothesis-profile thorough).
settings.register_profile("ci", derandomize=True, max_examples=40, deadline=None,
                          database=None, print_blob=True)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("FEDNORM_HYPOTHESIS", "ci"))


@dataclass(frozen=True)
class TinyDag:
    work: Path  # the repository copy it ran in; outputs under work/.test/
    out: CompletedProcess  # Snakemake's


@pytest.fixture(scope="session")
def tiny_dag(tmp_path_factory) -> TinyDag:
    """The whole DAG on the smallest grid (.test/config.yaml), run once per session for every
    test that reads its outputs. Tests must not change the copy: one that runs more copies it.
    Under pytest-xdist a session fixture runs once per worker: its tests carry
    ``@pytest.mark.xdist_group("tiny_dag")`` and `make test` runs ``--dist loadgroup``, so that
    one worker runs them all and the DAG once."""
    work = work_copy(tmp_path_factory.mktemp("tiny_dag"))
    return TinyDag(work, snakemake("--cores", "2", "--configfile", ".test/config.yaml",
                                   cwd=work))


def pytest_collection_modifyitems(config, items):
    """The longest tests first (the .test DAG's group, then those marked slow), so that under
    pytest-xdist they overlap the many short ones instead of running last on one worker."""
    def rank(item):
        group = item.get_closest_marker("xdist_group")
        if group is not None and group.args == ("tiny_dag",):
            return 0
        return 1 if item.get_closest_marker("slow") is not None else 2
    items.sort(key=rank)  # stable: the collection order within each rank
