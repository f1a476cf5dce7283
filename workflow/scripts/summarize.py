"""Snakemake script: results/summary.csv, or the first stage's summary (logic in
fednorm.summarize; a run whose files were cut short is set aside and named, and the job fails:
fednorm.integrity). With the claims' tuning extension (input `extension`) and second stage
(input `plan`), their runs join the plan."""
import logging

from fednorm.claims.stage2 import read_record
from fednorm.inputs import user_errors
from fednorm.plan import load_plan
from fednorm.plan.stage2 import stage2_runs
from fednorm.summarize import summarize

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    plan = load_plan(snakemake.config)  # noqa: F821
    for added in ("extension", "plan"):
        if added in snakemake.input.keys():  # noqa: F821
            plan = plan.with_runs(stage2_runs(read_record(snakemake.input[added])))  # noqa: F821
    frame = summarize(plan, snakemake.output[0])  # noqa: F821
logging.info("%d rows, %d runs", len(frame), frame["run_id"].nunique())
