"""Why Fixup falls far below GN in the quick Table 4 (experiment ``fixbn_table4``: ResNet-20
width 4, 8x8 digits, Shards(2), 5 clients x 20, E = 5, 200 steps, SGD lr 0.05 -> x0.1 at 50 %
and 75 %, momentum 0.9 reset every round, weight decay 1e-4, seed 0; docs/history.md, "Root
causes of the large contradictions"). A diagnosis, not a speed benchmark.

Three questions, each answered by a measurement:

1. Does the engine train fednorm.models.fixup.FixupResNet20 as a plain loop would (its scalar
   biases and multipliers under the same SGD, momentum and weight decay as every weight)? The
   engine's run and a per-client plain PyTorch FedAvg (benchmarks/plain_fedavg.py) of the same
   model from the same initial weights on the same batches, both in float64: the largest
   difference of any parameter after the 200 steps.
2. Is it our model? A Fixup ResNet-20 written another way, after the authors' CIFAR code
   (hongyi-zhang/Fixup, cifar/models/fixup_resnet_cifar.py, read, not copied): the branch's
   first conv at N(0, 2 / fan_out) x L^(-1/2), the stem at PyTorch's default init and without
   an input bias, the downsampling shortcut fed x + bias1a; trained in the plain loop with one
   learning rate, and with the authors' training script's lr / 10 for the scalar biases and
   multipliers.
3. Is it the setting? The engine's Fixup and GN, one factor at a time: the learning rate, the
   weight decay, the split, a 4x longer budget.

Run: ``python benchmarks/investigations/root_cause_fixup.py`` (one thread; the runtime is printed).
"""

from __future__ import annotations

import dataclasses
import time

import pandas as pd
import torch
import torch.nn.functional as F
from plain_fedavg import DATA, as_dtype, cell, engine, plain_fedavg, quick_run
from torch import Tensor, nn

from fednorm.data import load_dataset
from fednorm.fl.train import train
from fednorm.models.fixup import FixupResNet20


class AuthorsBlock(nn.Module):
    """A basic block as the Fixup authors' CIFAR code builds it."""

    def __init__(self, c_in: int, c_out: int, stride: int, blocks: int) -> None:
        super().__init__()
        self.b1a, self.b1b, self.b2a, self.b2b = (nn.Parameter(torch.zeros(1)) for _ in range(4))
        self.scale = nn.Parameter(torch.ones(1))
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        fan_out = c_out * 9
        nn.init.normal_(self.conv1.weight, 0.0, (2.0 / fan_out) ** 0.5 * blocks ** -0.5)
        nn.init.zeros_(self.conv2.weight)
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.conv1(x + self.b1a) + self.b1b)
        out = self.conv2(out + self.b2a) * self.scale + self.b2b
        skip = x
        if self.stride != 1:  # every other pixel, the new channels zero
            skip = (x + self.b1a)[:, :, ::self.stride, ::self.stride]
            skip = torch.cat([skip, torch.zeros_like(skip)], 1)
        return F.relu(out + skip)


class AuthorsFixupResNet20(nn.Module):
    def __init__(self, width: int, n_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1, bias=False)  # PyTorch's default init
        self.b_stem, self.b_head = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
        blocks, c = [], width
        for stage, c_out in enumerate((width, 2 * width, 4 * width)):
            for k in range(3):
                blocks.append(AuthorsBlock(c, c_out, 2 if stage and not k else 1, 9))
                c = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, n_classes)
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.blocks(F.relu(self.stem(x) + self.b_stem))
        return torch.log_softmax(self.fc(x.mean((2, 3)) + self.b_head), 1)


def scalars_at_tenth(net: nn.Module) -> list[dict]:
    """The authors' training script's groups: the scalar biases and multipliers at lr / 10."""
    scalars = [p for p in net.parameters() if p.numel() == 1]
    others = [p for p in net.parameters() if p.numel() > 1]
    return [{"params": scalars, "lr_factor": 0.1}, {"params": others, "lr_factor": 1.0}]


def engine_matches_plain_loop(cfg) -> float:
    """Largest |difference| of any parameter between the engine's Fixup run and the plain loop
    on the same model, init and batches, both in float64."""
    model = train(cfg, as_dtype(load_dataset(cfg, DATA), torch.float64), "cpu").model
    ref = plain_fedavg(cfg, lambda: FixupResNet20(cfg.width), torch.float64).model
    return max((a - b).abs().max().item() for a, b in
               zip(model.parameters(), ref.parameters(), strict=True))


def probes(base) -> list[tuple[str, dict]]:
    steps = base.steps * 4
    return [
        ("recipe (lr 0.05, wd 1e-4, Shards, 200 steps)", {}),
        ("lr x 0.5", {"lr_scale": 0.5}),
        ("lr x 2", {"lr_scale": 2.0}),
        ("lr x 4", {"lr_scale": 4.0}),
        ("weight decay 0", {"weight_decay": 0.0}),
        ("IID", {"partition": "iid", "heterogeneity": None}),
        ("4x the steps (800)", {"steps": steps, "lr_milestones": (steps // 2, 3 * steps // 4)}),
    ]


def main() -> None:
    torch.set_num_threads(1)
    began = time.perf_counter()
    base = quick_run("fixbn_table4", normalizer="fixup")
    gap = engine_matches_plain_loop(base)
    print(f"engine Fixup against the plain loop, same model, float64, {base.steps} steps: "
          f"max |parameter difference| {gap:.1e}")
    for label, groups in (("one lr", None), ("scalars at lr / 10", scalars_at_tenth)):
        ref = plain_fedavg(base, lambda: AuthorsFixupResNet20(base.width), param_groups=groups)
        print(f"the authors' Fixup ResNet-20 in the plain loop, {label}: test accuracy "
              f"{100 * ref.accuracy:.1f} %")
    rows = []
    for label, over in probes(base):
        fixup = engine(dataclasses.replace(base, **over))
        gn = engine(dataclasses.replace(base, normalizer="gn", **over))
        rows.append((label, cell(fixup), cell(gn)))
    print(pd.DataFrame(rows, columns=["probe (engine)", "Fixup", "GN"]).to_string(index=False))
    print(f"runtime {time.perf_counter() - began:.0f} s (one thread)")


if __name__ == "__main__":
    main()
