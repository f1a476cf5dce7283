"""How many runs of each experiment have settled at the end of their budget, by the claims
ledger's rule (fednorm.results.settling): the slope of test accuracy on step over each run's
last quarter of its budget, after its last lr drop (one intercept per run), is still climbing
when a one-sided t test at α = 0.05 rejects H0: it gains at most 1 point over that window;
settled = not shown climbing. Without a t test (df < 1: one run's window of two points) the
gain alone decides (> 1 point: climbing); a run without two points after its last drop shows
nothing and counts as settled.

    python benchmarks/settled_share.py results/quick [--experiment compare]

Prints one row per experiment: runs, runs settled (%), runs tested (%: with a t test, df >= 1),
median and largest gain over the window (points), and the same for the groups of seeds the
ledger judges (a setting's runs together, each with its own intercept).
"""

from __future__ import annotations

import argparse

import pandas as pd

from fednorm.results import experiments, load_summary, select, settling, varying_keys


def share(summary: pd.DataFrame, experiment: str) -> dict[str, object]:
    df = select(summary, experiment)
    ok = df[df["status"] != "diverged"]
    runs = settling(ok, ["run_id"])
    groups = settling(ok, varying_keys(ok) or ["run_id"])
    return {"experiment": experiment, "runs": len(runs),
            "runs settled %": round(100 * runs.settled.mean(), 1),
            "runs tested %": round(100 * runs.p.notna().mean(), 1),
            "median gain": round(100 * runs.gain.median(), 1),
            "max gain": round(100 * runs.gain.max(), 1),
            "groups": len(groups), "groups settled %": round(100 * groups.settled.mean(), 1),
            "groups tested %": round(100 * groups.p.notna().mean(), 1),
            "diverged": int(df.loc[df["status"] == "diverged", "run_id"].nunique())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--experiment", action="append")
    args = parser.parse_args()
    summary = load_summary(args.results)
    rows = [share(summary, e) for e in (args.experiment or experiments(summary))]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    total = table["runs"].sum()
    settled = (table["runs"] * table["runs settled %"]).sum() / 100
    print(f"\nall: {settled:.0f} of {total} runs settled ({100 * settled / total:.1f} %)")


if __name__ == "__main__":
    main()
