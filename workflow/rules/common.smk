# Input functions and settings shared by the rules. Paths come from PLAN.paths alone.
import re

from fednorm.data.cifar import CACHE_NAME

RESULTS = PLAN.paths.results
FIGURES = PLAN.paths.figures
DATA = PLAN.paths.data
EXECUTION = PLAN.execution


def bundle_rule_name(bundle_id):
    """A bundle's rule: 'train_' and its id as an identifier (e.g. train_fbn_E1_x16_3f2a9c1d7e)."""
    return "train_" + re.sub(r"\W", "_", bundle_id)


def job_priority(run_ids):
    """A training job's Snakemake priority: the training images of its runs, in 10^5 (a proxy
    for its time; the bigger ones start first)."""
    return sum(PLAN.runs[r].steps * PLAN.runs[r].n_clients * PLAN.runs[r].batch_size
               for r in run_ids) // 100_000


def bundle_dataset(run_ids):
    """A bundle of CIFAR-10 runs waits for the data rule; synthetic runs need no input."""
    cifar10 = any(PLAN.runs[r].dataset == "cifar10" for r in run_ids)
    return [f"{DATA}/{CACHE_NAME}"] if cifar10 else []
