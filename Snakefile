# fednorm-repro: the table of contents. A bare `snakemake --cores N` runs the quick profile
# (real digits, CPU, offline, minutes); the other scales are named profiles:
#   snakemake --profile workflow/profiles/cifar10    (every claim on CIFAR-10, one GPU)
#   snakemake --profile workflow/profiles/paper      (the papers' scale, a GPU cluster's)
# Each merges its config file over config/config.yaml (the paper scale, every key); so does
# any --configfile given on the command line, in place of config/quick.yaml. Snakemake finds
# profiles/default (keep-going and the resume settings) by itself, under every profile.
# The HTML report of every figure and table: the same command with --report report.html.
from fednorm.claims import calibration_file, ledger_files, load_claims, prereg_file
from fednorm.inputs import user_errors
from fednorm.plan import load_plan
from fednorm.preflight import before_first_job, check_data

configfile: "config/config.yaml"


if not workflow.overwrite_configfiles:

    configfile: "config/quick.yaml"


report: "workflow/report/workflow.rst"

# The whole configuration, the claims file included, is validated here, before any job starts;
# a bad value or file is one line and exit 2 (FEDNORM_DEBUG=1: the traceback instead).
with user_errors():
    PLAN = load_plan(config)
    CLAIMS = load_claims(PLAN.claims, PLAN) if PLAN.claims else ()

# The datasets the plan needs, one line each that is missing (a dry run lists them and goes
# on); a run checks the device too (where its jobs run here) and stops before its first job
# on anything it cannot fetch itself.
MISSING = check_data(PLAN) if workflow.is_main_process else []


onstart:
    before_first_job(PLAN, MISSING, workflow.local_exec)


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
