"""Snakemake script: the report's captions, one .rst per file the report shows (their text
comes from fednorm.report, through the rule's params)."""
import logging

from fednorm.io import write_text

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
for path, text in zip(snakemake.output, snakemake.params.texts, strict=True):  # noqa: F821
    write_text(path, text)
logging.info("wrote %d captions", len(snakemake.output))  # noqa: F821
