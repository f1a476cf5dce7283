"""Running Snakemake in a copy of the repository, for the end-to-end tests (test_workflow.py,
test_notebooks.py, test_slurm.py; the .test/ DAG itself is conftest.py's session fixture
``tiny_dag``)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from fednorm.data.digits5 import write_sample_archives
from fednorm.data.imagenet import write_sample_tree
from fednorm.data.tinyimagenet import ARCHIVE_NAME, write_sample_archive
from fednorm.run import train_and_write

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


# A sitecustomize that makes `import torch` (and torchvision) fail, as on a login node
# without PyTorch; not None in sys.modules, which SciPy's array-API checks would trip on
BLOCK_TORCH = """\
import sys


class NoTorch:
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "torchvision"):
            raise ModuleNotFoundError(f"No module named {name!r}")


sys.meta_path.insert(0, NoTorch())
"""


def env_without_torch(folder: Path) -> dict[str, str]:
    """The environment of a subprocess in which PyTorch cannot be imported (BLOCK_TORCH in
    ``folder``) and fednorm comes from this tree's src/."""
    (folder / "sitecustomize.py").write_text(BLOCK_TORCH)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT / "src")])}


def snakemake(*args, cwd=ROOT, env=None):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)


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
    # the ImageNet-shaped experiment's folder tree (.test/data/imagenet; never downloaded)
    write_sample_tree(work / ".test/data", n_classes=4, train_per_class=20, val_per_class=3)
    # the feature-shift experiment's Digits-Five files, each in its published format
    write_sample_archives(work / ".test/data/digits5", per_class=2)
    return work


def assert_trained_as_in_one_go(work, plan, bundle_id, run_ids, whole):
    """The runs' files that the workflow wrote in ``work`` (interrupted and resumed) are those
    of the same bundle trained in one go into ``whole``, byte for byte (one thread, as a job
    trains)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_and_write([plan.runs[r] for r in run_ids], [whole / r for r in run_ids],
                     bundle_id=bundle_id, device="cpu")
    finally:
        torch.set_num_threads(threads)
    for r in run_ids:
        for name in ("metrics.csv", "norm_error.csv", "dynamics.csv"):
            assert ((work / plan.paths.run_dir(r) / name).read_bytes()
                    == (whole / r / name).read_bytes()), (r, name)

