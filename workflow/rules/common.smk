# Input functions and settings shared by the rules. Paths come from PLAN.paths alone.
import os
import re

from fednorm.data import CACHES
from fednorm.report import captions, entries

RESULTS = PLAN.paths.results
FIGURES = PLAN.paths.figures
DATA = PLAN.paths.data
EXECUTION = PLAN.execution
RUN_IDS = list(PLAN.runs)  # the runs the summary must hold rows of
# Every rule's software: used with --use-conda (--sdm conda), ignored without it (the rules
# then run in the environment Snakemake runs in). Relative to workflow/rules/.
ENV = "../envs/fednorm.yaml"
# The files the HTML report shows (snakemake --report report.html), by path (fednorm.report)
REPORT = {entry.file: entry for entry in entries(PLAN, CLAIMS)}


def bundle_rule_name(bundle_id):
    """A bundle's rule: 'train_' and its id as an identifier (e.g. train_fbn_E1_x16_3f2a9c1d7e)."""
    identifier = re.sub(r"\W", "_", bundle_id)
    return f"train_{identifier}"


def job_priority(run_ids):
    """A training job's Snakemake priority: the training images of its runs, in 10^5 (a proxy
    for its time; the bigger ones start first)."""
    return PLAN.training_images(run_ids) // 100_000


def bundle_dataset(run_ids):
    """A bundle waits for the cache of each dataset of its runs that has one (CIFAR-10,
    MNIST-5k, Tiny-ImageNet: rule dataset_cache); synthetic runs need no input."""
    datasets = sorted({PLAN.runs[r].dataset for r in run_ids} & set(CACHES))
    return [f"{DATA}/{CACHES[d]}" for d in datasets]


def data_dir(wildcards, input):
    """Where a training job finds its dataset's cache: the folder of its input (a synthetic
    bundle has none, and makes its data itself)."""
    return os.path.dirname(input[0]) if input else DATA


def output_folder(wildcards, output):
    return os.path.dirname(output[0])


def output_stem(wildcards, output):
    return os.path.splitext(output[0])[0]


def reported(files):
    """The files, each one the report shows flagged with report(): its caption, category and
    labels (fednorm.report.entries).

    Snakemake 9 reads a caption from an .rst file and renders it with Jinja, from the job's
    `snakemake` object (params, config, ...): nothing in it tells one output of a job from
    another, and a figures job draws a whole folder. So each file gets a caption file of its
    own, written by the rule report_captions (workflow/rules/report.smk) from the config. The
    path is absolute: Snakemake resolves a relative one from the rule file's folder."""
    return [report(f, caption=os.path.abspath(REPORT[f].caption), category=REPORT[f].category,
                   labels=REPORT[f].labels) if f in REPORT else f for f in files]


def caption_texts(wildcards):
    """The captions' reStructuredText, in the order of REPORT: computed only when the
    report_captions job is planned (a function: parsing the workflow does not pay for it)."""
    texts = captions(PLAN, CLAIMS)
    return [texts[entry.caption] for entry in REPORT.values()]


def stage2_jobs(wildcards):
    """The second stage's training jobs, once its checkpoint has chosen its runs (an input
    function: Snakemake evaluates it again after the checkpoint)."""
    from fednorm.claims.stage2 import read_record

    record = read_record(checkpoints.stage2_plan.get().output[0])
    return [PLAN.paths.stage2_job(job) for job in record["jobs"]]


def extension_jobs(wildcards):
    """The tuning extension's training jobs, once its checkpoint has chosen its runs (an input
    function: Snakemake evaluates it again after the checkpoint)."""
    from fednorm.claims.stage2 import read_record

    record = read_record(checkpoints.tuning_extension.get().output[0])
    return [PLAN.paths.extension_job(job) for job in record["jobs"]]


def tuned_summary_inputs(wildcards):
    """The tuned summary's inputs: every file of every run of the plan, the extension's
    training jobs' records and its plan (its runs join the summary)."""
    return {"runs": PLAN.run_files(tuple(PLAN.runs)), "extended": extension_jobs(wildcards),
            "extension": PLAN.paths.extension_plan()}


def summary_inputs(wildcards):
    """The summary's inputs: every file of every run of the plan and, with a second stage, the
    extension's and the second stage's training jobs' records and plans (their runs join the
    summary)."""
    inputs = {"runs": PLAN.run_files(tuple(PLAN.runs))}
    if PLAN.stage2:
        inputs.update(tuned_summary_inputs(wildcards), stage2=stage2_jobs(wildcards),
                      plan=PLAN.paths.stage2_plan())
    return inputs


def claims_inputs(wildcards):
    """The claims rule's inputs: the summary (both stages' runs, with a second stage) and the
    claims file."""
    return {"summary": PLAN.paths.summary(), "claims": PLAN.claims}
