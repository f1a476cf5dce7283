"""benchmarks/gpu/run.sh's first two steps in smoke mode (the GPU's own steps are
fednorm.gpucheck.quick's, tests/test_gpucheck_quick.py): the preflight names each missing
thing on one line; the install makes OUT/venv and puts mlxtend in it with --no-deps from a
wheelhouse that lacks mlxtend's dependencies, no network, nothing written into the tree."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks/gpu/run.sh"


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A pure-Python wheel of one module ``name`` whose __version__ is ``version``,
    requiring ``requires`` (pip's own format: METADATA, WHEEL, RECORD with hashes)."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: " + name + f"\nVersion: {version}\n"
             + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = "".join(f"{k},{digest(v)},{len(v.encode())}\n" for k, v in files.items())
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for k, v in {**files, f"{info}/RECORD": record + f"{info}/RECORD,,\n"}.items():
            whl.writestr(k, v)
    return path


def _run(out: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RUN), str(out)], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env}, timeout=120)


def test_the_install_puts_mlxtend_in_a_venv_without_its_dependencies(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    # mlxtend 0.25's own pins, which no wheel here satisfies: only --no-deps installs it
    _wheel(house, "mlxtend", "0.25.0", ["scipy>=99", "numpy>=99", "scikit-learn>=99"])
    before = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT,
                            capture_output=True, text=True).stdout
    out = tmp_path / "out"
    done = _run(out, DEVICE="cpu", SMOKE="1", ONLY="install", WHEELHOUSE=str(house))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [summary["steps"][s]["status"] for s in ("preflight", "install")] == ["ok", "ok"]
    assert summary["steps"]["install"]["installed"] == ["mlxtend (--no-deps)"]
    venv = out / "venv/bin/python"
    seen = subprocess.run([str(venv), "-c", "import mlxtend, torch, snakemake; "
                           "print(mlxtend.__file__, mlxtend.__version__)"],
                          capture_output=True, text=True)
    assert seen.returncode == 0, seen.stderr  # the parent's packages seen through the venv
    where, version = seen.stdout.split()
    assert version == "0.25.0" and where.startswith(str(out / "venv"))
    # nothing new in the tree, ignored files included (OUT, the venv: all under tmp)
    after = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT,
                           capture_output=True, text=True).stdout
    assert after == before
    # a dependency-resolving install from the same wheelhouse fails, as the dry run
    resolving = subprocess.run([str(venv), "-m", "pip", "install", "--dry-run", "--no-index",
                                "--find-links", str(house), "--ignore-installed", "mlxtend"],
                               capture_output=True, text=True)
    assert resolving.returncode != 0 and "scipy>=99" in resolving.stdout + resolving.stderr


def test_the_preflight_prints_one_line_per_missing_thing_and_stops(tmp_path):
    out = tmp_path / "out"
    done = _run(out, DEVICE="cuda", WHEELHOUSE=str(tmp_path / "none"),
                CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2
    lines = [x for x in done.stderr.splitlines() if x.startswith("preflight: ")]
    assert any("CUDA not visible to PyTorch" in x for x in lines), done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"]["preflight"]["status"] == "failed"
    assert summary["steps"]["preflight"]["missing"] == [x[len("preflight: "):] for x in lines]
    assert not (out / "venv").exists()  # nothing installed past a failed preflight
