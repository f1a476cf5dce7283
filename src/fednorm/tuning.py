"""Each method at its own learning rate, chosen on data held out of the training set.

One learning rate for every method misleads: a method whose best step size differs from the
common recipe's looks worse than it is (the Hybrid BN authors warn of it; FBN barely learns at
the FixBN recipe's step size on the quick digits). So a tuning experiment trains every method
at several ``lr_scale`` factors on the recipe's schedule, with ``val_fraction`` of the training
images held out (fednorm.data.arrays.hold_out), and :func:`select_by_validation` keeps, per
cell of a table, the factor whose final validation accuracy is best. The choice reads the
validation column alone: the test set only reports the chosen runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from fednorm.results import seed_stats

OVER = "lr_scale"  # the hyper-parameter chosen


def choices(rows: pd.DataFrame, cells: Sequence[str], by: str = "val_accuracy",
            over: str = OVER) -> pd.DataFrame:
    """Per combination of the ``cells`` columns: the ``over`` value whose runs' final ``by``
    (fednorm.results.run_values), averaged over the seeds, is highest. A value with a diverged
    run (status ``diverged``) or without any ``by`` is never chosen over one without; ties go
    to the smaller value. Only ``by`` is read among the metrics. Returns the ``cells``
    columns, ``over``, ``score`` (the mean ``by``; -inf: ruled out) and ``n_seeds``."""
    cells = list(cells)
    stats = seed_stats(rows, [*cells, over], y=by)
    ruled_out = (stats["n_diverged"] > 0) | (stats["n_seeds"] == 0)
    stats["score"] = stats["mean"].where(~ruled_out, float("-inf"))
    best = stats.sort_values([*cells, "score", over],
                             ascending=[True] * len(cells) + [False, True], kind="stable")
    best = best.groupby(cells, sort=False, dropna=False).head(1)
    return best[[*cells, over, "score", "n_seeds"]].reset_index(drop=True)


def select_by_validation(rows: pd.DataFrame, cells: Sequence[str], by: str = "val_accuracy",
                         over: str = OVER) -> pd.DataFrame:
    """The rows (every evaluation point) of the runs at each cell's chosen ``over`` value
    (:func:`choices`)."""
    chosen = choices(rows, cells, by, over)[[*cells, over]]
    return rows.merge(chosen, on=[*cells, over], how="inner")
