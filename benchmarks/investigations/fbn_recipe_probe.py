"""Why FBN does not learn under the FixBN recipe on the quick digits: a diagnosis, not a speed
benchmark (docs/history.md, "FBN under the common recipe").

FBN (the FBN paper's Algorithm 2, line 3) normalizes a training batch with the shared running
statistics: constants, with no gradient through them. This script trains, on MNIST-5k at 8x8
with the quick comparison's recipe (LeNet width 8, IID, 5 clients x 20, SGD lr 0.05 with no
momentum left at E = 1 since it is reset every round, weight decay 1e-4, 400 steps):

- the engine's ``bn`` and ``fbn`` runs (fednorm.run.train_and_evaluate);
- an independent reference in plain PyTorch, one model on the union batch of 100, whose BN
  layers normalize with their running statistics in training and update them by EMA afterwards
  (``running``), against the same loop with ordinary BN (``batch``), with no normalization at
  all (``none``: an affine map only), and ``running`` at 4x the learning rate.

If the reference's ``running`` stalls where the engine's FBN does, the stall is a property of
normalizing with statistics that carry no gradient (the network loses BN's conditioning), not
a defect of the federated code path. Run:
``python benchmarks/investigations/fbn_recipe_probe.py`` (about a minute on one core).
"""

from __future__ import annotations

import tempfile

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from fednorm.config import run_config
from fednorm.data.mnist5k import load_mnist5k
from fednorm.models.lenet import LeNet
from fednorm.run import train_and_evaluate

DATA = "data"
RECIPE = {"dataset": "mnist5k", "n_train": 4000, "n_test": 1000, "image_size": 8,
          "model": "lenet", "width": 8, "n_clients": 5, "batch_size": 20, "local_steps": 1,
          "partition": "iid", "heterogeneity": None, "momentum": 0.9,
          "momentum_convention": "pytorch", "client_momentum": "reset", "weight_decay": 1e-4,
          "lr": [0.05, 0.005, 0.0005], "lr_decay_at": [0.5, 0.75], "epochs": 10,
          "eval_every": 400, "gn_groups": 2, "augment": "none"}


class ReferenceBN(nn.BatchNorm2d):
    """``batch``: nn.BatchNorm2d; ``running``: normalize with the running statistics (no
    gradient), then move them towards the batch's (unbiased variance, weight ``momentum``);
    ``none``: the affine map alone."""

    def __init__(self, channels: int, mode: str) -> None:
        super().__init__(channels)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "none":
            return x * self.weight[:, None, None] + self.bias[:, None, None]
        if not self.training or self.mode == "batch":
            return super().forward(x)
        with torch.no_grad():
            var, mean = torch.var_mean(x, dim=(0, 2, 3))
        out = F.batch_norm(x, self.running_mean.clone(), self.running_var.clone(), self.weight,
                           self.bias, False, 0.0, self.eps)
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
        return out


def reference(mode: str, lr: float = 0.05, steps: int = 400, seed: int = 0) -> tuple[float, float]:
    """(final test accuracy, norm of the first conv's weight) of the plain loop."""
    torch.manual_seed(seed)
    data = load_mnist5k(DATA, 4000, 1000, 8)
    net = LeNet(lambda c: ReferenceBN(c, mode), width=8, image_size=8)
    opt = torch.optim.SGD(net.parameters(), lr=lr, weight_decay=1e-4)
    draw = torch.Generator().manual_seed(seed)
    for step in range(steps):
        for group in opt.param_groups:  # x0.1 at half and three quarters, as lr_decay_at
            group["lr"] = lr * 0.1 ** ((step >= steps // 2) + (step >= 3 * steps // 4))
        idx = torch.randint(0, len(data.train_y), (100,), generator=draw)
        loss = F.nll_loss(net(data.train_x[idx]), data.train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        accuracy = (net(data.test_x).argmax(1) == data.test_y).float().mean().item()
    conv = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
    return accuracy, conv.weight.norm().item()


def engine(normalizer: str) -> float:
    cfg = run_config({**RECIPE, "normalizer": normalizer})
    with tempfile.TemporaryDirectory() as out:
        train_and_evaluate(cfg, out, data_dir=DATA, device="cpu")
        return float(pd.read_csv(f"{out}/metrics.csv")["test_accuracy"].dropna().iloc[-1])


def main() -> None:
    torch.set_num_threads(1)
    rows = [("engine", "bn", engine("bn"), float("nan")),
            ("engine", "fbn", engine("fbn"), float("nan"))]
    for mode, lr in (("batch", 0.05), ("running", 0.05), ("none", 0.05), ("running", 0.2)):
        accuracy, norm = reference(mode, lr)
        rows.append(("reference", f"{mode}, lr {lr:g}", accuracy, norm))
    table = pd.DataFrame(rows, columns=["code", "normalization", "test_accuracy",
                                        "conv1_weight_norm"])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
