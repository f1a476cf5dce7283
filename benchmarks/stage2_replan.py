"""The second stage planned again, read-only, from a finished first stage: what this code buys
within the share (claims, modelled seconds, each claim's chance of a firm verdict at the second
look) beside what that stage's own plan.json bought, priced by the same chances
(docs/claims.md, The second stage). Reads ROOT/config/{config,quick}.yaml and ROOT's results;
writes nothing.

    python benchmarks/stage2_replan.py ROOT     (ROOT: a checkout after `make quick`)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

from fednorm.claims import stage2 as s2
from fednorm.claims.file import load_claims
from fednorm.claims.verdicts import compare_all, judge_compared
from fednorm.plan import load_plan
from fednorm.plan.pipeline import merged_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--profile", default="quick")
    args = parser.parse_args()
    root = args.root
    cfg = merged_config([root / "config/config.yaml", root / f"config/{args.profile}.yaml"])
    cfg["paths"] = {**cfg.get("paths", {}), "results": str(root / f"results/{args.profile}")}
    cfg["claims"] = str(root / "config/claims.yaml")
    plan = load_plan(cfg)
    assert plan.stage2 is not None
    words = load_claims(plan.claims, plan).words
    stage = Path(plan.paths.stage2_plan()).parent
    summary = pd.read_csv(stage / "summary_first.csv")
    compared = compare_all(words, summary)
    judged = judge_compared(words, compared, s2.LOOKS)
    priced = s2.modelled_seconds(plan)
    cap = plan.stage2.share * math.fsum(priced.values())
    wanted = s2.requests(judged, plan, plan.stage2, compared, words)
    chosen = s2.granted(wanted, cap, plan.runs, priced)
    power = {(k, p.claim): p.power for k in ("seeds", "budget")
             for p in s2.purchases(wanted, s2.SEEDS if k == "seeds" else ("budget",))}
    known, fresh, share = set(plan.runs), 0.0, 0.0
    for request in sorted(chosen, key=lambda r: r.kind not in s2.FRESH):
        cost = request.seconds(known, priced)
        known |= {a.cfg.run_id for a in request.runs}
        fresh, share = (fresh + cost, share) if request.kind in s2.FRESH else (fresh,
                                                                             share + cost)
    print(f"cap {cap:.1f} s (share {plan.stage2.share:g} of {cap / plan.stage2.share:.1f} s); "
          f"fresh seeds (outside it) {fresh:.1f} s; within it {share:.1f} s, "
          f"{len(known - set(plan.runs))} runs to train")
    old = json.loads(Path(plan.paths.stage2_plan()).read_text())
    for name, whys in (("this code", {f"{r.kind.split('+')[0]}: {r.claim}" for r in chosen}),
                       ("its plan.json", {w.split(" (")[0] for e in old["runs"]
                                          for w in e["why"]})):
        bought = sorted({tuple(w.split(": ")) for w in whys
                         if w.split(":")[0] in ("seeds", "budget", "recheck")})
        chances = [power.get((k, c), math.nan) for k, c in bought]
        expected = math.fsum(x for x in chances if not math.isnan(x))
        print(f"{name}: {len(bought)} purchases, expected firm verdicts {expected:.2f}")
        for (kind, claim), chance in zip(bought, chances, strict=True):
            print(f"  {kind:8s} {claim:48s} {chance:.2f}")


if __name__ == "__main__":
    main()
