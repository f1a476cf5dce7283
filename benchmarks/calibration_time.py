"""The time of the ledger's bootstrap (fednorm.claims.calibration.calibrate) on a ledger of the
quick profile's shape: 55 judged claims on 6 seeds, 27 ``greater`` of two units (two splits),
9 ``best`` of four pairs (five methods), 7 trends of three adjacent pairs (four levels), 12
``within`` of two pairs; 135 units, settings at 3 to 8 points of seed noise on the 0.1-point
lattice. One process, one thread; the claims' rates are printed as the ledger's header would.

    OMP_NUM_THREADS=1 python benchmarks/calibration_time.py              # 10,000 replicates
    # 65.6 s of CPU (158 s wall) on a 2-core Intel Xeon at a load of 10 (84b2784), 90 % of it
    # in the rule's verdict_codes: its t tails (scipy.stats.t, 43 %) and outlier flags (14 %)
    OMP_NUM_THREADS=1 python benchmarks/calibration_time.py --claims 8   # a slice of it
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from fednorm.claims import calibration as cal
from fednorm.claims.comparisons import Comparison, Side
from fednorm.claims.stats import trend_contrast
from fednorm.claims.words import Relation, Rule, Words

SEEDS = 6
SHAPE = (("greater", 27, 2), ("best", 9, 5), ("trend", 7, 4), ("within", 12, 2))


def _side(name: str, values: np.ndarray) -> Side:
    seeds = pd.Index(range(len(values)), name="seed")
    runs = pd.DataFrame({"diverged": False, "value": values}, index=seeds)
    return Side(name, runs, pd.DataFrame({"run_id": [name]}))


def _unit(label: str, sides: tuple[Side, ...], coefs) -> Comparison:
    return Comparison(label, sides, tuple(float(c) for c in coefs), ("experiment",))


def ledger(rng: np.random.Generator) -> tuple[Words, dict[str, list[Comparison]]]:
    """The ledger of the module's docstring: each claim its own settings, a seed's common
    part shared by them."""
    claims, compared = [], {}
    for kind, count, width in SHAPE:
        for i in range(count):
            cid = f"{kind}-{i}"
            k = width * 2 if kind in ("greater", "within") else width
            block = rng.normal(0, 3.0, SEEDS)
            x = np.round((rng.uniform(40, 90, (k, 1)) + block + rng.uniform(3, 8, (k, 1))
                          * rng.standard_normal((k, SEEDS))) * 10) / 10
            s = [_side(f"{cid}-s{j}", x[j]) for j in range(k)]
            if kind == "best":
                units = [_unit(f"vs {j}", (s[0], s[j]), (1, -1)) for j in range(1, k)]
            elif kind == "trend":
                units = [_unit(f"{j}", (s[j], s[j + 1]), (1, -1)) for j in range(k - 1)]
                units = units if k > 2 else [_unit("t", tuple(s), -trend_contrast(k))]
            else:
                units = [_unit(f"{j}", (s[2 * j], s[2 * j + 1]), (1, -1)) for j in range(width)]
            compared[cid] = units
            claims.append(Relation(cid, "quick", "§", cid, ("experiment",), kind,
                                   delta=3.0 if kind == "within" else None))
    return Words(claims=tuple(claims), rule=Rule(lattice=0.1)), compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=cal.REPLICATES)
    parser.add_argument("--claims", type=int, default=None, help="the first N claims only")
    args = parser.parse_args()
    words, compared = ledger(np.random.default_rng(0))
    if args.claims:
        words = Words(claims=words.claims[:args.claims], rule=words.rule)
    units = sum(len(compared[c.id]) for c in words.claims)
    start, cpu = time.perf_counter(), time.process_time()
    table = cal.calibrate(words, compared, replicates=args.replicates)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{len(words.claims)} claims, {units} units, {args.replicates:,} replicates a claim "
          f"and boundary, {len(cal.WORLDS)} worlds: {seconds:.1f} s ({cpu:.1f} s of CPU)")
    print("\n".join(cal.calibration_lines(table, words.rule.alpha)))


if __name__ == "__main__":
    main()
