"""Command line: ``fednorm run CONFIG --out DIR`` trains one run without Snakemake.

Killed (SIGTERM, SIGUSR1, or even SIGKILL after a save), the same command continues from the
resume point it left in DIR (fednorm.fl.resume).

Other commands: ``fednorm plan CONFIG`` validates a pipeline configuration (its claims file
included) and prints what it would train and draw; ``fednorm download-cifar10 --root DIR``
fetches the dataset once; ``fednorm across-seeds A B`` compares two claims-in-words ledgers
of the same claims on disjoint seeds (fednorm.claims.across); ``fednorm prereg [--write
[--exploratory]]`` checks the committed pre-registration against the tree and the runs found,
or rewrites it (fednorm.claims.prereg).

PyTorch is imported by the commands that train or download only, so that ``fednorm plan`` (and
the workflow's dry run) works on a login node without it.

A bad configuration, a config file that is missing or not valid YAML, and an output folder that
cannot be created are each one line on stderr and exit 2 (fednorm.inputs.user_errors); the
option ``--debug`` of every command shows the traceback instead.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from fednorm.config import CHECKPOINT_MINUTES, DATA_WORKERS, ConfigError, run_config
from fednorm.inputs import DatasetUnavailable, read_yaml, user_errors, writable_folder


def _load_yaml(path: str) -> dict:
    return read_yaml(path, "config file") or {}


def cmd_run(args: argparse.Namespace) -> int:
    """Train one run; stopped by SIGTERM or SIGUSR1, it saves its state in DIR and exits
    128 + the signal's number, and the same command run again continues from there."""
    import torch

    from fednorm.fl.resume import Interrupted
    from fednorm.run import train_and_evaluate

    cfg = run_config(_load_yaml(args.config), where=args.config)
    writable_folder(args.out, "--out")  # before training, not when its files are written
    if not args.checkpoint_minutes > 0:
        raise ConfigError(f"--checkpoint-minutes has value {args.checkpoint_minutes}; "
                          "allowed: a number of minutes > 0")
    if args.data_workers < 0:
        raise ConfigError(f"--data-workers has value {args.data_workers}; allowed: an "
                          "integer >= 0 (0: decode in the training process)")
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # progress lines
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        status = train_and_evaluate(cfg, args.out, data_dir=args.data_dir, device=args.device,
                                    checkpoint_minutes=args.checkpoint_minutes,
                                    data_workers=args.data_workers)
    except Interrupted as stop:
        print(f"fednorm: {stop}", file=sys.stderr)
        return stop.exit_code
    print(f"{cfg.run_id}: {status} -> {args.out}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from fednorm.claims import load_claims
    from fednorm.plan import load_plan, merged_config

    plan = load_plan(merged_config(args.configs))
    for name, ids in plan.experiments.items():
        images = sum(plan.runs[r].training_images for r in ids)
        print(f"experiment {name}: {len(ids)} runs, {images / 1e9:.3g} G training images")
    print(f"{len(plan.runs)} distinct training runs in {len(plan.jobs)} jobs, "
          f"{len(plan.figures)} figures")
    for (dataset, model), images in plan.images_by_part().items():
        print(f"{dataset} / {model}: {images / 1e9:.3g} G training images (each run's counted "
              f"once)")
    given = args.images_per_second or plan.execution.images_per_second
    if given and not args.images_per_second and plan.execution.by_bundle_size:
        hours = plan.gpu_hours_in_bundles(plan.execution.rate)
        print("GPU-hours at execution.images_per_second (given, not the table's), each "
              "bundle at its size's rate, training images only: "
              + ", ".join(f"{part} {h:.3g}" for part, h in hours.items() if part != "all")
              + f"; all {hours['all']:.3g} (each run once)")
    elif given:
        rate = (lambda part: args.images_per_second) if args.images_per_second \
            else plan.execution.rate
        hours = plan.gpu_hours(rate)
        rates = f"{given:,.0f}" if not isinstance(given, Mapping) else ", ".join(
            f"{'/'.join(p)} {rate(p):,.0f}" for p in plan.images_by_part())
        print(f"GPU-hours at {rates} images/s (given, not measured; training images only, "
              f"every bundle at one rate): "
              + ", ".join(f"{part} {h:.3g}" for part, h in hours.items() if part != "all")
              + f"; all {hours['all']:.3g} (each run once)")
    if plan.execution.device != "cpu":
        _print_price(plan)
    _print_bundles(plan)
    if plan.stage2:
        print(f"claims' second stage (a checkpoint): the claims at tuned values on the fresh "
              f"seeds {list(plan.stage2.seeds)}, in {plan.stage2.jobs} jobs")
    if plan.claims:
        claims = load_claims(plan.claims, plan)
        for kind, listed in (("numeric", claims.numbers), ("in words", claims.words.claims)):
            papers = Counter(c.paper for c in listed)
            print(f"{len(listed)} claims {kind} in {plan.claims} ("
                  + ", ".join(f"{paper} {n}" for paper, n in papers.items()) + ")")
    return 0


def _hours(x: float) -> str:
    """Hours in three figures, without an exponent: 0.452, 15.8, 1,190."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _print_price(plan) -> None:
    """The plan's GPU-hours at the committed table of measured rates (fednorm.plan.prices):
    training, evaluation and the claims' second stage, each part, the device named, what rests
    on assumed rates said."""
    from fednorm.plan.prices import plan_price

    price = plan_price(plan)
    parts = price.parts
    every = parts["all"]
    print(f"GPU-hours on one {price.rates.label}, each run at its bundle's measured "
          f"images/s (src/fednorm/plan/gpu_rates.csv):")
    print("  training: " + ", ".join(f"{p} {_hours(h.training)}" for p, h in parts.items()
                                     if p != "all")
          + f"; all {_hours(every.training)} h, of which {_hours(every.assumed)} h at assumed "
          f"rates (shapes the table lacks, priced at its nearest measured shape)")
    print(f"  evaluation: {_hours(every.evaluation)} h (assumed: each test image a third of a "
          f"training image's time)")
    if plan.stage2:
        print(f"  claims' second stage: {price.stage2:.3g} h (the tuned methods' fresh seeds, "
              f"estimated at their first grid point)")
    print(f"  total: {_hours(price.total)} GPU-hours on one {price.rates.device}")


def _print_bundles(plan) -> None:
    """How full the plan's bundles are (each model's median run's bundle size) and what one
    more seed of every setting costs (fednorm.plan.seeds): on a CPU plan in modelled CPU-hours
    by the committed CPU cost table (fednorm.plan.costs), on a GPU plan in GPU-hours at the
    committed table of measured rates (fednorm.plan.prices)."""
    from fednorm.plan import seed_price
    from fednorm.plan.prices import load_rates, plan_price
    from fednorm.plan.seeds import with_one_more_seed

    price = seed_price(plan)
    (runs, more_runs), (packed, more_packed) = price.runs, price.bundles
    counts = Counter(cfg.model for cfg in plan.runs.values())
    print(f"median run's bundle size (runs of one model, cap "
          f"{plan.execution.planned_bundle_size}): " + ", ".join(
              f"{model} {r} ({counts[model]} runs)" for model, r in price.medians[0].items()))
    head = (f"one more seed of every setting: +{more_runs - runs} runs, {packed} -> "
            f"{more_packed} bundles (median run's bundle then "
            + ", ".join(f"{model} {r}" for model, r in price.medians[1].items()) + ")")
    if plan.execution.device == "cpu":
        costs = plan.step_costs()
        lacking = sum(not costs.covers(cfg) for cfg in plan.runs.values())
        by_images = f"; {lacking} of {runs} runs' shapes not in it, priced by training " \
            "images" if lacking else ""
        (before, after), (h0, h1) = price.seconds, price.gpu_hours or (0.0, 0.0)
        given = "" if price.gpu_hours is None else (
            f"; +{h1 - h0:.3g} GPU-hours at execution.images_per_second ("
            f"{'each bundle at its size' if plan.execution.by_bundle_size else 'one rate'}: "
            f"{h0:.3g} -> {h1:.3g})")
        print(f"{head}; price +{(after - before) / 3600:.3g} CPU-hours of one thread by the "
              f"committed CPU cost table (fednorm.plan.costs{by_images}: {before / 3600:.3g} "
              f"-> {after / 3600:.3g}, +{(after - before) / before:.0%})" + given)
        return
    rates = load_rates()
    before = plan_price(plan, rates).parts["all"]
    after = plan_price(with_one_more_seed(plan), rates).parts["all"]
    print(f"{head}; price +{_hours(after.total - before.total)} GPU-hours on one "
          f"{rates.device} (training and evaluation: {_hours(before.total)} -> "
          f"{_hours(after.total)})")


def cmd_download(args: argparse.Namespace) -> int:
    from fednorm.data.cifar import cache_cifar10

    print(cache_cifar10(args.root, download=True))
    return 0


def cmd_across_seeds(args: argparse.Namespace) -> int:
    """Print each claim whose verdict differs between two ledgers, then the counts and their
    pre-registrations; exit 1 when a claim flips between holds and contradicted, or when the
    two were judged under different pre-registrations (claims file or rule)."""
    from fednorm.claims.across import compare_files, preregistrations, summary

    table = compare_files(args.first, args.second)
    changed = table[table.change.isin(["moved", "flipped"])]
    if len(changed):
        print(changed.to_string(index=False))
    print(summary(table))
    line, differ = preregistrations(args.first, args.second)
    print(line)
    return int((table.change == "flipped").any() or differ)


def cmd_prereg(args: argparse.Namespace) -> int:
    """Print each difference between the committed pre-registration and the tree (and the
    engine revisions of the runs found in each profile's results folder), a line each, and exit
    1 where there is one; with --write, rewrite the record, dated today, unless a judged run of
    some profile exists (--exploratory: write it anyway, marked exploratory)."""
    import datetime

    from fednorm.claims.prereg import (
        check,
        fixed,
        found_runs,
        profile_plans,
        read_prereg,
        revision_lines,
        write_prereg,
    )

    if args.exploratory and not args.write:
        raise ConfigError("--exploratory has no --write; allowed: with --write (it marks the "
                          "record that --write writes)")
    plans = profile_plans()
    path, now = fixed(plans)
    found = {name: found_runs(plans[name], d) for name, d in now["designs"].items()}
    if args.write:
        some = next(((name, run) for name, runs in found.items() for run in runs), None)
        if some and not args.exploratory:
            name, run = some
            every = {plans[n].paths.run_dir(r) for n, runs in found.items() for r in runs}
            print(f"fednorm prereg --write: refused: {plans[name].paths.run_dir(run)} is a "
                  f"judged run of profile {name} ({len(every)} found): a "
                  "pre-registration is fixed before the runs (--exploratory writes it marked "
                  "exploratory)", file=sys.stderr)
            return 1
        record = {"fixed_on": datetime.date.today().isoformat(), **now,
                  **({"exploratory": True} if args.exploratory else {})}
        print(f"wrote {write_prereg(record, path)}")
        return 0
    committed = read_prereg(path)
    if committed is None:
        print(f"{path}: no record (--write writes it)")
        return 1
    differ = check(now, committed)
    for name, runs in found.items():
        differ += revision_lines(f"runs of profile {name} in {plans[name].paths.results}",
                                 Counter(runs.values()), committed.get("engine_revision"))
    marked = " (exploratory: written after judged runs existed)" if committed.get(
        "exploratory") else ""
    print("\n".join(differ) or f"{path}: the tree is as fixed on {committed['fixed_on']}"
          + marked)
    return int(bool(differ))


def cmd_docs_numbers(args: argparse.Namespace) -> int:
    from fednorm.docs_numbers import Sources, refresh

    root = Path(args.root)
    src = Sources(root, root / args.figures, root / args.results)
    for path in refresh(src):
        print(f"rewrote {path.relative_to(root)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fednorm", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of its one line")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", parents=[common], help="train one run from a YAML of run keys")
    run.add_argument("config", help="YAML mapping of RunConfig keys (unset keys: defaults)")
    run.add_argument("--out", required=True, help="directory for metrics.csv and run.json")
    run.add_argument("--data-dir", default="data", help="CIFAR-10 cache directory")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    run.add_argument("--threads", type=int, default=None,
                     help="CPU threads (default: PyTorch's own choice)")
    run.add_argument("--checkpoint-minutes", type=float, default=CHECKPOINT_MINUTES,
                     help="minutes between saves of the run's state to DIR/resume.pt "
                     "(also saved on SIGTERM and SIGUSR1; run again to resume)")
    run.add_argument("--data-workers", type=int, default=DATA_WORKERS,
                     help="processes decoding ImageNet-1K's JPEGs (0: in the training "
                     "process; the other datasets are in memory)")
    run.set_defaults(func=cmd_run)
    plan = sub.add_parser("plan", parents=[common], help="validate pipeline configs and count runs")
    plan.add_argument("configs", nargs="+", help="config/config.yaml [overrides.yaml ...]")
    plan.add_argument("--images-per-second", type=float, default=None,
                      help="print each paper part's GPU-hours at this training rate "
                      "(default: the config's execution.images_per_second, if set)")
    plan.set_defaults(func=cmd_plan)
    dl = sub.add_parser("download-cifar10", parents=[common],
                        help="download CIFAR-10 into a cache directory")
    dl.add_argument("--root", default="data")
    dl.set_defaults(func=cmd_download)
    across = sub.add_parser("across-seeds", parents=[common],
                            help="compare two claims_words.csv ledgers judged on other seeds")
    across.add_argument("first", help="e.g. figures/quick/claims_words.csv")
    across.add_argument("second", help="the same claims on other seeds (seed_offset)")
    across.set_defaults(func=cmd_across_seeds)
    prereg = sub.add_parser("prereg", parents=[common],
                            help="check the committed pre-registration against the tree")
    prereg.add_argument("--write", action="store_true",
                        help="rewrite it, dated today (refused once a judged run exists)")
    prereg.add_argument("--exploratory", action="store_true",
                        help="with --write: write it even after judged runs, marked exploratory")
    prereg.set_defaults(func=cmd_prereg)
    numbers = sub.add_parser("docs-numbers", parents=[common],
                             help="write the numbers of README.md and docs/ from their sources")
    numbers.add_argument("--root", default=".", help="the repository's root")
    numbers.add_argument("--figures", default="figures/quick", help="the ledger and figures")
    numbers.add_argument("--results", default="results/quick", help="the runs' folders")
    numbers.set_defaults(func=cmd_docs_numbers)
    args = parser.parse_args(argv)
    try:
        with user_errors(debug=args.debug):
            return args.func(args)
    except SystemExit as done:  # user_errors printed the one line; its code is the result
        return int(done.code)
    except DatasetUnavailable as err:  # offline, no archive: the message says what to do
        print(f"fednorm: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
