"""How often a claim keeps its verdict on other seeds: the claims in words judged on each of
several results folders of one profile run on disjoint seeds (``seed_offset``), every pair of
folders compared (fednorm.claims.across), for each one-sided ``alpha`` asked (the claims
file's own unless given).

    make quick && make quick-other-seeds && make quick-third-seeds   # seeds 0-1, 2-3, 4-5
    python benchmarks/verdict_stability.py results/quick results/quick_other_seeds \
        results/quick_third_seeds --alpha 0.05 0.1

Prints, per rule, each pair's share of the claims judged in both that keep their
verdict, the flips between holds and contradicted, the firm verdicts per ledger and the mean
share; then the claims that moved in any pair. One pair is one draw: the mean over pairs is
the figure to quote (docs/claims.md, Verdicts across seeds).

``--regroup K`` then pools the folders' runs and compares every pair of disjoint sets of K
seeds too (fednorm.claims.across.regroupings: three folders of two seeds give 27 pairs of two
seeds, 9 of three; each grid keeps its own share of seeds, a one-seed grid one), with each
claim's count of pairs in which it moved:

    python benchmarks/verdict_stability.py results/quick results/quick_other_seeds \
        results/quick_third_seeds --regroup 2 3
"""

from __future__ import annotations

import argparse
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

import pandas as pd

from fednorm.claims import load_claims
from fednorm.claims.across import FIRM, compare_ledgers, regroupings
from fednorm.claims.words_ledger import words_ledger
from fednorm.plan import load_plan, merged_config
from fednorm.results import load_summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results folders, one per seed set")
    parser.add_argument("--config", nargs="+", default=["config/config.yaml", "config/quick.yaml"],
                        help="the profile's config files, merged in order (the claims file's)")
    parser.add_argument("--alpha", type=float, nargs="*", default=None,
                        help="one-sided error rates; default: the claims file's alpha")
    parser.add_argument("--regroup", type=int, nargs="*", default=None, metavar="K",
                        help="pool the folders' seeds and compare every pair of disjoint sets "
                             "of K seeds")
    args = parser.parse_args()
    if len(args.results) < 2 and not args.regroup:
        parser.error("at least two results folders (disjoint seed sets)")
    plan = load_plan(merged_config(args.config))
    words = load_claims(plan.claims, plan).words
    summaries = {r: load_summary(r) for r in args.results}
    pooled = pd.concat(summaries.values(), ignore_index=True) if args.regroup else None
    for alpha in args.alpha or [words.rule.alpha]:
        judged = replace(words, rule=replace(words.rule, alpha=alpha))
        rule = f"alpha {alpha:g}"
        if len(args.results) > 1:
            pairs = ((a, b, summaries[a], summaries[b])
                     for a, b in itertools.combinations(args.results, 2))
            report(rule, judged, pairs)
        for k in args.regroup or []:
            report(f"{rule}, {k} seeds a set", judged,
                   ((" ".join(map(str, a)), " ".join(map(str, b)), runs_a, runs_b)
                    for a, b, runs_a, runs_b in regroupings(pooled, k)))


def report(rule: str, words, pairs: Iterable[tuple[str, str, pd.DataFrame, pd.DataFrame]]
           ) -> None:
    """Each pair's share of kept verdicts, flips and firm verdicts; the mean; the movers."""
    ledgers: dict[str, pd.DataFrame] = {}

    def ledger(name: str, runs: pd.DataFrame) -> pd.DataFrame:
        if name not in ledgers:
            ledgers[name] = words_ledger(words, runs)
        return ledgers[name]

    rows, moved = [], Counter()
    for a, b, runs_a, runs_b in pairs:
        table = compare_ledgers(ledger(a, runs_a), ledger(b, runs_b))
        both = table[table.change != "not judged"]
        moved.update(both.loc[both.change != "same", "id"])
        rows.append({"pair": f"{a} | {b}", "judged": len(both),
                     "same %": round(100 * (both.change == "same").mean(), 1),
                     "flips": int((both.change == "flipped").sum()),
                     "flipped": " ".join(both.loc[both.change == "flipped", "id"]),
                     "firm a": int(ledgers[a].verdict.isin(FIRM).sum()),
                     "firm b": int(ledgers[b].verdict.isin(FIRM).sum())})
    frame = pd.DataFrame(rows)
    print(f"{rule}: {len(frame)} pairs, mean {frame['same %'].mean():.1f} % keep their verdict "
          f"(least {frame['same %'].min():.1f} %, {(frame['same %'] >= 90).sum()} pairs at 90 % "
          f"or more), {frame.flips.sum()} flips")
    print(frame.to_string(index=False))
    print("moved (pairs):", ", ".join(f"{c} ({n})" for c, n in moved.most_common()) or "none",
          "\n")


if __name__ == "__main__":
    main()
