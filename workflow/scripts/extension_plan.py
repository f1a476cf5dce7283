"""Snakemake script: the claims' tuning grids extended one value beyond a choice at an edge,
chosen from the first stage's runs (logic in fednorm.claims.extension)."""
import logging

from fednorm.claims.extension import extension_record
from fednorm.claims.stage2 import write_record
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary
from fednorm.plan import load_plan

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    plan = load_plan(snakemake.config)  # noqa: F821
    summary = read_summary(snakemake.input.summary, list(plan.runs))  # noqa: F821
record = extension_record(snakemake.params.claims.words, summary, plan)  # noqa: F821
write_record(record, snakemake.output[0])  # noqa: F821
logging.info("%d runs in %d jobs, %.0f s modelled: %s", len(record["runs"]), len(record["jobs"]),
             record["seconds"], "; ".join(f"{e['run_id']}: {', '.join(e['why'])}"
                                          for e in record["runs"]))
