"""Images per second of the engine at the papers' shapes, beside a plain PyTorch loop of one
run and the floor that the model's FLOPs and the card's measured peak set.

- engine: a bundle of R runs (seeds 0..R-1) built as a training job builds it
  (fednorm.fl.train), timed over whole rounds (``trainer.round``: one DSGD step, or E local
  steps and the server's aggregation); images = R x participants x batch x E a round;
- plain: one run as PyTorch code is usually written (an ``nn.Module`` with ``nn.BatchNorm2d``,
  ``torch.optim.SGD``), one step on the union of the clients' batches, drawn by the engine's
  own sampler of that run (the same batches, augmentation included);
- floor: the measured peak FLOP/s of a large matmul in the training dtype, divided by the
  FLOPs of one image's forward and backward (``torch.utils.flop_counter``): no code on this
  card trains faster.

Timing: a warm-up call (allocator, cuDNN's autotuning), then the median of ``repeats`` timings
of as many calls as fill ``target_s``, synchronized on CUDA before and after.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fednorm.config import RunConfig, run_config
from fednorm.data import Arrays
from fednorm.data.synthetic import colour_classes
from fednorm.fl import memory
from fednorm.fl.build import build
from fednorm.fl.trainer import Trainer
from fednorm.models import FBNCNN, DigitsCNN, LeNet, ResNet18, ResNet20
from fednorm.models.dropout import KeyedDropout

# FixBN's recipe (config/config.yaml, &fixbn), the keys that shape the computation
_FIXBN = dict(model="resnet20", width=16, n_clients=5, batch_size=20, momentum=0.9,
              momentum_convention="pytorch", weight_decay=1e-4, augment="crop_flip",
              crop_padding=2, partition="iid", heterogeneity=None, normalizer="bn")


@dataclass(frozen=True)
class Shape:
    """A paper's shape of computation: RunConfig keys; ``part`` the plan's (dataset, model)
    whose GPU-hours its rate prices."""

    name: str
    paper: str
    keys: dict[str, Any]
    part: tuple[str, str]
    sizes: tuple[int, ...] = (1, 4, 16, 64)
    compile: bool = False  # the plain loop also timed under torch.compile
    compile_engine: bool = False  # the engine's gradient step too (a compile a mode)
    launches: bool = False  # a local step profiled: operators, kernels, GPU busy share


SHAPES = (
    Shape("fbn_cnn", "FBN: CNN, DSGD, 10 clients x 50, 32x32",
          dict(model="fbn_cnn", width=64, hidden=128, n_clients=10, batch_size=50,
               image_size=32, normalizer="fbn", partition="gamma", heterogeneity=0.5),
          ("cifar10", "fbn_cnn"), compile=True, compile_engine=True, launches=True),
    Shape("resnet20_E1", "FixBN: ResNet-20, FedAvg E = 1, 5 clients x 20, 32x32",
          dict(_FIXBN, image_size=32, local_steps=1), ("cifar10", "resnet20")),
    Shape("resnet20_E2", "FixBN: ResNet-20, FedAvg E = 2, 5 clients x 20, 32x32",
          dict(_FIXBN, image_size=32, local_steps=2), ("cifar10", "resnet20"), compile=True,
          launches=True),
    Shape("resnet20_E100", "FixBN: ResNet-20, FedAvg E = 100, 5 clients x 20, 32x32",
          dict(_FIXBN, image_size=32, local_steps=100), ("cifar10", "resnet20")),
    Shape("resnet18", "FixBN Tiny-ImageNet: ResNet-18, 10 clients x 20 (5 a round), 64x64, E = 2",
          dict(_FIXBN, model="resnet18", width=64, image_size=64, n_clients=10,
               participation=0.5, local_steps=2, augment="resized_crop_flip"),
          ("tinyimagenet", "resnet18")),
)
# The same models at sizes a 2-core CPU trains in seconds (make gpu-check SMOKE=1)
_PAPER = {s.name: s for s in SHAPES}
_TINY = {"width": 4, "image_size": 8, "batch_size": 4}  # ResNet-20's smoke sizes
SMOKE_SHAPES = (
    Shape("fbn_cnn", _PAPER["fbn_cnn"].paper + " (smoke: width 8, 8x8, 10 x 4)",
          {**_PAPER["fbn_cnn"].keys, "width": 8, "hidden": 16, "image_size": 8,
           "batch_size": 4},
          _PAPER["fbn_cnn"].part, sizes=(1, 2, 4), compile=True, compile_engine=True,
          launches=True),
    Shape("resnet20_E1", _PAPER["resnet20_E1"].paper + " (smoke: width 4, 8x8, 5 x 4)",
          {**_PAPER["resnet20_E1"].keys, **_TINY}, _PAPER["resnet20_E1"].part, sizes=(1, 2)),
    Shape("resnet20_E2", _PAPER["resnet20_E2"].paper + " (smoke: width 4, 8x8, 5 x 4)",
          {**_PAPER["resnet20_E2"].keys, **_TINY}, _PAPER["resnet20_E2"].part,
          sizes=(1, 2, 4), launches=True),
    Shape("resnet20_E4", "ResNet-20, FedAvg E = 4 (smoke: for E = 100; width 4, 8x8, 5 x 4)",
          {**_PAPER["resnet20_E100"].keys, **_TINY, "local_steps": 4},
          _PAPER["resnet20_E100"].part, sizes=(1, 2)),
    Shape("resnet18", _PAPER["resnet18"].paper + " (smoke: width 4, 16x16, 10 x 2)",
          {**_PAPER["resnet18"].keys, "width": 4, "image_size": 16, "batch_size": 2},
          _PAPER["resnet18"].part, sizes=(1, 2)),
)


@dataclass(frozen=True)
class Settings:
    """How long and how big the measurements are."""

    n_train: int = 10_000  # random synthetic images of the shape, on the device
    n_test: int = 1_000  # the probes of bundle_size: auto evaluate on them
    target_s: float = 0.5  # a timing lasts about this long
    repeats: int = 3
    round_limit_s: float = 30.0  # no larger R whose round, R/R' times this one's, exceeds it
    matmul: int = 8192  # the peak's square matmul
    compile_backend: str = "inductor"
    extra: dict[str, Any] = field(default_factory=dict)


SMOKE = Settings(n_train=400, n_test=40, target_s=0.05, repeats=2, round_limit_s=4.0,
                 matmul=256, compile_backend="eager")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[int], object], device: torch.device, first: int, calls: int) -> float:
    """Seconds of ``calls`` calls ``call(first)``, ``call(first + 1)``, ..., synchronized."""
    sync(device)
    start = time.perf_counter()
    for k in range(calls):
        call(first + k)
    sync(device)
    return time.perf_counter() - start


def calls_per_second(call: Callable[[int], object], device: torch.device,
                     settings: Settings) -> tuple[float, float]:
    """(calls per second: the median of ``settings.repeats`` timings, seconds of one call)
    after a warm-up call; ``call(k)`` for k = 0, 1, ... in order."""
    one = timed(call, device, 0, 1)  # warm-up
    one = timed(call, device, 1, 1)
    calls = max(1, round(settings.target_s / max(one, 1e-9)))
    times, first = [], 2
    for _ in range(settings.repeats):
        times.append(timed(call, device, first, calls) / calls)
        first += calls
    return 1 / statistics.median(times), one


def data_for(shape: Shape, settings: Settings, device: torch.device) -> Arrays:
    size = shape.keys["image_size"]
    return colour_classes(settings.n_train, settings.n_test, size, seed=0).to(device)


def configs(shape: Shape, runs: int, settings: Settings) -> list[RunConfig]:
    """R runs of the shape (seeds 0..R-1), long enough that no schedule or freeze point falls
    within the timed rounds (each round passes its first step)."""
    keys = {"dataset": "synthetic", "n_train": settings.n_train, "n_test": settings.n_test,
            "steps": 10**7, "eval_every": 10**7, "lr": [0.01], "lr_milestones": [],
            **shape.keys}
    return [run_config({**keys, "seed": seed}) for seed in range(runs)]


def bundle(cfgs: list[RunConfig], data: Arrays, compile: dict[str, Any] | None = None,
           cuda_graph: str = "off", precision: str = "float32") -> Trainer:
    """The trainer of a bundle, built as a training job builds it (fednorm.fl.build.build);
    ``compile``: torch.compile's arguments for its gradient steps; ``precision``: their
    autocast (the TF32 flags are the caller's); ``cuda_graph`` auto: the local steps captured
    as CUDA graphs on CUDA (off: eager)."""
    return build(cfgs, data, compile=compile, precision=precision, cuda_graph=cuda_graph)


def round_images(cfg: RunConfig, runs: int) -> int:
    return runs * cfg.participants * cfg.batch_size * cfg.local_steps


def engine_rate(shape: Shape, runs: int, data: Arrays, settings: Settings,
                compiled: dict[str, Any] | None = None, cuda_graph: str = "off",
                precision: str = "float32") -> dict[str, Any]:
    """Images/s of a bundle of ``runs``, and its peak memory per run (the bundle's state built
    and a round trained, beyond what the device held before); ``compiled``: torch.compile's
    arguments for its gradient steps (fednorm.fl.trainer, ``gradient_step``), compiled in the
    first round; ``cuda_graph``, ``precision``: as in :func:`bundle`."""
    cfgs, device = configs(shape, runs, settings), data.device
    built: list[Trainer] = []

    def build_and_step() -> None:
        built.append(bundle(cfgs, data, compiled, cuda_graph, precision))
        built[0].round(0)

    peak = memory.peak_bytes(build_and_step, device)
    trainer = built[0]
    E = cfgs[0].local_steps
    per_s, one = calls_per_second(lambda k: trainer.round(E * (k + 1)), device, settings)
    return {"runs": runs, "images_per_s": per_s * round_images(cfgs[0], runs),
            "round_s": one, "peak_mb_per_run": None if peak is None else peak / runs / 2**20}


def plain_model(cfg: RunConfig, n_classes: int) -> nn.Module:
    """The run's model as plain PyTorch code writes it: nn.BatchNorm2d, the same layers."""
    norm = nn.BatchNorm2d
    if cfg.model == "fbn_cnn":
        model = FBNCNN(norm, cfg.width, cfg.hidden, cfg.dropout, cfg.image_size, n_classes)
        for name, module in list(model.named_modules()):  # PyTorch's own dropout
            if isinstance(module, KeyedDropout):  # (nn.Module.set_submodule: torch >= 2.5)
                parent, _, child = name.rpartition(".")
                setattr(model.get_submodule(parent), child, nn.Dropout(module.p))
        return model
    if cfg.model == "resnet20":
        return ResNet20(norm, cfg.width, n_classes)
    if cfg.model == "resnet18":
        return ResNet18(norm, cfg.width, n_classes)
    if cfg.model == "lenet":
        return LeNet(norm, cfg.width, cfg.image_size, n_classes)
    if cfg.model == "digits_cnn":
        return DigitsCNN(norm, cfg.width, cfg.image_size, n_classes)
    raise ValueError(f"no plain loop for model {cfg.model!r}")


def plain_step(shape: Shape, data: Arrays, settings: Settings, compile_mode: str | None = None
               ) -> tuple[Callable[[int], object], nn.Module, int]:
    """One run's training step as a plain loop: (step(k), model, images per step)."""
    cfg = configs(shape, 1, settings)[0]
    sampler = bundle([cfg], data).batches  # the engine's draws of this run
    torch.manual_seed(0)
    model = plain_model(cfg, data.n_classes).to(data.device, data.dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    forward = model if compile_mode is None else torch.compile(
        model, backend=settings.compile_backend,
        **({"mode": compile_mode} if settings.compile_backend == "inductor" else {}))

    def step(k: int) -> None:
        x, y = sampler.sample(k)
        opt.zero_grad(set_to_none=True)
        F.nll_loss(forward(x[0]), y[0]).backward()
        opt.step()

    return step, model, cfg.participants * cfg.batch_size


def plain_rate(shape: Shape, data: Arrays, settings: Settings,
               compile_mode: str | None = None) -> float:
    step, _, images = plain_step(shape, data, settings, compile_mode)
    return calls_per_second(step, data.device, settings)[0] * images


def flops_per_image(shape: Shape, data: Arrays, settings: Settings) -> float:
    """FLOPs of one image's forward and backward through the plain model (the engine's
    arithmetic is the same; its normalization of per-client statistics adds little)."""
    from torch.utils.flop_counter import FlopCounterMode

    step, _, images = plain_step(shape, data, settings)
    with FlopCounterMode(display=False) as counter:
        step(0)
    return counter.get_total_flops() / images


def peak_flops(device: torch.device, settings: Settings,
               dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of a square matmul of ``settings.matmul`` in ``dtype`` (PyTorch's default math
    settings: on CUDA, TF32 for matmuls only where torch.backends.cuda.matmul.allow_tf32
    says)."""
    n = settings.matmul
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    per_s, _ = calls_per_second(lambda k: a @ b, device, settings)
    return per_s * 2 * n**3


def profiled(call: Callable[[int], object], steps: int, device: torch.device
             ) -> dict[str, float]:
    """``call(k)`` for k < ``steps`` under the profiler: a step's wall ms, PyTorch operators
    (``aten_ops``: every ``aten::`` call, nested ones too), the operators reaching a kernel
    (``dispatched``: below autograd and vmap, fednorm.gpucheck.dispatched; the same calls again)
    and, on CUDA, kernels launched and GPU-busy ms (the kernels' own time summed)."""
    from torch.profiler import ProfilerActivity, profile

    from fednorm.gpucheck.dispatched import Dispatched

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    sync(device)
    with profile(activities=activities) as prof:
        wall = timed(call, device, 0, steps)
    events = prof.key_averages()
    ops = sum(e.count for e in events if e.key.startswith("aten::"))
    with Dispatched() as dispatched:
        for k in range(steps):
            call(k)
    row: dict[str, float] = {"wall_ms": 1e3 * wall / steps, "aten_ops": ops / steps,
                             "dispatched": len(dispatched.ops) / steps}
    if device.type == "cuda":
        kernels = [e for e in events if e.device_type.name == "CUDA"]
        busy_us = sum(getattr(e, "self_device_time_total", 0)
                      or getattr(e, "self_cuda_time_total", 0) for e in kernels)
        row.update(kernels=sum(e.count for e in kernels) / steps,
                   gpu_busy_ms=busy_us / 1e3 / steps)
        row["busy_share"] = row["gpu_busy_ms"] / row["wall_ms"]
    return row


def launch_rows(shape: Shape, sizes: list[int], data: Arrays, settings: Settings,
                rounds: int = 2) -> Iterator[dict[str, Any]]:
    """Per local step, the centralized plain loop and then the engine at each bundle size:
    wall ms, operators, and on CUDA kernels and the GPU's busy share (:func:`profiled`), a
    row at a time (a killed caller keeps the rows it had)."""
    step, _, images = plain_step(shape, data, settings)
    for k in range(3):
        step(k)
    yield {"what": "plain loop, centralized", "runs": 1, "images": images,
           **profiled(step, 5 * rounds, data.device)}
    for runs in sizes:
        cfgs = configs(shape, runs, settings)
        trainer = bundle(cfgs, data)
        E = cfgs[0].local_steps
        for k in range(2):
            trainer.round(E * (k + 1))
        row = profiled(lambda k, t=trainer, E=E: t.round(E * (k + 3)), rounds, data.device)
        yield {"what": f"engine, E = {E} (a local step)", "runs": runs,
               "images": round_images(cfgs[0], runs) // E,
               **{k: v / E for k, v in row.items() if k != "busy_share"},
               **({"busy_share": row["busy_share"]} if "busy_share" in row else {})}
        del trainer

