"""One training run from a config: data onto the device, clients sampled, evaluated every k
steps. Returns the metrics as rows; writing files is :mod:`fednorm.run`'s job."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fednorm.config import RunConfig
from fednorm.data import Arrays
from fednorm.data.augment import random_crop_flip
from fednorm.data.partition import partition
from fednorm.fl.batches import ClientBatches
from fednorm.fl.engine import make_trainer
from fednorm.fl.norm_error import layer_errors, union_statistics
from fednorm.models import build_model
from fednorm.norms import FedBatchNorm2d, normalizer_for

METRIC_COLUMNS = ("step", "test_accuracy", "test_loss", "train_loss", "norm_error_mean",
                  "norm_error_var")
LAYER_COLUMNS = ("step", "layer", "mean_error", "var_error")


@dataclass
class TrainResult:
    rows: list[dict[str, float]] = field(default_factory=list)  # METRIC_COLUMNS
    layer_rows: list[dict] = field(default_factory=list)  # LAYER_COLUMNS: normalization error
    status: str = "ok"  # "ok" or "diverged"
    model: nn.Module | None = None


@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor, batch: int = 1000) -> tuple[float, float]:
    """Test accuracy (fraction) and mean NLL of the global model in eval mode."""
    model.eval()
    loss = torch.zeros((), device=x.device)
    correct = torch.zeros((), device=x.device)
    for i in range(0, len(x), batch):
        out = model(x[i : i + batch])
        loss += F.nll_loss(out, y[i : i + batch], reduction="sum")
        correct += (out.argmax(1) == y[i : i + batch]).sum()
    model.train()
    return (correct / len(x)).item(), (loss / len(x)).item()


class _AugmentedBatches(ClientBatches):
    """Client batches with batched on-device random crop (pad 4) and horizontal flip."""

    def sample(self) -> tuple[Tensor, Tensor]:
        x, y = super().sample()
        return random_crop_flip(x, padding=4, generator=self.generator), y


def train(cfg: RunConfig, data: Arrays, device: str | torch.device = "cpu",
          force_fedavg: bool = False) -> TrainResult:
    """Train one run; a non-finite training or test loss stops it with status 'diverged'."""
    device = torch.device(device)
    torch.manual_seed(cfg.seed)  # model initialization and dropout
    data = data.to(device)
    model = build_model(cfg, data.n_classes).to(device)
    parts = partition(data.train_y.cpu(), cfg.partition, cfg.n_clients, cfg.heterogeneity,
                      cfg.seed)
    generator = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    batches_cls = _AugmentedBatches if cfg.augment == "crop_flip" else ClientBatches
    batches = batches_cls(data.train_x, data.train_y, parts, cfg.batch_size, generator)
    trainer = make_trainer(cfg, model, normalizer_for(cfg), batches, force_fedavg)
    if cfg.fbn_init == "first_batch" and cfg.normalizer == "fbn":
        trainer.calibrate()

    # The normalization error is measured on separate draws of the clients' batches, so that
    # measuring never changes the training trajectory. Under attack the reference is the union
    # of the honest clients' batches (the first n - f): what a robust server can at best recover.
    honest = cfg.n_clients - (cfg.f if cfg.attack != "none" else 0)
    probe = ClientBatches(data.train_x, data.train_y, parts[:honest], cfg.batch_size,
                          torch.Generator(device=device).manual_seed(cfg.seed + 2))
    result = TrainResult(model=model)

    def record(step: int, train_loss: float) -> bool:
        """Append an evaluation row; False when the run has diverged."""
        acc, test_loss = math.nan, math.nan
        if math.isfinite(train_loss) or step == 0:
            acc, test_loss = evaluate(model, data.test_x, data.test_y)
        if not math.isfinite(test_loss):
            acc = math.nan  # argmax over NaN outputs is not an accuracy
        errors = norm_error(model, trainer.layers, probe, honest)
        result.layer_rows += [{"step": step, **row} for row in errors]
        result.rows.append(dict(
            step=step, test_accuracy=acc, test_loss=test_loss, train_loss=train_loss,
            norm_error_mean=_mean([r["mean_error"] for r in errors]),
            norm_error_var=_mean([r["var_error"] for r in errors]),
        ))
        return math.isfinite(test_loss) and (step == 0 or math.isfinite(train_loss))

    record(0, math.nan)
    loss_sum, since = torch.zeros((), device=device), 0
    for first in range(0, cfg.steps, cfg.local_steps):
        loss_sum += trainer.round(first)
        since += cfg.local_steps
        step = first + cfg.local_steps
        if step // cfg.eval_every == first // cfg.eval_every and step != cfg.steps:
            continue
        # the only host sync: at evaluation points
        if not record(step, (loss_sum / since).item()):
            result.status = "diverged"
            break
        loss_sum, since = torch.zeros((), device=device), 0
    return result


def norm_error(model: nn.Module, layers: list[FedBatchNorm2d], probe: ClientBatches,
               n_clients: int) -> list[dict]:
    if not layers:
        return []
    x, _ = probe.sample()
    return layer_errors(layers, union_statistics(model, layers, x, n_clients))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
