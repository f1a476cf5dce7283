"""Snakemake script: results/summary.csv (logic in fednorm.summarize; a run whose files were cut
short is set aside and named, and the job fails: fednorm.integrity)."""
import logging

from fednorm.inputs import user_errors
from fednorm.plan import load_plan
from fednorm.summarize import summarize

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    frame = summarize(load_plan(snakemake.config), snakemake.output[0])  # noqa: F821
logging.info("%d rows, %d runs", len(frame), frame["run_id"].nunique())
