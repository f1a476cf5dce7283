"""Images per second of one DSGD step: the engine vs a centralized step vs a per-client loop.

    python benchmarks/bench_engine.py                       # paper model (width 64, 32x32)
    python benchmarks/bench_engine.py --width 16 --image-size 16 --device cpu

All three train the FBN paper's CNN on n*b images per step with the paper's momentum:
- centralized: one model with nn.BatchNorm2d, torch.optim.SGD on the union batch of n*b;
- engine: fednorm's DSGD round (clients as a tensor dimension), per normalizer; and FBN with
  f = 3 Byzantine clients sending SF statistics, aggregated by median after NNM (the cost of the
  robust server, FBN paper §5), and the same with the model updates attacked too, which needs
  each client's update: FedAvg's per-client path with E = 1 (vmap over clients);
- per-client loop: n model copies, each forward/backward on its b images, gradients averaged,
  server step, copies refreshed (the usual way FL code is written).
Ratios are measured in one process, on the same data, interleaved over repeats (median kept).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from fednorm.config import run_config
from fednorm.fl.batches import ClientBatches
from fednorm.fl.engine import make_trainer
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
    args = parser.parse_args()
    device = torch.device(args.device)
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
