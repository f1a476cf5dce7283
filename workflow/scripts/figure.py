"""Snakemake script: the figures and tables of one folder from the summary (logic in
fednorm.figures.draw_all: each is drawn even when another fails; the job then fails, naming
every figure that could not be drawn and why; its log has the tracebacks)."""
import logging

import pandas as pd

from fednorm.figures import draw_all

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
summary = pd.read_csv(snakemake.input[0])  # noqa: F821
written = draw_all(snakemake.params.figures, summary, snakemake.params.stems)  # noqa: F821
if sorted(map(str, written)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {written}, the rule declares {list(snakemake.output)}")  # noqa: F821
