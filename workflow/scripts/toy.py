"""Snakemake script: the 2-D normalization toy's figures (logic in fednorm.toy)."""
import logging
from pathlib import Path

from fednorm.toy import make_toy_figures

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
toy = snakemake.params.toy  # noqa: F821
paths = make_toy_figures(toy.settings, Path(snakemake.params.folder), toy.gammas, toy.seeds)  # noqa: F821
logging.info("wrote %s", [str(p) for p in paths])
