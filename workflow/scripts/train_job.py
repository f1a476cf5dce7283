"""Snakemake script: the unfinished runs of a job's bundles, one bundle after the other, each
continued from its resume point when one was saved (logic in fednorm.run.train_job)."""
import logging
import sys

import torch

from fednorm.run import train_job

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
# warnings (a refused resume point, a stop on a signal) also on stderr: the cluster's job log
# keeps them when Snakemake clears the rule's log before a retry
stderr = logging.StreamHandler()
stderr.setLevel(logging.WARNING)
logging.getLogger().addHandler(stderr)
torch.set_num_threads(snakemake.threads)  # noqa: F821
params = snakemake.params  # noqa: F821
status = train_job(params.bundles, data_dir=params.data_dir, device=params.device,
                   checkpoint_minutes=params.checkpoint_minutes, together=params.together,
                   data_workers=params.data_workers, **params.execution)
if status:  # stopped by a signal, its state saved: the job failed, a retry continues it
    sys.exit(status)
