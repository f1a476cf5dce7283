"""Running Snakemake in a copy of the repository, for the end-to-end tests (test_workflow.py,
test_notebooks.py; the .test/ DAG itself is conftest.py's session fixture ``tiny_dag``)."""

import shutil
import subprocess
import sys
from pathlib import Path

from fednorm.data.tinyimagenet import ARCHIVE_NAME, write_sample_archive

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(*args, cwd=ROOT):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def work_copy(tmp_path):
    """The repository without its outputs, to run Snakemake in."""
    work = tmp_path / "repo"
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(
        ".git", ".snakemake", "results", "figures", ".venv", "*.egg-info", "__pycache__",
        ".test"))
    shutil.copytree(ROOT / ".test", work / ".test", ignore=shutil.ignore_patterns(
        "results", "figures", "data"))
    # the Tiny-ImageNet-shaped experiments' archive, in the official layout (.test/config.yaml)
    write_sample_archive(work / ".test/data" / ARCHIVE_NAME, n_classes=4, train_per_class=10,
                         val_per_class=3)
    return work
