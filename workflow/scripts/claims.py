"""Snakemake script: the claims ledger from the summary (logic in fednorm.claims)."""
import logging

import pandas as pd

from fednorm.claims import write_ledger

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
summary = pd.read_csv(snakemake.input.summary)  # noqa: F821
paths = write_ledger(snakemake.params.claims, summary, snakemake.params.stem)  # noqa: F821
if sorted(map(str, paths)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {paths}, the rule declares {list(snakemake.output)}")  # noqa: F821
logging.info("wrote %s", [str(p) for p in paths])
