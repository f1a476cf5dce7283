"""Fixtures shared by several test modules."""

from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from dag import snakemake, work_copy


@dataclass(frozen=True)
class TinyDag:
    work: Path  # the repository copy it ran in; outputs under work/.test/
    out: CompletedProcess  # Snakemake's


@pytest.fixture(scope="session")
def tiny_dag(tmp_path_factory) -> TinyDag:
    """The whole DAG on the smallest grid (.test/config.yaml), run once per session for every
    test that reads its outputs. Tests must not change the copy: one that runs more copies it."""
    work = work_copy(tmp_path_factory.mktemp("tiny_dag"))
    return TinyDag(work, snakemake("--cores", "2", "--configfile", ".test/config.yaml",
                                   cwd=work))
