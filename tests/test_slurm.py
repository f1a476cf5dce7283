"""The DAG through a real SLURM: workflow/profiles/slurm (Snakemake's SLURM executor plugin) on
the single-node cluster of .ci/slurm-up, whose node declares one fake GPU. What each job asked
for is read back from SLURM's own records (`scontrol show job`), and a training job killed with
`scancel` must be submitted again, as the profile's `retries` says.

A subset of the .test DAG: through SLURM every job pays for its own Snakemake and Python
start-up and the training jobs queue for the one GPU (the whole .test DAG, 69 jobs, took over
15 minutes here), so this runs .test's fbn_gamma at two heterogeneities (two training jobs),
the summary and one figure (fbn/fig3a).

Skipped where SLURM or the plugin is missing, or where a SLURM not set up by .ci/slurm-up
answers (no jobs are sent to a real cluster); with CI=true it fails instead of skipping.
"""

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dag import assert_trained_as_in_one_go, work_copy

from fednorm.plan import load_plan, merge

# one worker under pytest-xdist (--dist loadgroup): the tests share the one-node SLURM, whose
# set-up (.ci/slurm-up) must not run twice at once
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "workflow/profiles/slurm/config.yaml"
SLURM_UP = ROOT / ".ci/slurm-up"
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "slurmctld", "slurmd", "munged")
TIMEOUT = 300  # s: the plugin waits forever when it cannot read job states; never this test
# Test-only settings, on the command line (the profile stays what a cluster user runs):
# without slurmdbd `sacct` fails and the plugin would wait forever, so job states come from
# squeue; the first status check comes after 1 s instead of 40 s.
PLUGIN_ARGS = ("--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks",
               "1")
# What a training job asks for; the node has 2 CPUs, so not the paper's 4 per GPU.
# One bundle a job (.test/config.yaml groups 8): a job per bundle is what the test reads back.
EXECUTION = {"gpus_per_job": 1, "cpus_per_gpu": 1, "mem_mb": 1000, "runtime": 10,
             "bundles_per_job": 1}


def _unavailable(reason):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: SLURM must run here, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def slurm():
    """A running single-node SLURM of .ci/slurm-up (started when missing, as root)."""
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        _unavailable("snakemake-executor-plugin-slurm is not installed (pip install -e .[slurm])")
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        _unavailable(f"{missing} not found (apt-get install -y slurm-wlm munge)")
    out = subprocess.run([str(SLURM_UP)], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        _unavailable(f".ci/slurm-up failed: {out.stderr.strip()}")


def _subset_config(work):
    """The work copy's config: config.yaml + .test/config.yaml, two bundles and one figure."""
    config = merge(*(yaml.safe_load((work / f).read_text())
                     for f in ("config/config.yaml", ".test/config.yaml")))
    gamma = merge(config["experiments"]["fbn_gamma"],
                  {"grid": {"heterogeneity": [0, 1], "seed": [0]}})  # one seed: two bundles
    config["experiments"] = {"fbn_gamma": gamma}
    config["figures"] = {"fbn/fig3a": config["figures"]["fbn/fig3a"]}
    del config["toy"]
    config["claims"] = None  # no claims ledger: its claims name runs this subset leaves out
    (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (work / "cluster.yaml").write_text(yaml.safe_dump({"execution": EXECUTION}))
    return load_plan(merge(config, {"execution": EXECUTION}))


def _jobs(work):
    """SLURM's record of every job run in `work`: one dict of scontrol's fields per job."""
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    jobs = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines()]
    return [j for j in jobs if j.get("WorkDir") == str(work)]


def _cancel_a_running_training_job(work, deadline):
    """scancel the first training job of `work` seen running; its rule's SLURM comment."""
    while time.monotonic() < deadline:
        for job in _jobs(work):
            if job["Comment"].startswith("rule_train_") and job["JobState"] == "RUNNING":
                subprocess.run(["scancel", job["JobId"]], check=True, timeout=30)
                return job["JobId"]
        time.sleep(0.2)
    return None


def _run_through_slurm(work, log):
    """Snakemake with the slurm profile in `work`; a training job is cancelled while it runs.
    Returns (Snakemake's exit status, the cancelled SLURM job id)."""
    cmd = [sys.executable, "-m", "snakemake", "--profile", "workflow/profiles/slurm",
           "--configfile", "cluster.yaml", *PLUGIN_ARGS]
    deadline = time.monotonic() + TIMEOUT
    with open(log, "w") as out:
        job = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=out, start_new_session=True)
        try:
            cancelled = _cancel_a_running_training_job(work, deadline)
            return job.wait(timeout=max(1.0, deadline - time.monotonic())), cancelled
        except subprocess.TimeoutExpired:
            pytest.fail(f"Snakemake through SLURM still running after {TIMEOUT} s:\n"
                        + log.read_text()[-3000:])
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(timeout=60)
            for left in _jobs(work):  # a killed Snakemake leaves its SLURM jobs behind
                if left["JobState"] in ("PENDING", "RUNNING"):
                    subprocess.run(["scancel", left["JobId"]], timeout=30)


@pytest.mark.slow
def test_training_jobs_ask_for_a_gpu_and_a_cancelled_job_is_resubmitted(slurm, tmp_path):
    profile = yaml.safe_load(PROFILE.read_text())
    assert profile["executor"] == "slurm" and profile["retries"] >= 1
    work = work_copy(tmp_path)
    plan = _subset_config(work)
    assert len(plan.bundles) == 2 and list(plan.figures) == ["fbn/fig3a"]

    status, cancelled = _run_through_slurm(work, tmp_path / "snakemake.log")
    log = (tmp_path / "snakemake.log").read_text()
    assert cancelled is not None, log[-3000:]
    assert status == 0, log[-3000:]

    jobs = _jobs(work)
    rules = {j["Comment"].split("_wildcards_")[0].removeprefix("rule_") for j in jobs}
    train_rules = {"train_" + re.sub(r"\W", "_", b) for b in plan.bundles}  # common.smk
    assert rules == {*train_rules, "summarize", "figures_fbn", "report_captions"}
    default = profile["default-resources"]
    for job in jobs:
        if job["Comment"].startswith("rule_train_"):
            # --gpus=1 --cpus-per-gpu=1 --mem 1000 -t 10, from the execution section
            assert job.get("TresPerJob") == "gres:gpu:1", job
            assert job.get("CpusPerTres") == "gres:gpu:1", job
            assert (job["MinMemoryNode"], job["TimeLimit"]) == ("1000M", "00:10:00"), job
        else:
            assert not any("gpu" in value for value in job.values()), job
            assert job["MinMemoryNode"] == f"{default['mem_mb']}M", job
            hours, minutes = divmod(default["runtime"], 60)
            assert job["TimeLimit"] == f"{hours:02d}:{minutes:02d}:00", job

    # the cancelled job was reported, and its rule submitted again and completed
    killed = next(j for j in jobs if j["JobId"] == cancelled)
    assert killed["JobState"] == "CANCELLED"
    assert f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in log
    again = [j for j in jobs if j["Comment"] == killed["Comment"] and j["JobId"] != cancelled]
    assert [j["JobState"] for j in again] == ["COMPLETED"] and int(again[0]["JobId"]) > int(
        cancelled)
    assert all(j["JobState"] == "COMPLETED" for j in jobs if j is not killed)

    summary = pd.read_csv(work / plan.paths.summary())
    assert set(summary.run_id) == set(plan.runs) and len(plan.runs) == 4
    for ext in ("pdf", "png", "csv"):
        assert (work / plan.paths.figures / f"fbn/fig3a.{ext}").stat().st_size > 0


def _long_run_config(work, steps):
    """One run whose training outlasts the moment the test warns it, saving its state every
    6 s (and on SLURM's signals); no figures."""
    config = merge(*(yaml.safe_load((work / f).read_text())
                     for f in ("config/config.yaml", ".test/config.yaml")))
    config["experiments"] = {"long": {"set": {"steps": steps, "eval_every": 250},
                                      "grid": {"normalizer": ["fbn"], "seed": [0]}}}
    config["figures"], config["claims"] = {}, None
    del config["toy"]
    (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    execution = {**EXECUTION, "checkpoint_minutes": 0.1}
    (work / "cluster.yaml").write_text(yaml.safe_dump({"execution": execution}))
    return load_plan(merge(config, {"execution": execution}))


def _warn_the_training_job_once_it_trains(work, resume_point, deadline):
    """SLURM's warning before a time limit, as `--signal=USR1@300` (the profile's slurm_extra)
    delivers it: SIGUSR1 to the job's steps (`scancel --signal`, not `--batch`), sent once the
    running training job has saved its first resume point (so it trains, with its handler in
    place). Returns the warned SLURM job id."""
    while time.monotonic() < deadline:
        running = [j for j in _jobs(work) if j["Comment"].startswith("rule_train_")
                   and j["JobState"] == "RUNNING"]
        if running and resume_point.exists():
            subprocess.run(["scancel", "--signal=USR1", running[0]["JobId"]], check=True,
                           timeout=30)
            return running[0]["JobId"]
        time.sleep(0.2)
    return None


@pytest.mark.slow
def test_a_warned_job_is_resubmitted_and_resumes(slurm, tmp_path):
    """Issue 22: a training job that SLURM warns of its time limit (SIGUSR1, as the profile's
    `--signal=USR1@300` sends it) saves its state and stops; it is submitted again (the
    profile's retries), continues from its resume point (its log says at which step),
    finishes, and its run equals the same run trained in one go; the resume point is gone.
    The warning is delivered by `scancel --signal=USR1` while the job trains instead of
    waiting out a real limit (minutes): what SLURM sends is the same signal to the same
    processes, and the profile's request for it is checked below."""
    profile = yaml.safe_load(PROFILE.read_text())
    assert re.fullmatch(r"'--signal=USR1@\d+'", profile["default-resources"]["slurm_extra"])
    work = work_copy(tmp_path)
    # 2,000 steps of 80 images: 18 s of training even at 9,000 images/s, so the job still
    # trains when its first resume point (after 6 s) is seen and the warning is sent
    steps = 2000
    plan = _long_run_config(work, steps)
    ((bundle_id, run_ids),) = plan.bundles.items()
    log = tmp_path / "snakemake.log"
    rule = "train_" + re.sub(r"\W", "_", bundle_id)  # common.smk
    cmd = [sys.executable, "-m", "snakemake", "--profile", "workflow/profiles/slurm",
           "--configfile", "cluster.yaml", *PLUGIN_ARGS]
    deadline = time.monotonic() + TIMEOUT
    with open(log, "w") as out:
        job = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=out, start_new_session=True)
        try:
            warned = _warn_the_training_job_once_it_trains(
                work, work / plan.paths.resume_point(bundle_id), deadline)
            status = job.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(timeout=60)
            for left in _jobs(work):
                if left["JobState"] in ("PENDING", "RUNNING"):
                    subprocess.run(["scancel", left["JobId"]], timeout=30)
    text = log.read_text()
    train = sorted((j for j in _jobs(work) if j["Comment"].startswith("rule_train_")),
                   key=lambda j: int(j["JobId"]))
    states = [j["JobState"] for j in train]
    assert warned is not None and status == 0, (states, text[-3000:])
    assert train[0]["JobId"] == warned and states[0] != "COMPLETED", states
    assert len(states) == 2 and states[-1] == "COMPLETED", states
    job_log = (work / plan.paths.results / "logs/train" / f"{bundle_id}.log").read_text()
    resumed = [int(n) for n in re.findall(rf"resumed at step (\d+) of {steps}", job_log)]
    assert resumed and all(0 < n < steps for n in resumed), job_log[-3000:]
    # the attempts' own logs (Snakemake clears the rule's log before each attempt)
    slurm_logs = "".join(p.read_text() for p in (work / ".snakemake/slurm_logs").glob(
        f"rule_{rule}/*.log"))
    assert re.search(r"stopped by signal SIGUSR1 at step \d+; state saved", slurm_logs), (
        slurm_logs[-3000:])
    assert not (work / plan.paths.resume_point(bundle_id)).exists()

    assert_trained_as_in_one_go(work, plan, bundle_id, run_ids, tmp_path / "whole")
