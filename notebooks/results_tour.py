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
# # A tour of the results
#
# Open this after `make quick` (or any run of the pipeline): it reads a results folder and
# shows what each paper claims with our numbers beside it, a pivot that no figure draws, a
# figure redrawn with another metric, and the normalization error of each layer over training.
# Every number comes from the folder, through `fednorm.results` (the API the figures and the
# claims ledger use too: a run's final value, mean ± std over seeds, diverged runs left out
# and counted). See `docs/results.md`.
#
# **Parameters.** `RESULTS` and `FIGURES` (relative to the repository root, or absolute);
# the environment variables `FEDNORM_RESULTS` and `FEDNORM_FIGURES` override them (the tests
# run this notebook on the `.test/` DAG's folders that way).

# %% tags=["parameters"]
import os

RESULTS = os.environ.get("FEDNORM_RESULTS", "results/quick")
FIGURES = os.environ.get("FEDNORM_FIGURES", "figures/quick")

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from fednorm.plots import heatmap_figure, plot_curves, plot_final_vs
from fednorm.plots.table import table_data
from fednorm.results import (
    experiments,
    final_points,
    load_norm_error,
    load_summary,
    seed_stats,
    select,
)

# %matplotlib inline

ROOT = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "Snakefile").is_file())
results, figures = ROOT / RESULTS, ROOT / FIGURES
summary = load_summary(results)
print(f"{results}: {summary.run_id.nunique()} runs, {len(summary)} evaluation points")
print("experiments:", ", ".join(experiments(summary)))

# %% [markdown]
# ## One row per run
#
# `final_points` gives each run's final evaluation point (`at="max"`: its best) with its
# config columns: the frame to filter, group and pivot. A diverged run has `diverged` true
# and no values.

# %%
runs = final_points(summary)
runs[["run_id", "figure_group", "normalizer", "split", "local_steps", "seed", "status",
      "test_accuracy", "norm_error_mean"]].head()


# %% [markdown]
# ## What each paper claims, and our numbers
#
# A cell is the mean ± std over seeds of the runs' final test accuracy (%), `†` where seeds
# diverged (they are left out of the mean and counted). `table_data` is the function that
# writes the pipeline's tables.

# %%
def accuracy_table(rows: pd.DataFrame, row: str, col: str) -> pd.DataFrame:
    """Final test accuracy (%), mean ± std over seeds, one cell per (row, col)."""
    cells = table_data(rows, rows=row, cols=col)
    return cells.pivot(index=row, columns=col, values="cell").reindex(
        index=list(dict.fromkeys(cells[row])), columns=list(dict.fromkeys(cells[col])))


# %% [markdown]
# **FBN** (Guerraoui et al., 2405.14670), Fig 3: with DSGD, naive BN loses accuracy as the
# clients' data grow heterogeneous (γ → 0: one class per client), while FBN stays with
# centralized BN at every γ.

# %%
accuracy_table(select(summary, "fbn_gamma"), "normalizer", "heterogeneity")

# %% [markdown]
# **FixBN** (Zhong et al., 2303.06530), Fig 2: GN beats BN only in some regimes (few local
# steps E on non-IID splits); with more local steps BN is at least as good.

# %%
accuracy_table(select(summary, "fixbn_epochs"), "regime", "normalizer")

# %% [markdown]
# **FedTAN** (Wang et al., 2301.02982): FedTAN approaches centralized BN, where FedAvg with BN
# loses accuracy on non-IID data.

# %%
accuracy_table(select(summary, ["fedtan_methods", "fedtan_scheme", "fedtan_central"]),
               "normalizer", "split")

# %% [markdown]
# The claims ledger (written by the pipeline next to the figures) checks each number the
# papers state against ours; at a reduced scale most are "not comparable".

# %%
ledger_file = figures / "claims.csv"
if ledger_file.is_file():
    ledger = pd.read_csv(ledger_file)
    print(ledger["verdict"].value_counts().to_string())
    shown = ledger[["id", "source", "paper_value", "ours_mean", "ours_std", "n_seeds",
                    "n_diverged", "verdict"]]
else:
    shown = f"no {ledger_file}: the pipeline writes it with the figures"
shown

# %% [markdown]
# The claims the papers state in words (a method above another, a trend along an axis, two
# methods within δ points) are judged at any scale, each verdict a test at a stated error rate:
# `holds`, `contradicted`, `inconclusive` or `not run` (see `docs/claims.md`). Counts per
# paper and verdict, then the claims that our runs contradict, with the estimate, its interval
# and p.

# %%
words_file = figures / "claims_words.csv"
if words_file.is_file():
    words = pd.read_csv(words_file)
    print(pd.crosstab(words.paper, words.verdict).to_string())
    shown = words.loc[words.verdict == "contradicted",
                      ["id", "source", "relation", "margin", "low", "high", "n_seeds", "p",
                       "q", "detail"]]
else:
    shown = f"no {words_file}: the pipeline writes it with the figures"
shown

# %% [markdown]
# ## A new pivot: every method by local steps E
#
# The comparison's runs, per method and E: mean over splits and seeds of the final accuracy
# (diverged runs left out: `final_points` gives them no value), with the number of runs behind
# each cell. No figure of the pipeline draws this.

# %%
compare = runs[runs.run_id.isin(select(summary, ["compare", "compare_central"]).run_id)]
compare.assign(accuracy=100 * compare.test_accuracy).pivot_table(
    index="normalizer", columns="local_steps", values="accuracy", aggfunc=["mean", "count"]
).round(1)

# %% [markdown]
# The same question as a heatmap: FixBN against BN over splits × E (the FixBN paper's Fig 2
# compares GN with BN), each cell the mean over seeds, `†` where seeds diverged.

# %%
fig, cells = heatmap_figure(select(summary, "fixbn_curves"), rows="split", cols="local_steps",
                            compare="normalizer", values=["bn", "fixbn"],
                            title="FixBN vs BN, final test accuracy")
fig

# %% [markdown]
# ## A figure redrawn with another metric
#
# FBN's Fig 3a is final accuracy against γ; the same plot function draws the final training
# loss (and returns exactly the numbers drawn).

# %%
fig, ax = plt.subplots(figsize=(5, 3.5))
drawn = plot_final_vs(ax, select(summary, "fbn_gamma"), x="heterogeneity", y="train_loss",
                      logx="categorical")
ax.set(xlabel="heterogeneity γ (1 = iid)", ylabel="final train loss")
drawn

# %% [markdown]
# ## Normalization error per layer over training
#
# How far each BN layer's running variance (what the global model uses at test time) is from
# centralized BN's on the clients' current batches, at the most heterogeneous γ: one line per
# normalizer (colour) and layer (dash), mean over seeds.

# %%
errors = select(load_norm_error(results, summary), "fbn_gamma")
gamma = errors["heterogeneity"].min()
fig, ax = plt.subplots(figsize=(6, 3.5))
plot_curves(ax, errors[errors.heterogeneity == gamma], y="var_error",
            hue=["normalizer", "layer"])
ax.set(yscale="log", ylabel="|σ²_run − σ²| / σ²", title=f"γ = {gamma:g}")
seed_stats(errors[errors.heterogeneity == gamma], ["normalizer", "layer"], y="var_error",
           per=["run_id", "layer"])  # a series of evaluation points per run and layer
