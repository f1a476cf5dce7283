"""Snakemake script: one training run (logic in fednorm.run.train_and_evaluate)."""
import logging
from pathlib import Path

import torch

from fednorm.config import run_config
from fednorm.run import train_and_evaluate

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
torch.set_num_threads(snakemake.threads)  # noqa: F821
cfg = run_config(snakemake.params.run)  # noqa: F821
status = train_and_evaluate(
    cfg,
    Path(snakemake.output.metrics).parent,  # noqa: F821
    data_dir=snakemake.params.data_dir,  # noqa: F821
    device=snakemake.params.device,  # noqa: F821
)
logging.info("%s finished with status %s", cfg.run_id, status)
