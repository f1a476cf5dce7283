"""Where a results folder's training time went: each bundle's wall time (its runs'
``wall_time_s`` in the summary, taken from each run.json; a bundle's time is its last run's,
the largest), summed per paper of the experiments its runs belong to (fbn_*, fixbn_*,
fedtan_*; compare_* and tuning: the all-methods comparison).

    python benchmarks/bundle_seconds.py results/quick
    python benchmarks/bundle_seconds.py results/quick --config config/config.yaml config/quick.yaml

Bundle-seconds are the way to compare parts of one run (docs/history.md, Time): they add the
two cores' time, so they exceed the wall time of `make quick`. Next to each, ``modelled``: what
the cost model that prices the claims' second stage gives the bundle (fednorm.plan.costs: its
runs' steps x the table's seconds per step of their shape), and the median and the 10 % and
90 % quantiles of the bundles' measured / modelled.
"""

from __future__ import annotations

import argparse

import pandas as pd

from fednorm.plan import load_plan, merged_config
from fednorm.plan.costs import load_step_costs
from fednorm.results import load_summary

COMPARISON = ("compare", "tuning")  # experiment prefixes of the all-methods comparison


def paper(figure_group: str) -> str:
    """The paper of a run's first experiment (``figure_group`` joins them by '|')."""
    first = figure_group.split("|")[0]
    return "comparison" if first.startswith(COMPARISON) else first.split("_")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--config", nargs="+", default=["config/config.yaml", "config/quick.yaml"],
                        help="the profile's config files, merged in order (its bundles)")
    args = parser.parse_args()
    plan = load_plan(merged_config(args.config))
    costs = plan.stage2.costs() if plan.stage2 else load_step_costs()
    runs = load_summary(args.results).drop_duplicates("run_id").set_index("run_id")
    rows = []
    for bundle, members in plan.bundles.items():
        present = runs.reindex([r for r in members if r in runs.index])
        if present.empty:
            continue
        papers = sorted({paper(g) for g in present["figure_group"].astype(str)})
        rows.append({"bundle": bundle, "paper": "+".join(papers),
                     "seconds": float(present["wall_time_s"].max()),
                     "modelled": sum(costs.run_seconds(plan.runs[r], len(members))
                                     for r in members)})
    frame = pd.DataFrame(rows)
    ratio = frame.seconds / frame.modelled
    print(f"{frame.seconds.sum():.0f} bundle-seconds in {len(frame)} bundles, "
          f"{frame.modelled.sum():.0f} modelled; measured / modelled by bundle: median "
          f"{ratio.median():.2f}, 10 % {ratio.quantile(0.1):.2f}, 90 % {ratio.quantile(0.9):.2f}")
    print(frame.groupby("paper")[["seconds", "modelled"]].agg(["sum", "count"]).round(0)
          .to_string())


if __name__ == "__main__":
    main()
