"""Snakemake script: the claims ledgers from the summary, the numbers' and the words' (logic in
fednorm.claims and fednorm.claims.words_ledger; a summary cut short is removed and named, and
the job fails: fednorm.integrity.read_summary), the words ledger's own null
(fednorm.claims.null) and its pre-registration (fednorm.claims.prereg), checked against the
committed one: the job fails where the rule, the claims file or the design differ from it."""
import logging
from pathlib import Path

from fednorm.claims import write_ledger
from fednorm.claims.null import expected_false_lines, null_lines, null_shares
from fednorm.claims.prereg import design, prereg_line, preregistration, verified, write_prereg
from fednorm.claims.stage2 import read_record
from fednorm.claims.stats import per_look
from fednorm.claims.words_ledger import staged_ledger, write_words
from fednorm.inputs import user_errors
from fednorm.integrity import read_summary
from fednorm.io import write_csv
from fednorm.plan import load_plan

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
with user_errors():
    summary = read_summary(snakemake.input.summary, snakemake.params.runs)  # noqa: F821
claims = snakemake.params.claims  # noqa: F821
words = claims.words
plan = load_plan(snakemake.config)  # noqa: F821
with user_errors():  # the rule, the claims file and the design as committed before the runs
    prereg = verified(preregistration(snakemake.input.claims,  # noqa: F821
                                      plan_design=design(plan, claims)), plan.claims_prereg)
record = read_record(snakemake.input.plan) if "plan" in snakemake.input.keys() else None  # noqa: F821
looks = int(record["looks"]) if record else 1
paths = write_ledger(claims.numbers, summary, snakemake.params.stem)  # noqa: F821
table = staged_ledger(words, summary, record)
# the null on the first stage's runs (the second stage's were chosen by the real labels; a
# run it asked for that the plan already trains is a first-stage run)
added = {e["run_id"] for e in record["runs"] if not e["planned"]} if record else set()
null = null_shares(words, summary[~summary["run_id"].isin(added)], looks=looks)
lines = [*null_lines(null, per_look(words.rule.alpha, looks), table["verdict"]), "",
         *expected_false_lines(null, table, words.rule.alpha), "", prereg_line(prereg)]
paths += write_words(table, words, snakemake.params.words_stem, looks=looks,  # noqa: F821
                     null_lines=lines)
write_csv(snakemake.output.null, null)  # noqa: F821
paths += [Path(snakemake.output.null), write_prereg(prereg, snakemake.output.prereg)]  # noqa: F821
if sorted(map(str, paths)) != sorted(snakemake.output):  # noqa: F821
    raise RuntimeError(f"wrote {paths}, the rule declares {list(snakemake.output)}")  # noqa: F821
logging.info("wrote %s", [str(p) for p in paths])
