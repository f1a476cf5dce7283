"""The ledger's own null on a results folder: its time for N permutations (vectorized,
fednorm.claims.null.null_shares), its firm share and 95 % interval, and, for a few
permutations, the same verdicts from the slow path (the ledger judged again on each permuted
summary, fednorm.claims.words_ledger) with its time.

    python benchmarks/claims_null.py results/quick --permutations 200 --slow 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fednorm.claims.file import load_claims
from fednorm.claims.null import VERDICT, donors, null_codes, null_interval, null_shares, permuted
from fednorm.claims.words_ledger import words_ledger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results folder (summary.csv, stage2/)")
    parser.add_argument("--claims", default="config/claims.yaml")
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--slow", type=int, default=0, help="permutations checked the slow way")
    args = parser.parse_args()
    words = load_claims(args.claims).words
    summary = pd.read_csv(args.results / "summary.csv", low_memory=False)
    plan = args.results / "stage2" / "plan.json"
    looks = 1
    if plan.is_file():  # the null is on the first stage's runs, as the claims rule judges it
        record = json.loads(plan.read_text())
        looks = int(record["looks"])
        added = {e["run_id"] for e in record["runs"] if not e["planned"]}
        summary = summary[~summary["run_id"].isin(added)]
    began = time.perf_counter()
    null = null_shares(words, summary, permutations=args.permutations, looks=looks)
    share, low, high = null_interval(null)
    print(f"{args.permutations} permutations in {time.perf_counter() - began:.1f} s: "
          f"{int((null['holds'] + null['contradicted']).sum())} firm of "
          f"{int(null['judged'].sum())} judged, {share:.2%} [{low:.2%}, {high:.2%}]")
    for k in range(args.slow):
        draw = donors(summary, np.random.default_rng(100 + k))
        fast = [VERDICT[c] for c in null_codes(words, summary, [draw], looks)[0]]
        began = time.perf_counter()
        slow = words_ledger(words, permuted(summary, np.random.default_rng(100 + k)), looks)
        print(f"slow path, permutation {k}: {time.perf_counter() - began:.1f} s; verdicts "
              f"equal: {fast == slow['verdict'].tolist()}")


if __name__ == "__main__":
    main()
