"""Snakemake script: the claims' second stage, chosen from the first stage's runs and the tuning
extension's (logic in fednorm.claims.stage2)."""
import logging

from fednorm.claims.stage2 import measured_seconds, read_record, stage2_record, write_record
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary
from fednorm.plan import load_plan
from fednorm.plan.stage2 import stage2_runs

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    plan = load_plan(snakemake.config)  # noqa: F821
    plan = plan.with_runs(stage2_runs(read_record(snakemake.input.extension)))  # noqa: F821
    summary = read_summary(snakemake.input.summary, list(plan.runs))  # noqa: F821
record = stage2_record(snakemake.params.claims.words, summary, plan)  # noqa: F821
write_record(record, snakemake.output[0])  # noqa: F821
costs = plan.stage2.costs()
logging.info("cost model (fednorm.plan.costs): the first stage %.0f s modelled (%d of %d runs' "
             "shapes in the table, the rest by training images), %.0f s measured (wall_time_s, "
             "reported only); the second stage %.0f s modelled, %d runs in %d jobs",
             record["first_seconds"], sum(costs.covers(c) for c in plan.runs.values()),
             len(plan.runs), sum(measured_seconds(summary, plan).values()), record["seconds"],
             len(record["runs"]), len(record["jobs"]))
logging.info("; ".join(f"{e['run_id']}: {', '.join(e['why'])}" for e in record["runs"]))
