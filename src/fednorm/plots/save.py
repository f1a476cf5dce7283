"""Write a figure together with the numbers it shows, all three files atomically."""

from __future__ import annotations

import contextlib
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from fednorm.io import atomic_path, write_csv

SUFFIXES = (".pdf", ".png", ".csv")
PNG_DPI = 150


def save_figure(fig: Figure, data: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``<stem>.pdf``, ``<stem>.png`` and ``<stem>.csv`` (``data``, no index); close ``fig``.

    All three are rendered to temporary files first and renamed onto their targets only once
    every one of them was written, so a failure leaves none of the targets half-written (and no
    temporary files). Parent directories are created. The PDF carries no creation date, so
    re-rendering the same figure gives the same bytes.
    """
    stem = Path(stem)
    targets = [stem.with_name(stem.name + suffix) for suffix in SUFFIXES]
    try:
        with contextlib.ExitStack() as stack:
            pdf, png, csv = (stack.enter_context(atomic_path(t)) for t in targets)
            fig.savefig(pdf, metadata={"CreationDate": None})
            fig.savefig(png, dpi=PNG_DPI)
            write_csv(csv, data)
    finally:
        plt.close(fig)
    return targets
