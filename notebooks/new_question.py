# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Asking a new question
#
# The pipeline answers a new question with a config change: add a value to one axis of an
# experiment's grid, run, and compare the new runs with the old ones. Only the new runs train
# (a run is a pure function of its config, so the old ones are reused). This notebook does
# it for one axis value: it writes the change as a config file of its own, shows the runs it
# adds before anything trains, runs Snakemake up to the summary, and puts the new value beside
# the old ones. See `docs/results.md`.
#
# **Parameters** (environment variables of the same name with a `FEDNORM_` prefix override
# them): `CONFIGS`, the config files the pipeline runs with (space-separated, over
# `config/config.yaml`, as Snakemake's `--configfile`); `EXPERIMENT`, `AXIS` and `VALUE`, the
# value to add; `QUESTION`, where the change is written; `CORES`, Snakemake's `--cores`.

# %% tags=["parameters"]
import os

import yaml

CONFIGS = os.environ.get("FEDNORM_CONFIGS", "config/quick.yaml").split()
EXPERIMENT = os.environ.get("FEDNORM_EXPERIMENT", "fbn_gamma")
AXIS = os.environ.get("FEDNORM_AXIS", "heterogeneity")
VALUE = yaml.safe_load(os.environ.get("FEDNORM_VALUE", "0.5"))  # as a config writes it
QUESTION = os.environ.get("FEDNORM_QUESTION", "config/question.yaml")
CORES = int(os.environ.get("FEDNORM_CORES", "2"))

# %%
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt

from fednorm.plan import load_plan, merge
from fednorm.plots import plot_final_vs
from fednorm.results import load_summary, seed_stats, select, varying_keys

# %matplotlib inline

ROOT = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "Snakefile").is_file())
config = {}
for name in ("config/config.yaml", *CONFIGS):  # Snakemake's order: later files win
    config = merge(config, yaml.safe_load((ROOT / name).read_text()))
before = load_plan(config)
grid = config["experiments"][EXPERIMENT]["grid"]
assert AXIS in grid, f"{AXIS!r} is not an axis of {EXPERIMENT}'s grid; its axes: {list(grid)}"
print(f"{EXPERIMENT}: {len(before.experiments[EXPERIMENT])} runs; its grid: {grid}")

# %% [markdown]
# ## The change: one more value on the axis
#
# A config file of its own, passed after the others: Snakemake merges mappings key by key and
# replaces lists, so it names the whole new list of the axis and nothing else. A value the
# config cannot take is an error naming the key, the value and what is allowed, here, before
# any job starts.

# %%
change = {"experiments": {EXPERIMENT: {"grid": {AXIS: [*grid[AXIS], VALUE]}}}}
after = load_plan(merge(config, change))
(ROOT / QUESTION).write_text(yaml.safe_dump(change))
new = [after.runs[r] for r in after.experiments[EXPERIMENT] if r not in before.runs]
print((ROOT / QUESTION).read_text())
print(f"{len(new)} new runs:", *(f"  {cfg.run_id}" for cfg in new), sep="\n")

# %% [markdown]
# ## Run
#
# Snakemake up to the summary: the new runs train, the summary is rebuilt; the figures are
# left as they are (drop the target `summary.csv` from the command to redraw them too).
# Snakemake's progress is printed as it comes (a job's start and end, "N of M steps done").

# %%
command = [sys.executable, "-m", "snakemake", after.paths.summary(), "--cores", str(CORES),
           "--configfile", *CONFIGS, QUESTION]
print(" ".join(command[1:]), flush=True)
with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                      text=True, bufsize=1) as snakemake:
    assert snakemake.stdout is not None
    for line in snakemake.stdout:
        print(line, end="", flush=True)
assert snakemake.returncode == 0, f"snakemake failed (exit {snakemake.returncode}): see above"

# %% [markdown]
# ## Compare
#
# The experiment's final test accuracy along the axis, the old values and the new one, for each
# setting of its other axes (`varying_keys`: the config keys its runs differ in, seeds aside;
# the data split in words, `split`, for its partition and heterogeneity): mean over seeds (%),
# diverged runs left out and counted.

# %%
rows = select(load_summary(ROOT / after.paths.results), EXPERIMENT)
others = [k for k in varying_keys(rows) if k != AXIS]
if {"partition", "heterogeneity"} & set(others) and AXIS not in ("partition", "heterogeneity"):
    others = [k for k in others if k not in ("partition", "heterogeneity")] + ["split"]
if len(others) > 1:  # one line per setting of the other axes, named by their values
    rows = rows.assign(setting=rows[others].map(str).agg(", ".join, axis=1))
    others = ["setting"]
stats = seed_stats(rows, [*others, AXIS])
print(stats.pivot(index=others, columns=AXIS, values="mean").mul(100).round(1))
fig, ax = plt.subplots(figsize=(5, 3.5))
plot_final_vs(ax, rows, x=AXIS, hue=others, logx="categorical")
ax.axvline(sorted(rows[AXIS].unique()).index(VALUE), color="grey", lw=0.8, ls=":")
ax.set(xlabel=AXIS, ylabel="final test accuracy", title=f"{EXPERIMENT}: new {AXIS} = {VALUE:g}")
stats
