"""Command line: ``fednorm run CONFIG --out DIR`` trains one run without Snakemake.

Other commands: ``fednorm plan CONFIG`` validates a pipeline configuration (its claims file
included) and prints what it would train and draw; ``fednorm download-cifar10 --root DIR``
fetches the dataset once.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import torch
import yaml

from fednorm.config import ConfigError, run_config
from fednorm.data.cifar import DatasetUnavailable


def _load_yaml(path: str) -> dict:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def cmd_run(args: argparse.Namespace) -> int:
    from fednorm.run import train_and_evaluate

    cfg = run_config(_load_yaml(args.config), where=args.config)
    torch.set_num_threads(args.threads)
    status = train_and_evaluate(cfg, args.out, data_dir=args.data_dir, device=args.device)
    print(f"{cfg.run_id}: {status} -> {args.out}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from fednorm.claims import load_claims
    from fednorm.plan import load_plan, merge

    config: dict = {}
    for path in args.configs:  # later files override earlier ones, as Snakemake merges them
        config = merge(config, _load_yaml(path))
    plan = load_plan(config)
    for name, ids in plan.experiments.items():
        images = sum(plan.runs[r].training_images for r in ids)
        print(f"experiment {name}: {len(ids)} runs, {images / 1e9:.3g} G training images")
    print(f"{len(plan.runs)} distinct training runs in {len(plan.jobs)} jobs, "
          f"{len(plan.figures)} figures")
    for (dataset, model), images in plan.images_by_part().items():
        print(f"{dataset} / {model}: {images / 1e9:.3g} G training images (each run's counted "
              f"once)")
    if plan.claims:
        claims = load_claims(plan.claims, plan)
        for kind, listed in (("numeric", claims.numbers), ("in words", claims.words.claims)):
            papers = Counter(c.paper for c in listed)
            print(f"{len(listed)} claims {kind} in {plan.claims} ("
                  + ", ".join(f"{paper} {n}" for paper, n in papers.items()) + ")")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from fednorm.data.cifar import cache_cifar10

    print(cache_cifar10(args.root, download=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fednorm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one run from a YAML of run keys")
    run.add_argument("config", help="YAML mapping of RunConfig keys (unset keys: defaults)")
    run.add_argument("--out", required=True, help="directory for metrics.csv and run.json")
    run.add_argument("--data-dir", default="data", help="CIFAR-10 cache directory")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    run.add_argument("--threads", type=int, default=torch.get_num_threads())
    run.set_defaults(func=cmd_run)
    plan = sub.add_parser("plan", help="validate pipeline configs and count runs")
    plan.add_argument("configs", nargs="+", help="config/config.yaml [overrides.yaml ...]")
    plan.set_defaults(func=cmd_plan)
    dl = sub.add_parser("download-cifar10", help="download CIFAR-10 into a cache directory")
    dl.add_argument("--root", default="data")
    dl.set_defaults(func=cmd_download)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"fednorm: configuration error: {err}", file=sys.stderr)
        return 2
    except DatasetUnavailable as err:  # offline, no archive: the message says what to do
        print(f"fednorm: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
