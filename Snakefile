# fednorm-repro: the table of contents. Paper scale by default; the quick profile overrides it:
#   snakemake --cores N                                   (paper scale, needs CIFAR-10 and a GPU)
#   snakemake --cores 2 --configfile config/quick.yaml    (CPU, offline, minutes)
# then the HTML report of every figure and table: the same command with --report report.html
from fednorm.claims import calibration_file, ledger_files, load_claims, prereg_file
from fednorm.inputs import user_errors
from fednorm.plan import load_plan

configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"

# The whole configuration, the claims file included, is validated here, before any job starts;
# a bad value or file is one line and exit 2 (FEDNORM_DEBUG=1: the traceback instead).
with user_errors():
    PLAN = load_plan(config)
    CLAIMS = load_claims(PLAN.claims, PLAN) if PLAN.claims else ()

include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/summarize.smk"
include: "workflow/rules/plots.smk"

if PLAN.toy:

    include: "workflow/rules/toy.smk"


if CLAIMS:

    include: "workflow/rules/claims.smk"


if REPORT:

    include: "workflow/rules/report.smk"


rule all:
    input:
        PLAN.figure_files(),
        PLAN.toy_files(),
        PLAN.paths.summary(),
        ledger_files(PLAN),
        calibration_file(PLAN),
        prereg_file(PLAN),
        [entry.caption for entry in REPORT.values()],
