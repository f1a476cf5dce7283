"""``make gpu-quick``: the quick DAG on a GPU at 8 seeds, and what it rests on, in one
prepared command (``python -m fednorm.gpucheck.quick``; docs/speed.md, GPU check).

Steps, each timed and recorded as ``make gpu-check``'s are (fednorm.gpucheck.steps: a failure
recorded with its traceback, the others still run, the report rewritten after each), into
``--out`` (report.md, report.json) and a small JSON at ``--summary`` (benchmarks/gpu/):

1. ``environment``: the device, PyTorch, CUDA and cuDNN versions (fednorm.gpucheck);
2. ``wheelhouse``: Snakemake and mlxtend (the quick profile's 5,000 MNIST digits) installed
   with ``pip install --no-index --find-links`` from the wheelhouse that ``make wheelhouse``
   fills (``.wheelhouse/``: CPython 3.11 and 3.12, linux x86_64); without one, those installed;
3. ``throughput``: images/s of the engine for bundles of 1, 16 and 64 runs at ResNet-20's
   FedAvg shape (E = 2, 5 clients x 20; fednorm.gpucheck.throughput), with the local step's CUDA
   graph (execution.cuda_graph auto) and without (off), and at 16 runs under each
   execution.precision (float32, tf32, bf16; fednorm.fl.precision);
4. ``jobs_per_gpu``: 1, 2 and 4 training processes on the GPU at once (execution.jobs_per_gpu),
   each a bundle of 16 runs of that shape, timed over the same window: their images/s summed;
5. ``quick_dag``: ``snakemake --profile workflow/profiles/gpu-quick`` (config/quick.yaml's
   DAG on the real digits at 8 seeds, one training job on the GPU at a time: ``--resources
   gpu=1``), then from its outputs: each run.json's device and arithmetic (counted), the words
   ledger's verdicts (figures/gpu_quick/claims_words.csv: counts) and its calibration
   (claims_calibration.csv: each claim's false holds, contradictions and negligible verdicts in
   each of the bootstrap's worlds).

``--smoke``: the same steps at tiny sizes on the CPU (bundles of 1, 2, 4; 1 and 2 processes;
the DAG on .test/config.yaml's synthetic runs, its FBN experiments alone at 2 seeds, up to the
claims ledgers and their calibration). The check needs PyTorch, PyYAML, pandas, SciPy and
Matplotlib on the machine; Snakemake and mlxtend come from the wheelhouse.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import yaml

from fednorm.fl.precision import job_math
from fednorm.gpucheck import throughput as tp
from fednorm.gpucheck.check import environment, one_line, release
from fednorm.gpucheck.steps import Check, Result
from fednorm.io import write_json

BUDGET_S = 420  # no step starts after this; benchmarks/gpu/run.sh stops everything at 480 s
PROFILE = "workflow/profiles/gpu-quick"
WHEELHOUSE = Path(".wheelhouse")  # make wheelhouse: the wheels for CPython 3.11 and 3.12
NEEDED = {"snakemake": "snakemake", "mlxtend": "mlxtend"}  # import name -> pip name
SUMMARY = Path("results/gpu-quick/summary.json")  # outputs outside the tracked tree


@dataclasses.dataclass(frozen=True)
class Scale:
    """The sizes of the check: a GPU's, or a CPU's smoke test."""

    shape: tp.Shape
    settings: tp.Settings
    sizes: tuple[int, ...]  # runs a bundle, with and without the graph
    precision_runs: int  # the bundle timed under each precision
    jobs: tuple[int, ...]  # processes on the device at once
    job_runs: int  # runs of each process's bundle
    job_seconds: float  # the window each process is timed over


_SHAPES = {s.name: s for s in tp.SHAPES}
_SMOKE_SHAPES = {s.name: s for s in tp.SMOKE_SHAPES}
GPU = Scale(_SHAPES["resnet20_E2"], tp.Settings(), (1, 16, 64), 16, (1, 2, 4), 16, 5.0)
SMOKE = Scale(_SMOKE_SHAPES["resnet20_E2"], tp.SMOKE, (1, 2, 4), 2, (1, 2), 2, 0.3)
# The smoke DAG: .test/config.yaml's FBN experiments (its words claims compare them) at these
# seeds; every other experiment dropped
SMOKE_EXPERIMENTS = ("fbn_gamma", "fbn_dirichlet")
SMOKE_SEEDS = (0, 1)


def wheelhouse(folder: Path) -> Result:
    """Snakemake and mlxtend installed from the wheels in ``folder`` (make wheelhouse: CPython
    3.11 and 3.12, linux x86_64) with pip and no index; without the folder, those this Python
    already has (an error naming make wheelhouse when it has not)."""
    missing = [pip for module, pip in NEEDED.items() if importlib.util.find_spec(module) is None]
    if not folder.is_dir():
        if missing:
            raise RuntimeError(f"no wheelhouse at {folder} (make wheelhouse, on a machine with "
                               f"PyPI, before the tree travels) and this Python lacks "
                               f"{', '.join(missing)}")
        found = versions()
        return {"summary": f"no wheelhouse at {folder}: the installed "
                           + ", ".join(f"{k} {v}" for k, v in found.items()),
                "versions": found, "wheels": 0}
    wheels = sorted(p.name for p in folder.glob("*.whl"))
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(folder),
           "--no-cache-dir", "--disable-pip-version-check", "-q"]
    # mlxtend without its dependencies: only mlxtend.data is used, and its pins (SciPy,
    # NumPy, pandas, scikit-learn at their newest) have no wheel in the wheelhouse
    for cmd in ([*pip, "snakemake"], [*pip, "--no-deps", "mlxtend"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n"
                               f"{(done.stdout + done.stderr)[-4000:]}")
    importlib.invalidate_caches()
    found = versions()
    return {"summary": f"{len(wheels)} wheels in {folder}; "
                       + ", ".join(f"{k} {v}" for k, v in found.items()),
            "versions": found, "wheels": len(wheels)}


def versions() -> dict[str, str]:
    """The installed versions of what the wheelhouse brings (read in a fresh process: this
    one may have looked before the install)."""
    code = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in "
            f"{list(NEEDED.values())!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-500:]}


def throughput(scale: Scale, device: torch.device) -> Result:
    """Images/s at each bundle size with the graph and without, then at ``precision_runs``
    under each precision (eager); a row that fails (out of memory, no graph) records why."""
    data = tp.data_for(scale.shape, scale.settings, device)
    rows: list[dict[str, Any]] = []

    def timed(runs: int, cuda_graph: str, precision: str) -> dict[str, Any]:
        row: dict[str, Any] = {"runs": runs, "cuda_graph": cuda_graph, "precision": precision,
                               "images_per_s": None, "note": ""}
        try:
            with job_math(precision):
                row.update(tp.engine_rate(scale.shape, runs, data, scale.settings,
                                          cuda_graph=cuda_graph, precision=precision))
        except Exception as err:  # recorded; the other rows go on
            row["note"] = one_line(err)
        finally:
            release(device)
        return row

    for runs in scale.sizes:
        rows += [timed(runs, graph, "float32") for graph in ("off", "auto")]
    rows += [timed(scale.precision_runs, "off", p) for p in ("tf32", "bf16")]
    done = [r for r in rows if r["images_per_s"]]
    if not done:
        raise RuntimeError(f"no rate was measured: {[r['note'] for r in rows]}")
    best = max(done, key=lambda r: r["images_per_s"])
    same = graph_equals_eager(scale, data)
    release(device)
    return {"summary": f"{scale.shape.paper}: best {best['images_per_s']:,.0f} images/s at "
                       f"R = {best['runs']} ({best['precision']}, graph {best['cuda_graph']}); "
                       f"graphed == eager bit for bit: {same}",
            "shape": scale.shape.name, "rows": rows, "graphed_equals_eager": same,
            "tables": {"images/s": rows}}


def rate_rows(env: dict[str, Any], scale: Scale, rows: list[dict[str, Any]], path: Path
              ) -> None:
    """The eager float32 rates as rows of fednorm.plan.prices' table (src/fednorm/plan/
    gpu_rates.csv): append them there to price plans at this device's rates."""
    from fednorm.plan.prices import COLUMNS

    cfg = tp.configs(scale.shape, 1, scale.settings)[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    lines = [",".join(COLUMNS)] + [",".join(map(str, (
        env.get("name"), env.get("torch"), env.get("cuda"), time.strftime("%Y-%m-%d"), commit,
        cfg.model, cfg.image_size, cfg.width, cfg.batch_size, cfg.participants,
        cfg.local_steps, r["runs"], round(r["images_per_s"]))))
        for r in rows if r["images_per_s"] and r["cuda_graph"] == "off"
        and r["precision"] == "float32"]
    path.write_text("\n".join(lines) + "\n")


def graph_equals_eager(scale: Scale, data: Any, rounds: int = 3) -> bool:
    """Whether a bundle of 2 runs trained ``rounds`` rounds with the local step's CUDA graph
    (execution.cuda_graph auto) ends in the same bits as eagerly (off): every parameter,
    statistic and momentum. execution.cuda_graph stays off by default until a GPU says true."""
    cfgs = tp.configs(scale.shape, 2, scale.settings)
    states = []
    for graph in ("off", "auto"):
        trainer = tp.bundle(cfgs, data, cuda_graph=graph)
        for k in range(rounds):
            trainer.round(k * cfgs[0].local_steps)
        state = trainer.state
        states.append([t.detach().cpu().clone() for part in (state.params, state.stats,
                                                             state.momenta)
                       for _, t in sorted(part.items())])
    return all(torch.equal(a, b) for a, b in zip(*states, strict=True))


def jobs_per_gpu(scale: Scale, device: torch.device, smoke: bool) -> Result:
    """For each number of jobs J: J processes (:func:`worker`) on the device at once, each a
    bundle of ``job_runs``, timed over the same window once all have warmed up."""
    rows = []
    for jobs in scale.jobs:
        results = concurrent(jobs, device, smoke)
        total = sum(r["images_per_s"] for r in results)
        rows.append({"jobs": jobs, "runs_each": scale.job_runs, "images_per_s": total,
                     "per_job": [round(r["images_per_s"]) for r in results]})
    one = rows[0]["images_per_s"]
    for row in rows:
        row["vs_one_job"] = row["images_per_s"] / one
    return {"summary": "; ".join(f"{r['jobs']} jobs {r['images_per_s']:,.0f} images/s "
                                 f"({r['vs_one_job']:.2f}x)" for r in rows),
            "rows": rows, "tables": {"jobs a GPU": rows}}


def concurrent(jobs: int, device: torch.device, smoke: bool) -> list[dict[str, Any]]:
    """The results of ``jobs`` worker processes started together (a ready folder as their
    barrier); an error if any fails."""
    import tempfile

    with tempfile.TemporaryDirectory() as ready:
        cmd = [sys.executable, "-m", "fednorm.gpucheck.quick", "--worker", ready,
               "--jobs", str(jobs), "--device", str(device), *(["--smoke"] if smoke else [])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in ("src", os.environ.get("PYTHONPATH")) if p)}
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env) for _ in range(jobs)]
        outs = [p.communicate(timeout=300) for p in procs]
    failed = [(p.returncode, err[-2000:]) for p, (_, err) in zip(procs, outs, strict=True)
              if p.returncode]
    if failed:
        raise RuntimeError(f"{len(failed)} of {jobs} jobs failed: {failed}")
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def worker(ready: Path, jobs: int, device: torch.device, scale: Scale) -> dict[str, Any]:
    """One job of :func:`concurrent`: its bundle built and a round trained, then, once all
    ``jobs`` are ready, rounds for ``job_seconds`` (synchronized each round)."""
    if device.type == "cpu":
        torch.set_num_threads(1)
    data = tp.data_for(scale.shape, scale.settings, device)
    cfgs = tp.configs(scale.shape, scale.job_runs, scale.settings)
    with job_math("float32"):  # as a training job's default: IEEE float32
        trainer = tp.bundle(cfgs, data)
        E = cfgs[0].local_steps
        trainer.round(0)
        tp.sync(device)
        (ready / str(os.getpid())).touch()
        deadline = time.monotonic() + 120
        while len(list(ready.iterdir())) < jobs and time.monotonic() < deadline:
            time.sleep(0.005)
        rounds, start = 0, time.perf_counter()
        while time.perf_counter() - start < scale.job_seconds:
            rounds += 1
            trainer.round(E * rounds)
            tp.sync(device)
        seconds = time.perf_counter() - start
    return {"images_per_s": rounds * tp.round_images(cfgs[0], scale.job_runs) / seconds,
            "rounds": rounds, "seconds": seconds}


def dag_configs(smoke: bool, out: Path) -> list[str]:
    """The DAG's config files after config/config.yaml: the profile's (config/quick.yaml,
    config/gpu_quick.yaml), or in smoke mode .test/config.yaml and an overlay written to
    ``out``: its FBN experiments alone at SMOKE_SEEDS, no second stage, its folders in
    ``out``, training jobs asking for the resource gpu (gpus_per_job 1) on the CPU."""
    folders = {"results": str(out / "dag/results"), "figures": str(out / "dag/figures"),
               "data": str(out / "dag/data")}
    if not smoke:  # the profile's configs, every folder under ``out``
        path = out / "gpu_quick_paths.yaml"
        path.write_text(yaml.safe_dump({"paths": folders}, sort_keys=False))
        profile = yaml.safe_load(Path(PROFILE, "config.yaml").read_text())["configfile"]
        return [*profile, str(path)]
    from fednorm.plan import merged_config

    test = merged_config(["config/config.yaml", ".test/config.yaml"])
    overlay = {"paths": folders,
               "execution": {"device": "cpu", "gpus_per_job": 1, "bundles_per_job": 8},
               # no second stage and no figures: the smoke DAG ends at the claims ledgers
               "stage2": None, "figures": dict.fromkeys(test.get("figures") or {}),
               "experiments": {name: ({"grid": {"seed": list(SMOKE_SEEDS)}}
                                      if name in SMOKE_EXPERIMENTS else None)
                               for name in test["experiments"]}}
    path = out / "smoke_dag.yaml"
    path.write_text(yaml.safe_dump(overlay, sort_keys=False))
    return [".test/config.yaml", str(path)]


def quick_dag(smoke: bool, out: Path, timeout_s: float) -> Result:
    """The DAG through the gpu-quick profile (smoke: up to the claims ledgers, on one core),
    then what its outputs say (:func:`dag_outputs`), also when Snakemake failed or was stopped
    at ``timeout_s`` (``exit``: its status, None when stopped); its log in ``out``/dag.log."""
    from fednorm.claims import calibration_file, ledger_files
    from fednorm.plan import load_plan, merged_config

    out.mkdir(parents=True, exist_ok=True)
    configs = dag_configs(smoke, out)
    plan = load_plan(merged_config(["config/config.yaml", *configs]))
    cmd = [sys.executable, "-m", "snakemake", "--profile", PROFILE, "--configfile", *configs]
    if smoke:
        cmd += ["--cores", "1", "--", *ledger_files(plan), *calibration_file(plan)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path("src").resolve()), os.environ.get("PYTHONPATH")) if p)}
    began = time.perf_counter()
    code, text = stopped_at(cmd, env, timeout_s)
    (out / "dag.log").write_text(text)
    result = {"command": " ".join(cmd), "exit": code,
              "seconds": time.perf_counter() - began, **dag_outputs(plan)}
    runs = result["runs"]
    result["summary"] = (f"exit {code}, {runs['complete']} of {runs['planned']} runs, devices "
                         f"{runs['devices']}; ledger {result['ledger']}; calibration: "
                         f"{len(result['calibration'])} claims")
    if code != 0:  # the step fails (main) with what the DAG wrote counted, and its log's end
        result["text"] = text[-4000:]
    return result


def stopped_at(cmd: list[str], env: dict[str, str], timeout_s: float) -> tuple[int | None, str]:
    """(exit status, output) of ``cmd``; past ``timeout_s`` it gets SIGTERM (Snakemake then
    stops its jobs, which SIGKILL would orphan on the GPU), SIGKILL 30 s later, and the status
    is None."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        text = proc.communicate(timeout=timeout_s)[0]
        return proc.returncode, text
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            text = proc.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            text = proc.communicate()[0]
        return None, text


def dag_outputs(plan: Any) -> dict[str, Any]:
    """What the DAG wrote: its runs' run.json counted by device, device name and arithmetic;
    the words ledger's verdicts counted; its calibration's rows (those that exist)."""
    import pandas as pd

    from fednorm.claims import CALIBRATION_NAME, WORDS_NAME

    metas = [json.loads(p.read_text()) for p in
             (Path(plan.paths.run_dir(r)) / "run.json" for r in plan.runs) if p.is_file()]
    runs = {"planned": len(plan.runs), "complete": len(metas),
            "devices": dict(Counter(m["device"] for m in metas)),
            "device_names": dict(Counter(m["device_name"] for m in metas)),
            "precision": dict(Counter(m.get("math", {}).get("precision") for m in metas)),
            "cuda_graph": dict(Counter(m.get("math", {}).get("cuda_graph") for m in metas)),
            "status": dict(Counter(m["status"] for m in metas))}
    words = Path(plan.paths.figure(WORDS_NAME, "csv"))
    calibration = Path(plan.paths.figure(CALIBRATION_NAME, "csv"))
    ledger = (dict(Counter(pd.read_csv(words)["verdict"])) if words.is_file() else None)
    rows = pd.read_csv(calibration).to_dict("records") if calibration.is_file() else []
    return {"runs": runs, "ledger": ledger, "calibration": rows,
            "ledger_file": str(words), "calibration_file": str(calibration),
            "tables": {"runs (run.json)": [{"what": k, "counts": str(v)}
                                           for k, v in runs.items()],
                       "the words ledger's verdicts": [{"verdict": k, "claims": v}
                                                      for k, v in (ledger or {}).items()],
                       "its calibration (the bootstrap's worlds)": rows}}


def summary(check: Check, smoke: bool, before: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """The small JSON: the device and versions, each step's status and numbers (tables and
    logs left out), after ``before``'s steps (benchmarks/gpu/prepare.py's: its preflight and
    install, when the file held them)."""
    steps = {s.name: {"status": s.status, "seconds": round(s.seconds, 1),
                      **{k: v for k, v in s.result.items() if k not in ("tables", "text")},
                      **({"error": s.error.strip().splitlines()[-1]} if s.error else {})}
             for s in check.steps}
    env = steps.get("environment", {})
    return {"check": "make gpu-quick" + (" (smoke)" if smoke else ""),
            "device": env.get("name"), "torch": env.get("torch"), "cuda": env.get("cuda"),
            "cudnn": env.get("cudnn"), "seconds": round(time.perf_counter() - check.start, 1),
            "steps": {**(before or {}).get("steps", {}), **steps}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fednorm.gpucheck.quick",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/gpu-quick", help="report.md, report.json")
    parser.add_argument("--summary", type=Path, default=SUMMARY, help="the small JSON report")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU, CI)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help="no step starts after this many seconds; the DAG gets what is left")
    parser.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # a jobs_per_gpu job
    parser.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    scale = SMOKE if args.smoke else GPU
    if args.worker:
        print(json.dumps(worker(args.worker, args.jobs, device, scale)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, f"make gpu-quick{' (smoke)' if args.smoke else ''} on {device}",
                  args.budget_s, context={"command": " ".join(sys.argv), "smoke": args.smoke})
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    before = json.loads(args.summary.read_text()) if args.summary.is_file() else None

    def step(name: str, work: Any) -> Any:  # the summary rewritten after every step
        done = check.run(name, work)
        write_json(args.summary, summary(check, args.smoke, before))
        return done

    step("environment", lambda: environment(device))
    step("wheelhouse", lambda: wheelhouse(args.wheelhouse))
    rates = step("throughput", lambda: throughput(scale, device))
    if rates.status == "ok":
        rate_rows(check.steps[0].result, scale, rates.result["rows"], out / "gpu_rates.csv")
    step("jobs_per_gpu", lambda: jobs_per_gpu(scale, device, args.smoke))
    left = args.budget_s - (time.perf_counter() - check.start)
    dag = step("quick_dag", lambda: quick_dag(args.smoke, out.resolve(), max(left, 60.0)))
    if dag.status == "ok" and dag.result["exit"] != 0:  # stopped, or a job failed
        dag.status = "failed"
        check.write()
    write_json(args.summary, summary(check, args.smoke, before))
    failed = [s.name for s in check.steps if s.status != "ok"]
    print(f"{out}/report.md, {args.summary}: {len(check.steps) - len(failed)} of "
          f"{len(check.steps)} steps ok" + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
