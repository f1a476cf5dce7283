"""Snakemake script: the claims ledgers from the summary, the numbers' and the words' (logic in
fednorm.claims and fednorm.claims.words; a summary cut short is removed and named, and the job
fails: fednorm.integrity.read_summary)."""
import logging

from fednorm.claims import write_ledger
from fednorm.claims.words import write_words
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    summary = read_summary(snakemake.input.summary, snakemake.params.runs)  # noqa: F821
claims = snakemake.params.claims  # noqa: F821
paths = write_ledger(claims.numbers, summary, snakemake.params.stem)  # noqa: F821
paths += write_words(claims.words, summary, snakemake.params.words_stem)  # noqa: F821
if sorted(map(str, paths)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {paths}, the rule declares {list(snakemake.output)}")  # noqa: F821
logging.info("wrote %s", [str(p) for p in paths])
