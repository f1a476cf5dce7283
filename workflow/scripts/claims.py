"""Snakemake script: the claims ledgers from the summary, the numbers' and the words' (logic in
fednorm.claims: judged in fednorm.claims.words_ledger, calibrated in
fednorm.claims.calibration, written in fednorm.claims.render; a summary cut short is removed
and named, and the job fails: fednorm.integrity.read_summary), and the pre-registration
(fednorm.claims.prereg), checked against the committed one: the job fails where the rule, the
claims file, the design or the engine revision of a run differ from it; the header names the
engine revisions of the runs judged."""
import logging
from pathlib import Path

from fednorm.claims import write_ledger
from fednorm.claims.calibration import calibrate, calibration_lines
from fednorm.claims.comparisons import compare_all
from fednorm.claims.power import design_seeds, powers
from fednorm.claims.prereg import (
    design,
    prereg_line,
    preregistration,
    revisions_line,
    run_revisions,
    verified,
    write_prereg,
)
from fednorm.claims.render import write_words
from fednorm.claims.words_ledger import words_ledger
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary
from fednorm.io import write_csv
from fednorm.plan import load_plan

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
claims = snakemake.params.claims  # noqa: F821
words = claims.words
with user_errors():  # the rule, the claims file, the design and the runs' engine as committed
    plan = load_plan(snakemake.config)  # noqa: F821
    summary = read_summary(snakemake.input.summary, snakemake.params.runs)  # noqa: F821
    prereg = verified(preregistration(snakemake.input.claims,  # noqa: F821
                                      plan_design=design(plan, claims),
                                      runs=run_revisions(summary)), plan.claims_prereg)
paths = write_ledger(claims.numbers, summary, snakemake.params.stem)  # noqa: F821
table = words_ledger(words, summary, powers(words, design_seeds(words, plan)))
calibration = calibrate(words, compare_all(words, summary))
header = [*calibration_lines(calibration, words.rule.alpha), "", prereg_line(prereg), "",
          revisions_line(prereg)]
paths += write_words(table, words, snakemake.params.words_stem, header)  # noqa: F821
write_csv(snakemake.output.calibration, calibration)  # noqa: F821
paths += [Path(snakemake.output.calibration),  # noqa: F821
          write_prereg(prereg, snakemake.output.prereg)]  # noqa: F821
if sorted(map(str, paths)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {paths}, the rule declares {list(snakemake.output)}")  # noqa: F821
logging.info("wrote %s", [str(p) for p in paths])
