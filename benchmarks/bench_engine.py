"""Images per second of one DSGD step: the engine vs a centralized step vs a per-client loop;
and (``--run-axis``) one step of a bundle of R runs, vmapped over runs vs the runs one after
another.

    python benchmarks/bench_engine.py                       # paper model (width 64, 32x32)
    python benchmarks/bench_engine.py --width 16 --image-size 16 --device cpu
    python benchmarks/bench_engine.py --run-axis --device cpu --sizes 1,4,16   # quick shapes

All three train the FBN paper's CNN on n*b images per step with the paper's momentum:
- centralized: one model with nn.BatchNorm2d, torch.optim.SGD on the union batch of n*b;
- engine: fednorm's DSGD round (clients as a tensor dimension), per normalizer; and FBN with
  f = 3 Byzantine clients sending SF statistics, aggregated by median after NNM (the cost of the
  robust server, FBN paper §5), and the same with the model updates attacked too, which needs
  each client's update: FedAvg's per-client path with E = 1 (vmap over clients);
- per-client loop: n model copies, each forward/backward on its b images, gradients averaged,
  server step, copies refreshed (the usual way FL code is written).
Ratios are measured in one process, on the same data, interleaved over repeats (median kept).

``--run-axis``: at the quick profile's shapes (:data:`QUICK`), one local step of a bundle of R
runs (other seeds) three ways: ``vmap``, the engine as it is (one ``torch.func.vmap`` over runs;
a convolution of all runs is one grouped convolution); ``loop``, the same bundle with the
engine's one-run step applied to each run in turn (``over_runs`` replaced by a Python loop and
a stack: what a per-run path on a CPU would be, everything else of the bundle unchanged);
``alone``, R trainers of one run stepped one after the other. ms per local step of the whole
bundle, and the ratios vmap / loop and vmap / alone (> 1: the per-run path is faster), each the
median of the interleaved repeats' ratios. ``--profile``: where a bundle's step spends its
time instead (torch.profiler, self CPU time: the convolutions' forward and backward against the
rest, vmap and loop).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_map

from fednorm.config import run_config
from fednorm.data.partition import partition
from fednorm.data.synthetic import colour_classes
from fednorm.fl import step as engine_module
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer, training_batches
from fednorm.models import FBNCNN, build_model
from fednorm.norms import normalizer_for


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(step, device: torch.device, iters: int) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        step()
    _sync(device)
    return (time.perf_counter() - start) / iters


def centralized(args, x, y):
    model = FBNCNN(nn.BatchNorm2d, args.width, 128, 0.25, args.image_size).to(x.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.99)

    def step():
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(x), y).backward()
        opt.step()

    return step


def per_client_loop(args, x, y):
    server = FBNCNN(nn.BatchNorm2d, args.width, 128, 0.25, args.image_size).to(x.device)
    opt = torch.optim.SGD(server.parameters(), lr=0.001, momentum=0.99)
    xs, ys = x.chunk(args.clients), y.chunk(args.clients)

    def step():
        grads = [torch.zeros_like(p) for p in server.parameters()]
        for xi, yi in zip(xs, ys, strict=True):
            client = copy.deepcopy(server)
            F.nll_loss(client(xi), yi).backward()
            for g, p in zip(grads, client.parameters(), strict=True):
                g += p.grad / args.clients
        for p, g in zip(server.parameters(), grads, strict=True):
            p.grad = g
        opt.step()

    return step


def engine(args, x, y, normalizer: str, **byzantine):
    cfg = run_config({
        "dataset": "synthetic", "n_train": len(x), "n_test": 1, "image_size": args.image_size,
        "width": args.width, "normalizer": normalizer, "n_clients": args.clients,
        "batch_size": args.batch, "partition": "iid", "gn_groups": 8, **byzantine,
    })
    model = build_model(cfg).to(x.device)
    parts = list(torch.arange(len(x), device=x.device).chunk(args.clients))
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, y, [parts], args.batch, [0]))
    return lambda: trainer.round(0)


# The quick profile's training shapes (config/quick.yaml): the FBN studies (the FBN CNN, DSGD),
# FixBN's (LeNet at 8x8, E in {1, 5, 25}: E = 5 here) and the comparison (LeNet at 16x16, E = 1
# and 25); normalizer bn
QUICK = {
    "FBN CNN w8, 8x8, 10 x 16, DSGD": dict(model="fbn_cnn", width=8, hidden=32, image_size=8,
                                           n_clients=10, batch_size=16),
    "LeNet w8, 8x8, 5 x 20, E = 5": dict(model="lenet", width=8, image_size=8, n_clients=5,
                                         batch_size=20, local_steps=5),
    "LeNet w8, 16x16, 5 x 20, E = 1": dict(model="lenet", width=8, image_size=16, n_clients=5,
                                           batch_size=20),
    "LeNet w8, 16x16, 5 x 20, E = 25": dict(model="lenet", width=8, image_size=16, n_clients=5,
                                            batch_size=20, local_steps=25),
}


VMAP_OVER_RUNS = engine_module.over_runs


def looped_over_runs(fn, runs, in_dims=None):
    """``engine.over_runs`` with the runs one after another: each run's slice of the arguments
    through the one-run ``fn``, the results stacked."""
    def each(*args):
        outs = [fn(*(a if d is None else tree_map(lambda t, r=r: t[r], a)
                     for a, d in zip(args, in_dims or (0,) * len(args), strict=True)))
                for r in range(runs)]
        return tree_map(lambda *ts: torch.stack(ts), *outs)

    return each if runs > 1 else VMAP_OVER_RUNS(fn, runs, in_dims)


def bundle_trainer(shape: dict, seeds: range, device: torch.device):
    """A trainer of one bundle of the runs ``seeds`` at ``shape``, on synthetic images."""
    data = colour_classes(n_train=2000, n_test=100, image_size=shape["image_size"], seed=0)
    data = data.to(device)
    cfgs = [run_config({"dataset": "synthetic", "n_train": 2000, "n_test": 100,
                        "normalizer": "bn", "partition": "iid", "heterogeneity": None,
                        "steps": 10_000, "seed": s, **shape}) for s in seeds]
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(build_model(c, data.n_classes).to(device))
    parts = [partition(data.train_y.cpu(), c.partition, c.n_clients, c.heterogeneity, c.seed)
             for c in cfgs]
    return make_trainer(cfgs, models, normalizer_for(cfgs[0]),
                        training_batches(cfgs, data, parts))


def conv_share(fn) -> tuple[float, float]:
    """(ms in convolutions' forward and backward, ms in all) of one call of ``fn``, by the
    profiler's self CPU time (the profiler's own cost weighs on a loop's many small calls)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.key_averages()
    conv = sum(e.self_cpu_time_total for e in events if "convolution" in e.key)
    return conv / 1e3, sum(e.self_cpu_time_total for e in events) / 1e3


def run_axis(args, device: torch.device) -> None:
    """``--run-axis``: vmap over runs vs the runs one after another (module docstring)."""
    print(f"device: {device}, threads {torch.get_num_threads()}, torch {torch.__version__}; "
          "ms per local step of the bundle, " + ("one profiled call" if args.profile else
                                                  f"median of {args.repeats} interleaved repeats"))
    if args.profile:
        print("| shape | R | vmap: conv ms of all ms | loop: conv ms of all ms |")
        print("|---|---:|---:|---:|")
    else:
        print("| shape | R | vmap: ms | loop: ms | alone: ms | vmap / loop | vmap / alone |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for name, shape in QUICK.items():
        E = shape.get("local_steps", 1)
        for size in (int(s) for s in args.sizes.split(",")):
            bundle = bundle_trainer(shape, range(size), device)
            alone = [bundle_trainer(shape, range(s, s + 1), device) for s in range(size)]
            rounds = max(1, args.iters * 4 // (size * E))  # about the same work per timing

            def step(trainers, rounds=rounds, E=E):
                for i in range(rounds):
                    for t in trainers:
                        t.round(i * E)

            def looped(bundle=bundle, step=step):
                with mock.patch.object(engine_module, "over_runs", looped_over_runs):
                    step([bundle])

            variants = {"vmap": lambda bundle=bundle, step=step: step([bundle]),
                        "loop": looped, "alone": lambda alone=alone, step=step: step(alone)}
            for fn in variants.values():  # warm-up
                _timed(fn, device, 1)
            if args.profile:
                shares = {k: conv_share(variants[k]) for k in ("vmap", "loop")}
                print(f"| {name} | {size} | " + " | ".join(
                    f"{c / (rounds * E):.1f} of {t / (rounds * E):.1f} ({c / t:.0%})"
                    for c, t in shares.values()) + " |", flush=True)
                continue
            times: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(args.repeats):
                for k, fn in variants.items():
                    times[k].append(_timed(fn, device, 1) / (rounds * E) * 1e3)
            ms = {k: statistics.median(v) for k, v in times.items()}
            ratio = {k: statistics.median(a / b for a, b in zip(times["vmap"], times[k],
                                                                   strict=True))
                     for k in ("loop", "alone")}
            print(f"| {name} | {size} | {ms['vmap']:.1f} | {ms['loop']:.1f} | "
                  f"{ms['alone']:.1f} | {ratio['loop']:.2f} | {ratio['alone']:.2f} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--iters", type=int, default=5, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--normalizers", default="central,bn,fbn,gn")
    parser.add_argument("--run-axis", action="store_true",
                        help="bundles at the quick shapes: vmap over runs vs a loop over runs")
    parser.add_argument("--sizes", default="1,4,16", help="--run-axis: runs per bundle")
    parser.add_argument("--profile", action="store_true",
                        help="--run-axis: the convolutions' share of a step instead of times")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.run_axis:
        run_axis(args, device)
        return
    torch.manual_seed(0)
    n_images = args.clients * args.batch
    x = torch.randn(n_images, 3, args.image_size, args.image_size, device=device)
    y = torch.randint(0, 10, (n_images,), device=device)

    steps = {"centralized (nn.BatchNorm2d)": centralized(args, x, y),
             "per-client loop (nn.BatchNorm2d)": per_client_loop(args, x, y)}
    for name in args.normalizers.split(","):
        steps[f"engine DSGD, {name}"] = engine(args, x, y, name)
    steps["engine DSGD, fbn, SF f=3, median + NNM"] = engine(
        args, x, y, "fbn", attack="sf", f=3, aggregator="median", nnm=True)
    steps["engine per-client (vmap), fbn, SF f=3 + updates, median + NNM"] = engine(
        args, x, y, "fbn", attack="sf", f=3, aggregator="median", nnm=True, attack_updates=True)
    for step in steps.values():  # warm-up (allocator, cuDNN autotuning)
        _timed(step, device, 2)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
        for name, step in steps.items():
            times[name].append(_timed(step, device, args.iters))

    base = statistics.median(times["centralized (nn.BatchNorm2d)"])
    loop = statistics.median(times["per-client loop (nn.BatchNorm2d)"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}, threads {torch.get_num_threads()}, torch {torch.__version__}; "
          f"n={args.clients}, b={args.batch}, width {args.width}, {args.image_size}x"
          f"{args.image_size}; median of {args.repeats} x {args.iters} steps")
    print("| step | ms/step | images/s | vs centralized | vs per-client loop |")
    print("|---|---:|---:|---:|---:|")
    for label, ts in times.items():
        t = statistics.median(ts)
        print(f"| {label} | {t * 1e3:.1f} | {n_images / t:,.0f} | {base / t:.2f}x | "
              f"{loop / t:.2f}x |")


if __name__ == "__main__":
    main()
