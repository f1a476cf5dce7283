"""Snakemake script: the claims ledger from the summary (logic in fednorm.claims; a summary cut
short is removed and named, and the job fails: fednorm.integrity.read_summary)."""
import logging

from fednorm.claims import write_ledger
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    summary = read_summary(snakemake.input.summary, snakemake.params.runs)  # noqa: F821
paths = write_ledger(snakemake.params.claims, summary, snakemake.params.stem)  # noqa: F821
if sorted(map(str, paths)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {paths}, the rule declares {list(snakemake.output)}")  # noqa: F821
logging.info("wrote %s", [str(p) for p in paths])
