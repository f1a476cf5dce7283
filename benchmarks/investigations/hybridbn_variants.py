"""Hybrid BN against naive BN on the quick comparison, one change at a time: which of its two
corrections (issue 43) moves its gap to BN, on more seeds than make quick's first stage has.

    python benchmarks/investigations/hybridbn_variants.py config/config.yaml config/quick.yaml \\
        --data-dir data --seeds 0 1 2 --out results/hybridbn_variants

Takes the quick plan's Hybrid BN and naive BN runs of the ``compare`` and ``tuning``
experiments (Dir(0.1) and Shards(2), E = 1 and 5, lr x 1 and 4), trains each on ``--seeds``
as four variants of Hybrid BN, ``hybridbn_mixing`` (one shared d, or each client's own d: the
authors' code) x ``time_constants`` (the smoothing 0.002 a round as given, or scaled so that G
moves by the end of the run as far as over the paper's 500 rounds), a fifth with G unsmoothed
(``hybridbn_momentum: 1``: the root cause), and BN alongside (its runs do not change with the
keys). Bundles as the pipeline's (fednorm.plan.bundles), one thread.
Prints, per setting and variant, the mean final test accuracy and the paired margin Hybrid BN
- BN by seed with its t interval (95 %); writes every run's row to ``--out``/runs.csv.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from scipy import stats

from fednorm.config import bundle_key, with_values
from fednorm.plan import load_plan, merged_config
from fednorm.run import train_and_write

VARIANTS = {
    "shared d, given": {"hybridbn_mixing": "shared", "time_constants": "given"},
    "shared d, scaled": {"hybridbn_mixing": "shared", "time_constants": "scaled"},
    "own d, given": {"hybridbn_mixing": "client", "time_constants": "given"},
    "own d, scaled": {"hybridbn_mixing": "client", "time_constants": "scaled"},
    # the root cause: G unsmoothed, the pooled statistics of each round's start
    "own d, G unsmoothed": {"hybridbn_mixing": "client", "time_constants": "given",
                            "hybridbn_momentum": 1.0},
}


def runs(configs: list[str], seeds: list[int]) -> pd.DataFrame:
    """Every (setting, variant, seed) run as a row with its config."""
    plan = load_plan(merged_config(configs))
    ids = {*plan.experiments["compare"], *plan.experiments["tuning"]}
    base = [plan.runs[r] for r in sorted(ids)
            if plan.runs[r].normalizer in ("hybridbn", "bn") and not plan.runs[r].feature_norm]
    rows = []
    for cfg in base:
        variants = VARIANTS.items() if cfg.normalizer == "hybridbn" else [("BN", {})]
        for name, extra in variants:
            for seed in seeds:
                run = with_values(cfg, seed=seed, **extra)
                rows.append({"setting": f"{run.regime}, lr x {run.lr_scale:g}",
                             "variant": name, "seed": seed, "cfg": run})
    return pd.DataFrame(rows).drop_duplicates(subset=["setting", "variant", "seed"])


def train(frame: pd.DataFrame, out: Path, data_dir: str) -> pd.DataFrame:
    """Train the runs in bundles of equal bundle_key; the final test accuracy of each."""
    frame = frame.assign(key=[repr(bundle_key(c)) for c in frame["cfg"]])
    accuracy = {}
    for _, group in frame.groupby("key", sort=False):
        cfgs = list(group["cfg"])
        todo = [c for c in cfgs if not (out / c.run_id / "metrics.csv").exists()]
        if todo:
            train_and_write(todo, [out / c.run_id for c in todo], bundle_id=todo[0].run_id,
                         data_dir=data_dir)
        for c in cfgs:
            accuracy[c.run_id] = 100 * pd.read_csv(out / c.run_id / "metrics.csv").iloc[-1][
                "test_accuracy"]
    return frame.assign(accuracy=[accuracy[c.run_id] for c in frame["cfg"]])


def margins(frame: pd.DataFrame) -> pd.DataFrame:
    """Per setting and variant: mean accuracy, paired margin to BN, its 95 % t interval."""
    bn = frame[frame.variant == "BN"].set_index(["setting", "seed"])["accuracy"]
    out = []
    for (setting, variant), group in frame[frame.variant != "BN"].groupby(["setting",
                                                                           "variant"]):
        diff = (group.set_index(["setting", "seed"])["accuracy"] - bn).dropna()
        half = (stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / len(diff) ** 0.5
                if len(diff) > 1 else float("nan"))
        out.append({"setting": setting, "variant": variant, "seeds": len(diff),
                    "hybrid BN": group["accuracy"].mean(), "BN": bn.loc[setting].mean(),
                    "margin": diff.mean(), "low": diff.mean() - half,
                    "high": diff.mean() + half})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="results/hybridbn_variants")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    frame = train(runs(args.configs, args.seeds), out, args.data_dir)
    frame.drop(columns=["cfg", "key"]).to_csv(out / "runs.csv", index=False)
    print(margins(frame).round(1).to_markdown(index=False))


if __name__ == "__main__":
    main()
