"""``make gpu-check``: the GPU proven by one prepared command (``python -m fednorm.gpucheck``).

Steps, each timed, a failure recorded with its traceback without stopping the others, the
report rewritten after each (fednorm.gpucheck.steps) into ``--out``: ``report.md`` and
``report.json``:

1. ``environment``: PyTorch, the device, its memory, the math settings;
2. ``cuda_tests``: ``pytest -m cuda`` (tests/fl/test_cuda.py: bundles, CPU against CUDA,
   resume and a real out-of-memory split on the device; skipped without CUDA);
3. ``peak_matmul``: the card's measured peak FLOP/s (a large float32 matmul);
4. ``throughput <shape>``: images/s of the engine for bundles of 1, 4, 16 and 64 runs at each
   paper's shape, beside a plain PyTorch loop of one run and the FLOPs floor, with the peak
   memory per run (fednorm.gpucheck.throughput);
5. ``compile``: the plain loop under ``torch.compile`` (and CUDA graphs: mode
   reduce-overhead) and the engine's gradient step compiled (fednorm.fl.build.make_trainer's
   ``compile``);
6. ``bundle_size_auto``: what ``execution.bundle_size: auto`` chooses at each shape;
7. ``gpu_hours``: each paper part's GPU-hours at the measured rates (fednorm.plan's
   arithmetic), and the bundle size this card wants;
8. ``launches``: a local step profiled, the engine at small and middle bundles beside the plain
   loop: operators, kernels and the GPU's busy share (benchmarks/engine_launches.py).

``--smoke``: the same steps at tiny sizes, for a CPU (``make gpu-check DEVICE=cpu SMOKE=1``).
It needs PyTorch, PyYAML and pytest only (no Snakemake, no network): ``PYTHONPATH=src``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import re
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fednorm.gpucheck import throughput as tp
from fednorm.gpucheck.steps import Check, Result
from fednorm.plan.jobs import rate_at

ASSUMED_RATE = 50_000  # images/s that config/hour.yaml is planned at, until measured
BUDGET_S = 450  # the check's steps start within this; `make gpu-check` kills it at 540 s


class Measured:
    """What the steps hand on to later ones, and what earlier checks' reports measured
    (``--from-report``: a lease too short for the whole check measures the rest later)."""

    def __init__(self) -> None:
        self.peak_flops: float | None = None
        self.best: dict[str, dict[str, Any]] = {}  # shape -> its best engine row
        self.curves: dict[str, dict[int, float]] = {}  # shape -> R -> images/s (the fastest)
        self.auto: dict[str, int] = {}  # shape -> the runs bundle_size: auto trains together
        self.reports: list[Path] = []  # the earlier checks' report.json read (load)

    def offer(self, shape: str, row: dict[str, Any]) -> None:
        """An engine row of ``shape`` (images_per_s, runs, part, image_size): its bundle
        size's rate if faster than one measured before, the shape's best if the fastest."""
        curve = self.curves.setdefault(shape, {})
        curve[row["runs"]] = max(curve.get(row["runs"], 0.0), row["images_per_s"])
        old = self.best.get(shape)
        if old is None or row["images_per_s"] > old["images_per_s"]:
            self.best[shape] = row

    def part_rate(self, part: tuple[str, str], runs: int) -> float | None:
        """Images/s of a bundle of ``runs`` runs of ``part`` (dataset, model): its slowest
        shape's (:func:`rate_at`) among those measured at ``runs`` or fewer (else among all);
        None if no shape of the part was measured."""
        shapes = [s for s, row in self.best.items() if tuple(row["part"]) == part]
        if not shapes:
            return None
        covering = [s for s in shapes if min(self.curves[s]) <= runs] or shapes
        return min(rate_at(self.curves[s], runs) for s in covering)

    def load(self, path: Path) -> None:
        """The throughput, peak and bundle_size: auto that the report.json at ``path``
        measured; a shape's part and image size from the report, else from tp.SHAPES."""
        report = json.loads(Path(path).read_text())
        self.reports.append(Path(path))
        known = {s.name: s for s in tp.SHAPES}
        for step in report.get("steps", []):
            name, result = step["name"], step.get("result", {})
            if step["status"] != "ok":
                continue
            if name == "peak_matmul":
                self.peak_flops = self.peak_flops or result["flops_per_s"]
            elif name == "bundle_size_auto":
                self.auto.update({r["shape"]: r["runs_together"] for r in result["rows"]
                                  if r.get("runs_together")})
            elif name.startswith("throughput "):
                shape = name.removeprefix("throughput ")
                if "part" in result:
                    part, size = tuple(result["part"]), result["image_size"]
                elif shape in known:
                    part, size = known[shape].part, known[shape].keys["image_size"]
                else:
                    raise ValueError(f"{path}: step {name!r} names no part and {shape!r} is "
                                     f"not one of the check's shapes ({', '.join(known)})")
                for row in result.get("engine", []):
                    if row.get("images_per_s"):
                        self.offer(shape, {**row, "part": part, "image_size": size,
                                           "report": str(path)})


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def one_line(err: BaseException) -> str:
    """An error in a table cell: its type, first line and where it was raised."""
    frame = traceback.extract_tb(err.__traceback__)[-1]
    text = (str(err).splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {text} ({Path(frame.filename).name}:{frame.lineno})"


def environment(device: torch.device) -> Result:
    try:
        import torchvision
        vision = torchvision.__version__
    except ImportError:
        vision = "missing (fednorm.models needs it for ResNet-18)"
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "torchvision": vision, "device": str(device),
                            "threads": torch.get_num_threads(),
                            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                            "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32}
    name = platform.processor() or "CPU"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = props.name
        info.update(capability=f"{props.major}.{props.minor}",
                    memory_gib=props.total_memory / 2**30, cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
    info["name"] = name
    return {"summary": f"{name}, torch {torch.__version__}",
            "tables": {"environment": [{"key": k, "value": str(v)} for k, v in info.items()]},
            **info}


def cuda_tests(timeout_s: float) -> Result:
    """``pytest -m cuda`` in a process of its own (a CUDA error there cannot take this one
    down); without conftest.py (its plugins, e.g. hypothesis, need not be installed)."""
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
           "PYTHONPATH": os.pathsep.join(p for p in ("src", os.environ.get("PYTHONPATH"))
                                         if p)}
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/fl/test_cuda.py", "-q", "-rs",
           "--noconftest", "-p", "no:cacheprovider", "--durations=0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    text = done.stdout + done.stderr
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", text)}
    if done.returncode not in (0, 5):  # 5: nothing collected
        raise RuntimeError(f"pytest -m cuda exited {done.returncode}: {counts}\n{text[-6000:]}")
    return {"summary": ", ".join(f"{n} {k}" for k, n in counts.items()) or "no tests",
            "counts": counts, "text": text[-4000:]}


def peak_matmul(device: torch.device, settings: tp.Settings, measured: Measured) -> Result:
    measured.peak_flops = tp.peak_flops(device, settings)
    n = settings.matmul
    return {"summary": f"{measured.peak_flops / 1e12:.3g} TFLOP/s (float32 {n}x{n} matmul)",
            "flops_per_s": measured.peak_flops}


def shape_throughput(shape: tp.Shape, device: torch.device, settings: tp.Settings,
                     measured: Measured) -> Result:
    data = tp.data_for(shape, settings, device)
    plain = tp.plain_rate(shape, data, settings)
    flops = tp.flops_per_image(shape, data, settings)
    floor = measured.peak_flops / flops if measured.peak_flops else None
    rows: list[dict[str, Any]] = []
    for runs in shape.sizes:
        try:
            row = tp.engine_rate(shape, runs, data, settings)
        except Exception as err:  # out of memory at a large R: recorded, no larger R
            rows.append({"runs": runs, "images_per_s": None, "error": one_line(err)})
            break
        finally:
            release(device)
        row["vs_plain"] = row["images_per_s"] / plain
        row["of_floor"] = row["images_per_s"] / floor if floor else None
        rows.append(row)
        larger = [r for r in shape.sizes if r > runs]
        if larger and row["round_s"] * larger[0] / runs > settings.round_limit_s:
            break  # the next R's round, at this R's images/s, would take too long
    done = [r for r in rows if r.get("images_per_s")]
    best = max(done, key=lambda r: r["images_per_s"])
    for row in done:
        measured.offer(shape.name, {**row, "part": shape.part,
                                    "image_size": shape.keys["image_size"]})
    floor_text = f", floor {floor:,.0f}" if floor else ""
    return {"summary": f"{shape.paper}: best R = {best['runs']}, {best['images_per_s']:,.0f} "
                       f"images/s = {best['vs_plain']:.2f}x the plain loop ({plain:,.0f})"
                       f"{floor_text}",
            "part": list(shape.part), "image_size": shape.keys["image_size"],
            "plain_images_per_s": plain, "flops_per_image": flops, "floor_images_per_s": floor,
            "engine": rows, "tables": {shape.paper: [
                {"what": "plain PyTorch loop, 1 run", "runs": 1, "images_per_s": plain},
                *({"what": "engine", **r} for r in rows)]}}


def compiled(shapes: tuple[tp.Shape, ...], device: torch.device, settings: tp.Settings) -> Result:
    """The plain loop and the engine's gradient step under torch.compile (CUDA graphs: mode
    reduce-overhead, inductor on CUDA only); each attempt's failure is a row, not the
    step's."""
    modes: list[tuple[str, Callable[[tp.Shape, Any], float]]] = [
        ("plain, eager", lambda s, d: tp.plain_rate(s, d, settings)),
        ("plain, torch.compile", lambda s, d: tp.plain_rate(s, d, settings, "default"))]
    if device.type == "cuda" and settings.compile_backend == "inductor":
        modes.append(("plain, torch.compile reduce-overhead (CUDA graphs)",
                      lambda s, d: tp.plain_rate(s, d, settings, "reduce-overhead")))
    sizes = {r for s in shapes for r in s.sizes}
    runs = 16 if 16 in sizes else max(sizes)
    backend = {"backend": settings.compile_backend}
    engine = [(f"engine R={runs}, eager",
               lambda s, d: tp.engine_rate(s, runs, d, settings)["images_per_s"]),
              (f"engine R={runs}, torch.compile (its gradient step)",
               lambda s, d: tp.engine_rate(s, runs, d, settings, backend)["images_per_s"])]
    if device.type == "cuda" and settings.compile_backend == "inductor":
        engine.append((f"engine R={runs}, reduce-overhead (CUDA graphs)",
                       lambda s, d: tp.engine_rate(s, runs, d, settings,
                                                   {"mode": "reduce-overhead"})["images_per_s"]))
    rows = []
    for shape in (s for s in shapes if s.compile):
        data = tp.data_for(shape, settings, device)
        for what, rate in modes + (engine if shape.compile_engine else []):
            row: dict[str, Any] = {"shape": shape.name, "what": what, "images_per_s": None,
                                   "error": ""}
            try:
                row["images_per_s"] = rate(shape, data)
            except Exception as err:
                row["error"] = one_line(err)
            finally:
                torch._dynamo.reset()
                release(device)
            rows.append(row)
    failed = sum(bool(r["error"]) for r in rows)
    return {"summary": f"backend {settings.compile_backend}: {len(rows) - failed} timed, "
                       f"{failed} failed", "rows": rows, "tables": {"torch.compile": rows}}


def launches(shapes: tuple[tp.Shape, ...], device: torch.device, settings: tp.Settings
             ) -> Result:
    """Where a small bundle's time goes (benchmarks/engine_launches.py): per local step, the
    centralized plain loop and the engine at the smallest and the middle bundle size of each
    shape marked ``launches``, with operators, kernels and the GPU's busy share."""
    rows = []
    for shape in (s for s in shapes if s.launches):
        data = tp.data_for(shape, settings, device)
        sizes = sorted({shape.sizes[0], shape.sizes[len(shape.sizes) // 2]})
        try:
            rows += [{"shape": shape.name, **row}
                     for row in tp.launch_rows(shape, sizes, data, settings)]
        finally:
            release(device)
    def said(r: dict[str, Any]) -> str:
        gpu = f", {r['kernels']:,.0f} kernels, GPU busy {r['busy_share']:.0%}" \
            if "kernels" in r else ""
        who = "plain" if r["what"].startswith("plain") else f"R = {r['runs']}"
        return (f"{r['shape']} {who}: {r['aten_ops']:,.0f} operators "
                f"({r['dispatched']:,.0f} reaching a kernel){gpu}")

    return {"summary": "a local step: " + "; ".join(map(said, rows)), "rows": rows,
            "tables": {"a local step (benchmarks/engine_launches.py)": rows}}


def bundle_size_auto(shapes: tuple[tp.Shape, ...], device: torch.device, settings: tp.Settings,
                     measured: Measured) -> Result:
    """What ``execution.bundle_size: auto`` trains together at each shape: its two probe
    bundles' footprint (fednorm.fl.memory.measure) against the device's free memory."""
    from fednorm.fl import memory
    from fednorm.plan import AUTO_BUNDLE_RUNS

    rows = []
    for shape in shapes:
        row: dict[str, Any] = {"shape": shape.name, "fixed_mb": None, "per_run_mb": None,
                               "free_mb": None, "runs_together": None, "error": ""}
        try:
            data = tp.data_for(shape, settings, device)
            cfgs = tp.configs(shape, AUTO_BUNDLE_RUNS, settings)
            free, footprint = memory.free_bytes(device), memory.measure(cfgs, data, device)
            if free is None or footprint is None:
                raise RuntimeError(f"the peak memory of {device} cannot be read here")
            together = min(AUTO_BUNDLE_RUNS, footprint.runs_that_fit(free))
            measured.auto[shape.name] = together
            row.update(fixed_mb=footprint.fixed / 2**20, per_run_mb=footprint.per_run / 2**20,
                       free_mb=free / 2**20, runs_together=together)
        except Exception as err:
            row["error"] = one_line(err)
        finally:
            release(device)
        rows.append(row)
    if all(r["error"] for r in rows):
        raise RuntimeError("; ".join(r["error"] for r in rows))
    return {"summary": ", ".join(f"{r['shape']} {r['runs_together']}" for r in rows),
            "rows": rows, "tables": {"bundle_size: auto": rows}}


def gpu_hours(config_dir: Path, measured: Measured, device: torch.device) -> Result:
    """Each paper part's GPU-hours (fednorm.plan.Plan.gpu_hours) at the rates measured here:
    a (dataset, model) measured at another image size (ImageNet's 224x224 from Tiny-ImageNet's
    64x64) at the rate scaled by pixels; one not measured at the slowest measured rate."""
    import yaml

    from fednorm.plan import load_plan, merge

    if not measured.best:
        raise RuntimeError("no throughput was measured")
    by_part: dict[tuple[str, str], dict[str, Any]] = {}
    for row in measured.best.values():  # the slower shape of a part prices it
        old = by_part.get(row["part"])
        if old is None or row["images_per_s"] < old["images_per_s"]:
            by_part[row["part"]] = row
    slowest = min(r["images_per_s"] for r in by_part.values())
    notes: dict[tuple[str, str], str] = {}

    def rate_for(plan):
        """rate(part, R): a bundle of R runs' images/s (R None: the part's best bundle)."""
        def rate(part: tuple[str, str], runs: int | None = None) -> float:
            if part in by_part:
                return by_part[part]["images_per_s"] if runs is None \
                    else measured.part_rate(part, runs)
            same = [(key, r) for key, r in by_part.items() if key[1] == part[1]]
            size = next(c.image_size for c in plan.runs.values()
                        if (c.dataset, c.model) == part)
            if same:
                key, row = same[0]
                notes[part] = f"scaled by pixels from {row['image_size']}x" \
                              f"{row['image_size']} to {size}x{size}"
                return rate(key, runs) * row["image_size"] ** 2 / size**2
            notes[part] = "not measured: the slowest measured rate"
            return slowest if runs is None else min(rate(key, runs) for key in by_part)
        return rate

    rows = []
    paper = yaml.safe_load((config_dir / "config.yaml").read_text())
    hour = merge(paper, yaml.safe_load((config_dir / "hour.yaml").read_text()))
    plans = {"config/config.yaml (paper scale)": load_plan(paper),
             "config/hour.yaml (the CIFAR-10 profile)": load_plan(hour)}
    paper_plan = plans["config/config.yaml (paper scale)"]
    paper_rate = rate_for(paper_plan)
    measured_sizes = sorted({r for curve in measured.curves.values() for r in curve})
    # execution.images_per_second for config.yaml: each part's curve, bundle size -> images/s
    curves = {"/".join(part): {r: _readable(paper_rate(part, r)) for r in measured_sizes}
              for part in paper_plan.images_by_part()}
    for name, plan in plans.items():
        parts = {**plan.paper_parts(), "all": tuple(plan.runs)}
        rate = rate_for(plan)
        hours = plan.gpu_hours(rate, parts)
        in_bundles = plan.gpu_hours_in_bundles(rate, parts)
        assumed = plan.gpu_hours(lambda part: ASSUMED_RATE, parts)
        rows += [{"config": name, "part": part, "runs": len(parts[part]),
                  "gpu_hours_measured": h, "gpu_hours_in_its_bundles": in_bundles[part],
                  "gpu_hours_at_50k": assumed[part]}
                 for part, h in hours.items()]
    sizes = [{"shape": shape, "best_runs": row["runs"],
              "auto_runs": measured.auto.get(shape),
              "bundle_size": min(row["runs"], measured.auto.get(shape, row["runs"]))}
             for shape, row in measured.best.items()]
    rates = [{"dataset": d, "model": m, "images_per_s": r["images_per_s"], "runs": r["runs"],
              "measured": r.get("report", "here")} for (d, m), r in by_part.items()]
    paper_all, hour_all = (r for r in rows if r["part"] == "all")
    where = "in " + ", ".join(map(str, measured.reports)) if measured.reports else f"on {device}"
    return {"summary": f"paper scale {paper_all['gpu_hours_measured']:,.1f} GPU-hours at the "
                       f"best bundle, {paper_all['gpu_hours_in_its_bundles']:,.1f} in its "
                       f"bundles; the CIFAR-10 profile {hour_all['gpu_hours_measured']:.2f}, "
                       f"{hour_all['gpu_hours_in_its_bundles']:.2f} in its bundles; at the "
                       f"rates measured {where}; config.yaml's bundle_size: "
                       f"{min(s['bundle_size'] for s in sizes)}",
            "rows": rows, "bundle_sizes": sizes, "images_per_second": curves,
            "text": "execution.images_per_second measured (a config's `execution:` section; "
                    "fednorm plan and the cluster's runtime requests price each bundle at its "
                    "size):\n\n" + yaml.safe_dump({"execution": {"images_per_second": curves}},
                                                  default_flow_style=None, sort_keys=False),
            "notes": {f"{d}/{m}": t for (d, m), t in notes.items()},
            "tables": {"rates used (images/s, the best bundle of each part's slowest shape)": rates,
                       "GPU-hours per paper part": rows,
                       "bundle size per shape (fastest measured, capped by auto)": sizes,
                       "rates not measured": [{"part": f"{d}/{m}", "rate": t}
                                              for (d, m), t in notes.items()]}}


def _readable(rate: float) -> float | int:
    """A rate to 4 significant digits at least (an integer from 1,000 on)."""
    return round(rate) if rate >= 1000 else float(f"{rate:.4g}")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: bundle sizes are integers >= 1, "
                                         "comma-separated, e.g. 16,64")
    return tuple(sorted(set(sizes)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fednorm.gpucheck",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/gpu-check", help="report.md, report.json")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU, CI)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help="no step starts after this many seconds")
    parser.add_argument("--config-dir", default="config", help="config.yaml and hour.yaml")
    parser.add_argument("--fail", action="append", default=[], metavar="STEP",
                        help="make this step fail (tests that a failure is recorded)")
    parser.add_argument("--only", action="append", default=[], metavar="STEP",
                        help="run only the steps whose name starts so (repeatable; the "
                             "environment always runs), e.g. 'throughput resnet20_E100'")
    parser.add_argument("--sizes", type=_sizes, metavar="R,R,...",
                        help="the bundle sizes each throughput step times (default: the "
                             "shape's, 1,4,16,64)")
    parser.add_argument("--round-limit-s", type=float,
                        help="no larger R whose round is predicted to take longer "
                             f"(default {tp.Settings.round_limit_s:g})")
    parser.add_argument("--repeats", type=int, help="timings per rate, their median kept")
    parser.add_argument("--from-report", action="append", default=[], type=Path,
                        metavar="REPORT_JSON",
                        help="an earlier check's report.json: its rates count as measured "
                             "here (gpu_hours prices with the fastest of each shape)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    settings = tp.SMOKE if args.smoke else tp.Settings()
    settings = dataclasses.replace(settings, **{k: v for k, v in (
        ("round_limit_s", args.round_limit_s), ("repeats", args.repeats)) if v is not None})
    shapes = tp.SMOKE_SHAPES if args.smoke else tp.SHAPES
    if args.sizes:
        shapes = tuple(dataclasses.replace(s, sizes=args.sizes) for s in shapes)
    check = Check(Path(args.out), f"GPU check{' (smoke)' if args.smoke else ''} on {device}",
                  args.budget_s, context={"command": " ".join(sys.argv), "smoke": args.smoke})
    measured = Measured()
    for path in args.from_report:
        if not path.is_file():
            parser.error(f"--from-report {path}: no such file (an earlier check's report.json)")
        measured.load(path)
    if args.from_report:
        check.context["rates also from"] = ", ".join(map(str, args.from_report))

    unasked: set[str] = set()

    def step(name: str, work: Callable[[], Result]) -> None:
        def failing() -> Result:
            raise RuntimeError(f"step {name!r} failed on purpose (--fail)")
        if args.only and name != "environment" and not any(map(name.startswith, args.only)):
            unasked.add(check.skip(name, "not requested (--only)").name)
            return
        check.run(name, failing if name in args.fail else work)

    step("environment", lambda: environment(device))
    step("cuda_tests", lambda: cuda_tests(max(30.0, args.budget_s / 2)))
    step("peak_matmul", lambda: peak_matmul(device, settings, measured))
    for shape in shapes:
        step(f"throughput {shape.name}",
             lambda s=shape: shape_throughput(s, device, settings, measured))
    step("compile", lambda: compiled(shapes, device, settings))
    step("bundle_size_auto", lambda: bundle_size_auto(shapes, device, settings, measured))
    step("gpu_hours", lambda: gpu_hours(Path(args.config_dir), measured, device))
    # last: the profiler's cost on a GPU is unknown, and the steps above need no profile
    step("launches", lambda: launches(shapes, device, settings))
    failed = [s.name for s in check.steps if s.status != "ok" and s.name not in unasked]
    print(f"{check.out}/report.md: {len(check.steps) - len(failed)} of {len(check.steps)} "
          f"steps ok" + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
