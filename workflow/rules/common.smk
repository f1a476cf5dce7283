# Input functions and settings shared by the rules. Paths come from PLAN.paths alone.
import os
import re

from fednorm.data.cifar import CACHE_NAME

RESULTS = PLAN.paths.results
FIGURES = PLAN.paths.figures
DATA = PLAN.paths.data
EXECUTION = PLAN.execution
# Every rule's software: used with --use-conda (--sdm conda), ignored without it (the rules
# then run in the environment Snakemake runs in). Relative to workflow/rules/.
ENV = "../envs/fednorm.yaml"


def bundle_rule_name(bundle_id):
    """A bundle's rule: 'train_' and its id as an identifier (e.g. train_fbn_E1_x16_3f2a9c1d7e)."""
    identifier = re.sub(r"\W", "_", bundle_id)
    return f"train_{identifier}"


def bundle_dataset(run_ids):
    """A bundle of CIFAR-10 runs waits for the data rule; synthetic runs need no input."""
    cifar10 = any(PLAN.runs[r].dataset == "cifar10" for r in run_ids)
    return [f"{DATA}/{CACHE_NAME}"] if cifar10 else []


def data_dir(wildcards, input):
    """Where a training job finds CIFAR-10: the folder of its input (a synthetic bundle has
    none, and makes its data itself)."""
    return os.path.dirname(input[0]) if input else DATA


def output_folder(wildcards, output):
    return os.path.dirname(output[0])


def output_stem(wildcards, output):
    return os.path.splitext(output[0])[0]
