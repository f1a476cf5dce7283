"""Snakemake script: the unfinished runs of a job's bundles, one bundle after the other (logic
in fednorm.run.train_bundle)."""
import logging

import torch

from fednorm.config import run_config
from fednorm.run import train_bundle

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
torch.set_num_threads(snakemake.threads)  # noqa: F821
params = snakemake.params  # noqa: F821
for bundle in params.bundles:
    bundle_id = bundle["bundle_id"]
    cfgs = [run_config(values) for values in bundle["runs"]]
    logging.info("bundle %s: training %d runs: %s", bundle_id, len(cfgs),
                 [c.run_id for c in cfgs])
    statuses = train_bundle(cfgs, bundle["out_dirs"], bundle_id=bundle_id,
                            data_dir=params.data_dir, device=params.device)
    for cfg, status in zip(cfgs, statuses, strict=True):
        logging.info("bundle %s: %s finished with status %s", bundle_id, cfg.run_id, status)
