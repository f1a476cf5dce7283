"""Snakemake script: the figures and tables of one folder from the summary (logic in
fednorm.figures.draw_all: each is drawn even when another fails; the job then fails, naming
every figure that could not be drawn and why; its log has the tracebacks). A summary cut short
is removed and named, and the job fails (fednorm.integrity.read_summary)."""
import logging

from fednorm.figures import draw_all
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    summary = read_summary(snakemake.input[0], snakemake.params.runs)  # noqa: F821
written = draw_all(snakemake.params.figures, summary, snakemake.params.stems)  # noqa: F821
if sorted(map(str, written)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {written}, the rule declares {list(snakemake.output)}")  # noqa: F821
