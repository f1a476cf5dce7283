# fednorm-repro: the table of contents. Paper scale by default; the quick profile overrides it:
#   snakemake --cores N                                   (paper scale, needs CIFAR-10 and a GPU)
#   snakemake --cores 2 --configfile config/quick.yaml    (CPU, offline, minutes)
from fednorm.plan import load_plan

configfile: "config/config.yaml"

# The whole configuration is validated here, before any job starts.
PLAN = load_plan(config)

include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/summarize.smk"
include: "workflow/rules/plots.smk"

if PLAN.toy:

    include: "workflow/rules/toy.smk"


rule all:
    input:
        PLAN.figure_files(),
        PLAN.toy_files(),
        PLAN.paths.summary(),
