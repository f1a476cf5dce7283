"""Snakemake script: the figures and tables of one folder from the summary (logic in
fednorm.figures). Each is drawn even when another fails; the job fails at the end, naming
every figure that could not be drawn and why (its log has the tracebacks)."""
import logging

import pandas as pd

from fednorm.figures import draw

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
summary = pd.read_csv(snakemake.input[0])  # noqa: F821
written, failed = [], []
for fig, stem in zip(snakemake.params.figures, snakemake.params.stems, strict=True):  # noqa: F821
    try:
        paths = draw(fig, summary, stem)
    except Exception as error:  # the others are still drawn, then the job fails
        logging.exception("figure %s", fig.name)
        failed.append(f"{fig.name}: {error}")
        continue
    written += map(str, paths)
    logging.info("wrote %s", [str(p) for p in paths])
if failed:
    raise RuntimeError("could not draw " + "; ".join(failed))
if sorted(written) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {written}, the rule declares {list(snakemake.output)}")  # noqa: F821
