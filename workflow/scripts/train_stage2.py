"""Snakemake script: one training job of the claims' second stage, its runs that are not
complete yet, then the job's record (logic in fednorm.claims.stage2 and fednorm.run)."""
import logging
import sys

import torch

from fednorm.claims.stage2 import job_bundles, read_record, write_record
from fednorm.plan import load_plan
from fednorm.run import train_job

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
torch.set_num_threads(snakemake.threads)  # noqa: F821
params = snakemake.params  # noqa: F821
record = read_record(snakemake.input.plan)  # noqa: F821
plan = load_plan(snakemake.config)  # noqa: F821
bundles, trained = job_bundles(record, snakemake.wildcards.job, plan)  # noqa: F821
status = train_job(bundles, data_dir=params.data_dir, device=params.device,
                   checkpoint_minutes=params.checkpoint_minutes, together=params.together,
                   data_workers=params.data_workers, **params.execution)
if status:  # stopped by a signal, its state saved: the job failed, a retry continues it
    sys.exit(status)
write_record({"job": snakemake.wildcards.job, "runs": trained}, snakemake.output[0])  # noqa: F821
