"""Why FixBN falls below naive BN at E = 25 in the quick Fig 5 (experiment ``fixbn_momentum``:
LeNet width 8, 8x8 digits, Shards(2), 5 clients x 20, fixed 5 epochs = 200 local steps, so 8
rounds of E = 25; SGD lr 0.05 -> x0.1 at 50 % and 75 %, momentum 0.9 reset every round, weight
decay 1e-4; T* at 50 %; docs/history.md, "Root causes of the large contradictions"). A
diagnosis, not a speed benchmark.

For seeds 0 and 1 it prints: where T* falls in rounds and how many rounds remain after it;
the engine's test accuracy of BN and FixBN after every round (is BN still climbing, does FixBN
fall at the freeze?); the reference FixBN of the plain per-client loop
(benchmarks/root_cause_fixbn_fedtan.py, benchmarks/plain_fedavg.py) with the check that the
engine freezes the server's averaged statistics (float64); then the final accuracies of both,
one factor changed at a time: the budget (more rounds at the same E) and the freeze step.

Run: ``python benchmarks/investigations/root_cause_fixbn_e25.py`` (one thread; the runtime is
printed).
"""

from __future__ import annotations

import dataclasses
import time

import pandas as pd
import torch
from plain_fedavg import cell, engine, engine_curve, quick_run
from root_cause_fixbn_fedtan import frozen_statistics_check, reference_fixbn

from fednorm.norms import fixbn_freeze_step

SEEDS = (0, 1)


def with_epochs(cfg, factor: int):
    """``cfg`` with ``factor`` times the steps (and rounds), milestones at the same fractions."""
    steps = cfg.steps * factor
    return dataclasses.replace(cfg, steps=steps,
                               lr_milestones=tuple(m * factor for m in cfg.lr_milestones))


PROBES = [  # (label, change of the quick run): one factor at a time
    ("recipe: 5 epochs (8 rounds), T* 50 %", lambda c: c),
    ("10 epochs (16 rounds)", lambda c: with_epochs(c, 2)),
    ("20 epochs (32 rounds)", lambda c: with_epochs(c, 4)),
    ("T* at 75 % (round 6, the second lr decay)",
     lambda c: dataclasses.replace(c, fixbn_freeze=0.75)),
    ("T* at 25 % (round 2)", lambda c: dataclasses.replace(c, fixbn_freeze=0.25)),
]


def main() -> None:
    torch.set_num_threads(1)
    began, rows = time.perf_counter(), []
    for seed in SEEDS:
        base = quick_run("fixbn_momentum", normalizer="fixbn", client_momentum="reset",
                         local_steps=25, seed=seed)
        E, freeze = base.local_steps, fixbn_freeze_step(base)
        print(f"seed {seed}: {base.steps} steps = {base.steps // E} rounds of E = {E}; T* at "
              f"step {freeze} = round {freeze // E}, {(base.steps - freeze) // E} rounds after "
              f"it; lr milestones at steps {base.lr_milestones}")
        curves = {n: engine_curve(dataclasses.replace(base, normalizer=n, eval_every=E))
                  .set_index("step")["test_accuracy"] for n in ("bn", "fixbn")}
        print(pd.DataFrame(curves).mul(100).round(1).T.to_string())
        same, gap = frozen_statistics_check(base)
        ref, window, _ = reference_fixbn(base)
        print(f"seed {seed}: FixBN's statistics after T* minus naive BN's at T*: {same:.1e}; "
              f"reference's averaged buffers against the engine's (float64, relative): "
              f"{gap:.1e}; reference FixBN test accuracy {100 * ref.accuracy:.1f} %, its "
              f"training loss around T*: {window}")
        for label, change in PROBES:
            cfg = change(base)
            rows.append((seed, label, cell(engine(cfg)),
                         cell(engine(dataclasses.replace(cfg, normalizer="bn")))))
    table = pd.DataFrame(rows, columns=["seed", "probe (engine)", "FixBN", "naive BN"])
    print(table.to_string(index=False))
    print(f"runtime {time.perf_counter() - began:.0f} s (one thread)")


if __name__ == "__main__":
    main()
