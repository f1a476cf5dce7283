"""Snakemake script: the claims' second stage, chosen from the first stage's runs (logic in
fednorm.claims.stage2)."""
import logging

from fednorm.claims.stage2 import stage2_record, write_record
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary
from fednorm.plan import load_plan

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    plan = load_plan(snakemake.config)  # noqa: F821
    summary = read_summary(snakemake.input.summary, list(plan.runs))  # noqa: F821
record = stage2_record(snakemake.params.claims.words, summary, plan)  # noqa: F821
write_record(record, snakemake.output[0])  # noqa: F821
logging.info("%d runs in %d jobs, about %.0f s of training (the first stage's: %.0f s): %s",
             len(record["runs"]), len(record["jobs"]), record["seconds"], record["first_seconds"],
             "; ".join(f"{e['run_id']}: {', '.join(e['why'])}" for e in record["runs"]))
