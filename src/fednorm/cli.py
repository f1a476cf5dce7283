"""Command line: ``fednorm run CONFIG --out DIR`` trains one run without Snakemake.

Killed (SIGTERM, SIGUSR1, or even SIGKILL after a save), the same command continues from the
resume point it left in DIR (fednorm.fl.resume).

Other commands: ``fednorm plan CONFIG`` validates a pipeline configuration (its claims file
included) and prints what it would train and draw; ``fednorm download-cifar10 --root DIR``
fetches the dataset once.
"""

from __future__ import annotations

import argparse
import logging
import sys

import torch
import yaml

from fednorm.config import CHECKPOINT_MINUTES, ConfigError, run_config
from fednorm.data.cifar import DatasetUnavailable


def _load_yaml(path: str) -> dict:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def cmd_run(args: argparse.Namespace) -> int:
    """Train one run; stopped by SIGTERM or SIGUSR1, it saves its state in DIR and exits
    128 + the signal's number, and the same command run again continues from there."""
    from fednorm.fl.resume import Interrupted
    from fednorm.run import train_and_evaluate

    cfg = run_config(_load_yaml(args.config), where=args.config)
    if not args.checkpoint_minutes > 0:
        raise ConfigError(f"--checkpoint-minutes has value {args.checkpoint_minutes}; "
                          "allowed: a number of minutes > 0")
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # progress lines
    torch.set_num_threads(args.threads)
    try:
        status = train_and_evaluate(cfg, args.out, data_dir=args.data_dir, device=args.device,
                                    checkpoint_minutes=args.checkpoint_minutes)
    except Interrupted as stop:
        print(f"fednorm: {stop}", file=sys.stderr)
        return stop.exit_code
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
        print(f"experiment {name}: {len(ids)} runs")
    print(f"{len(plan.runs)} distinct training runs, {len(plan.figures)} figures")
    if plan.claims:
        claims = load_claims(plan.claims, plan)
        papers = {c.paper: sum(d.paper == c.paper for d in claims) for c in claims}
        print(f"{len(claims)} claims in {plan.claims} ("
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
    run.add_argument("--checkpoint-minutes", type=float, default=CHECKPOINT_MINUTES,
                     help="minutes between saves of the run's state to DIR/resume.pt "
                     "(also saved on SIGTERM and SIGUSR1; run again to resume)")
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
