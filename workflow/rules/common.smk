# Input functions and settings shared by the rules. Paths come from PLAN.paths alone.
from fednorm.data.cifar import CACHE_NAME

RESULTS = PLAN.paths.results
FIGURES = PLAN.paths.figures
DATA = PLAN.paths.data
EXECUTION = config.get("execution", {})


wildcard_constraints:
    run_id=r"[^/]+",
    figure=r"[^.]+(/[^.]+)*",


def get_dataset(wildcards):
    """A CIFAR-10 run waits for the data rule; synthetic runs need no input."""
    cfg = PLAN.runs[wildcards.run_id]
    return [f"{DATA}/{CACHE_NAME}"] if cfg.dataset == "cifar10" else []


def get_run_config(wildcards):
    return PLAN.runs[wildcards.run_id].identity()


def get_figure(wildcards):
    return PLAN.figures[wildcards.figure]
