"""A per-client FedAvg in plain PyTorch, the reference that the root-cause probes
(benchmarks/investigations/root_cause_*.py; docs/history.md, "Root causes of the large
contradictions") hold the engine against, and the helpers they share.

The reference is written the usual way, with none of the engine's machinery: one model copy per
client in a Python loop, a fresh ``torch.optim.SGD`` per client and round (momentum reset, the
quick recipes' ``client_momentum: reset``), and a server that averages every parameter and
buffer (BN's running statistics included) after E local steps. It draws the engine's batches
(fednorm.fl.batches.ClientBatches with the run's seed) from the engine's split, and the model
is built right after ``torch.manual_seed(seed)`` as the engine builds its own, so with the
engine's model class it follows the engine's trajectory up to rounding (exactly, in float64).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tempfile
from collections.abc import Callable, Iterable

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from fednorm import rng
from fednorm.data.mnist5k import load_mnist5k
from fednorm.data.partition import partition
from fednorm.fl.batches import ClientBatches
from fednorm.inputs import read_yaml
from fednorm.plan import load_plan, merge
from fednorm.run import train_and_evaluate

DATA = "data"


def quick_run(experiment: str, **match):
    """The resolved RunConfig of the quick profile's run of ``experiment`` matching ``match``."""
    plan = load_plan(merge(read_yaml("config/config.yaml", "config"),
                           read_yaml("config/quick.yaml", "config")))
    for rid in plan.experiments[experiment]:
        run = plan.runs[rid]
        if all(getattr(run, k) == v for k, v in match.items()):
            return run
    raise KeyError(f"no run of {experiment} with {match}")


def engine(cfg) -> tuple[float, str]:
    """(final test accuracy, status) of the engine's run (fednorm.run.train_and_evaluate)."""
    with tempfile.TemporaryDirectory() as out:
        status = train_and_evaluate(cfg, out, data_dir=DATA, device="cpu")
        acc = pd.read_csv(f"{out}/metrics.csv")["test_accuracy"].dropna()
        return float(acc.iloc[-1]), status


def engine_curve(cfg) -> pd.DataFrame:
    """The engine's metrics.csv of the run (step, test_accuracy, train_loss, ...)."""
    with tempfile.TemporaryDirectory() as out:
        train_and_evaluate(cfg, out, data_dir=DATA, device="cpu")
        return pd.read_csv(f"{out}/metrics.csv")


def as_dtype(data, dtype: torch.dtype):
    """The data with its images in ``dtype`` (the models take the images' dtype)."""
    return dataclasses.replace(data, train_x=data.train_x.to(dtype), test_x=data.test_x.to(dtype))


def cell(result: tuple[float, str]) -> str:
    """An engine result as a table cell: the accuracy in %, marked when the run diverged."""
    acc, status = result
    return f"{100 * acc:.1f}" + (" (diverged)" if status != "ok" else "")


@dataclasses.dataclass
class Reference:
    model: nn.Module  # the global model after the last round
    accuracy: float  # its test accuracy
    losses: dict[int, float]  # step -> the clients' mean training loss
    first_nonfinite_step: int | None


def plain_fedavg(
    cfg,
    make_model: Callable[[], nn.Module],
    dtype: torch.dtype = torch.float32,
    *,
    frozen_bn_from: int | None = None,
    param_groups: Callable[[nn.Module], Iterable[dict]] | None = None,
    on_round: Callable[[int, nn.Module, tuple], None] | None = None,
) -> Reference:
    """FedAvg of ``make_model()`` on ``cfg``'s split, batches and learning-rate schedule.

    ``frozen_bn_from``: from this step on, every nn.BatchNorm2d is in eval mode while training
    (it normalizes with the averaged running statistics and updates nothing: FixBN's frozen
    stage). ``param_groups``: the optimizer's groups, each with an ``lr_factor`` (default: one
    group of every parameter, factor 1). ``on_round(start, global model, batch of step start)``
    is called before each round."""
    data = as_dtype(load_mnist5k(DATA, cfg.n_train, cfg.n_test, cfg.image_size), dtype)
    parts = partition(data.train_y, cfg.partition, cfg.n_clients, cfg.heterogeneity, cfg.seed)
    batches = ClientBatches(data.train_x, data.train_y, [parts], cfg.batch_size, [cfg.seed],
                            rng.SAMPLE)
    torch.manual_seed(cfg.seed)
    glob = make_model().to(dtype)
    groups = param_groups or (lambda net: [{"params": list(net.parameters()), "lr_factor": 1.0}])
    b, E, losses, first_bad = cfg.batch_size, cfg.local_steps, {}, None
    for start in range(0, cfg.steps, E):
        if on_round is not None:
            on_round(start, glob, batches.sample(start))
        clients = [copy.deepcopy(glob) for _ in range(cfg.n_clients)]
        for i, net in enumerate(clients):
            opt = torch.optim.SGD(list(groups(net)), lr=cfg.lr[0], momentum=cfg.momentum,
                                  weight_decay=cfg.weight_decay)
            net.train()
            if frozen_bn_from is not None and start >= frozen_bn_from:
                for m in net.modules():
                    if isinstance(m, nn.BatchNorm2d):
                        m.eval()
            for step in range(start, start + E):
                k = sum(step >= m for m in cfg.lr_milestones)
                for group in opt.param_groups:
                    group["lr"] = cfg.lr[k] * cfg.lr_scale * group["lr_factor"]
                x, y = batches.sample(step)
                loss = F.nll_loss(net(x[0, i * b:(i + 1) * b]), y[0, i * b:(i + 1) * b])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses[step] = losses.get(step, 0.0) + loss.item() / cfg.n_clients
        states = [net.state_dict() for net in clients]
        glob.load_state_dict({k: torch.stack([s[k].to(dtype) for s in states]).mean(0)
                              .to(states[0][k].dtype) for k in states[0]})
        bad = [s for s in range(start, start + E) if not math.isfinite(losses[s])]
        if first_bad is None and bad:
            first_bad = bad[0]
    glob.eval()
    with torch.no_grad():
        acc = (glob(data.test_x).argmax(1) == data.test_y).float().mean().item()
    return Reference(glob, acc, losses, first_bad)
