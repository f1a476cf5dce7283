"""Why a bundle of ResNet-20 runs launches more kernels the more runs it holds (make gpu-check's
``launches`` step on an H100: 1,976 kernels a local step at R = 1, 6,644 at R = 16, with the
same operators): vmap turns the runs' (and FedAvg's clients') weights into one grouped
convolution of G = runs x clients groups, and this measures how the GPU computes one.

For each of ResNet-20's three convolution shapes (20 images a client, 16/32/64 channels at
32/16/8 pixels) and each G, forward + backward of the grouped convolution that vmap calls, as
it calls it (contiguous, ``cudnn.benchmark`` off: the default), beside the same convolution

- with ``torch.backends.cudnn.benchmark = True`` (cuDNN times its algorithms once per shape),
- in ``channels_last`` memory format (with and without benchmark),
- as G separate convolutions (a loop: what vmap saves),
- as im2col (``F.unfold``) and one batched matrix product over the groups (``torch.bmm``),

in ms per call and kernels per call (the profiler's). Then the engine itself (make gpu-check's
``resnet20_E2`` and ``fbn_cnn`` shapes) at each bundle size with ``cudnn.benchmark`` off and
on, in images/s, interleaved in one process.

    python benchmarks/grouped_conv.py --device cuda                 # about 2 minutes on an H100
    python benchmarks/grouped_conv.py --device cpu --smoke          # tiny, on a CPU
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from fednorm.gpucheck import throughput as tp

SHAPES = ((16, 32), (32, 16), (64, 8))  # ResNet-20's stages: channels, side
IMAGES = 20  # a client's batch (FixBN's recipe)


def ms_per_call(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Milliseconds of one call, after two warm-up calls (fednorm.gpucheck's timer)."""
    fn()
    fn()
    return 1e3 * tp.timed(lambda k: fn(), device, 0, repeats) / repeats


def kernels_per_call(fn: Callable[[], object], device: torch.device) -> float:
    """Kernels launched by one call on CUDA; operators on a CPU (fednorm.gpucheck's profile)."""
    row = tp.profiled(lambda k: fn(), 1, device)
    return row.get("kernels", row["aten_ops"])


def im2col_conv(x: torch.Tensor, w: torch.Tensor, G: int) -> torch.Tensor:
    """``F.conv2d(x, w, padding=1, groups=G)`` for 3x3 kernels with as many channels out as
    in, as im2col and one batched matrix product over the groups."""
    b, gc, h, wd = x.shape
    c = gc // G
    cols = F.unfold(x, 3, padding=1).view(b, G, c * 9, h * wd).permute(1, 2, 0, 3)
    out = torch.bmm(w.reshape(G, c, c * 9), cols.reshape(G, c * 9, b * h * wd))
    return out.view(G, c, b, h, wd).permute(2, 0, 1, 3, 4).reshape(b, gc, h, wd)


def check_im2col(device: torch.device) -> None:
    """im2col_conv equals the grouped convolution (float64), or the table would mislead."""
    x = torch.randn(3, 4 * 5, 6, 6, device=device, dtype=torch.float64)
    w = torch.randn(4 * 5, 5, 3, 3, device=device, dtype=torch.float64)
    err = (im2col_conv(x, w, 4) - F.conv2d(x, w, padding=1, groups=4)).abs().max().item()
    if err > 1e-9:
        raise SystemExit(f"im2col_conv differs from F.conv2d by {err}")


def top_kernels(fn: Callable[[], object], device: torch.device, n: int = 4) -> str:
    """The kernels one call launches most often, with their counts (CUDA only)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        tp.sync(device)
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    kernels.sort(key=lambda e: -e.count)
    return "; ".join(f"{e.count} x {e.key[:70]}" for e in kernels[:n])


def variants(G: int, c: int, side: int, b: int, device: torch.device
             ) -> dict[str, Callable[[], None]]:
    """Forward + backward of one grouped 3x3 convolution of G groups, each way."""
    x = torch.randn(b, G * c, side, side, device=device)
    w = torch.randn(G * c, c, 3, 3, device=device, requires_grad=True)
    x_cl = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    w_cl = w.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    x = x.requires_grad_()
    xs = [t.detach().contiguous().requires_grad_() for t in x.detach().chunk(G, 1)]
    ws = [t.detach().contiguous().requires_grad_() for t in w.detach().chunk(G, 0)]

    def grouped() -> None:
        F.conv2d(x, w, padding=1, groups=G).sum().backward()

    def grouped_cl() -> None:
        F.conv2d(x_cl, w_cl, padding=1, groups=G).sum().backward()

    def separate() -> None:
        sum(F.conv2d(xi, wi, padding=1).sum() for xi, wi in zip(xs, ws, strict=True)).backward()

    def im2col() -> None:
        im2col_conv(x, w, G).sum().backward()

    return {"grouped, as vmap calls it": grouped, "grouped, channels_last": grouped_cl,
            f"{G} separate": separate, "im2col + bmm": im2col}


def conv_table(groups: list[int], device: torch.device, repeats: int, b: int,
               shapes: tuple[tuple[int, int], ...]) -> None:
    print("| channels, side | G | way | cudnn.benchmark | ms | kernels |")
    print("|---|---:|---|---|---:|---:|")
    for c, side in shapes:
        for G in groups:
            ways = variants(G, c, side, b, device)
            for bench in (False, True):
                if bench and device.type != "cuda":
                    continue
                torch.backends.cudnn.benchmark = bench
                for name, fn in ways.items():
                    if bench and name in (f"{G} separate", "im2col + bmm"):
                        continue
                    ms = ms_per_call(fn, device, repeats)
                    k = kernels_per_call(fn, device)
                    print(f"| {c}, {side}x{side} | {G} | {name} | {bench} | {ms:.3f} | {k:.0f} |",
                          flush=True)
            if device.type == "cuda" and G == max(groups):
                torch.backends.cudnn.benchmark = False
                print(f"  (G = {G}, grouped, kernels: "
                      f"{top_kernels(ways['grouped, as vmap calls it'], device)})")
    torch.backends.cudnn.benchmark = False


def engine_table(sizes: list[int], device: torch.device, smoke: bool) -> None:
    settings = tp.SMOKE if smoke else tp.Settings()
    shapes = {s.name: s for s in (tp.SMOKE_SHAPES if smoke else tp.SHAPES)}
    print("\n| shape | runs | cudnn.benchmark | images/s, first | images/s, second |")
    print("|---|---:|---|---:|---:|")
    benches = (False, True) if device.type == "cuda" else (False,)
    for name in ("resnet20_E2", "fbn_cnn"):
        shape = shapes[name]
        data = tp.data_for(shape, settings, device)
        for runs in sizes:
            rates: dict[bool, list[float]] = {bench: [] for bench in benches}
            try:
                for bench in benches * 2:  # interleaved: off, on, off, on
                    torch.backends.cudnn.benchmark = bench
                    rates[bench].append(
                        tp.engine_rate(shape, runs, data, settings)["images_per_s"])
            except torch.OutOfMemoryError:  # the FBN CNN at 64 runs on an H100
                print(f"| {name} | {runs} | | out of memory | |", flush=True)
                torch.cuda.empty_cache()
                continue
            for bench, (first, second) in rates.items():
                print(f"| {name} | {runs} | {bench} | {first:,.0f} | {second:,.0f} |",
                      flush=True)
    torch.backends.cudnn.benchmark = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--groups", default="5,20,80,320")
    parser.add_argument("--sizes", default="4,16,64", help="the engine's bundle sizes")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU)")
    parser.add_argument("--no-engine", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"{device} (torch {torch.__version__}"
          + (f", {torch.cuda.get_device_name(device)}, cuDNN {torch.backends.cudnn.version()})"
             if device.type == "cuda" else ")"), flush=True)
    check_im2col(device)
    shapes = ((4, 8),) if args.smoke else SHAPES
    b = 4 if args.smoke else IMAGES
    conv_table([int(g) for g in args.groups.split(",")], device, args.repeats, b, shapes)
    if not args.no_engine:
        engine_table([int(r) for r in args.sizes.split(",")], device, args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
