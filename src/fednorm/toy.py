"""The FBN paper's 2-D toy (its §3, Figure 1, and §4, Figure 2): one normalization layer, no model.

Setting (paper scale, :class:`fednorm.config.ToyConfig` defaults): n = 10 classes and clients;
class i (label k = i - 1, i = 1..n) is N(μ_i, s²·I₂) with

    μ_i = r · (cos((2πi − 1)/n), sin((2πi − 1)/n)),   r = 10, s² = 1, n = 10.

Every round draws m = 30 fresh points per class (N = n·m points) and splits them among the n
clients with γ-similarity on their labels (γ = 0: client i holds class i only; γ = 1: iid). The
points, stacked client-major, go through one :class:`~fednorm.norms.FedBatchNorm2d` (weight 1,
bias 0, frozen) in training mode under the scheme's statistics rule, exactly as a model layer in
federated training does; then :func:`fednorm.fl.server.commit_stats` aggregates the clients'
reports into the shared running statistics. The scheme's layer and rules come from
:func:`fednorm.norms.normalizer_for`, so the toy runs the same code as real training.

The reference is centralized BatchNorm of the same round's points (``central``: the union batch,
:class:`~fednorm.norms.UnionStats`) through a separate layer. The normalization error of a round is

    err_t = (1/N) Σ_j ‖ x̃_j(scheme) − x̃_j(central) ‖₂,

and the paper's Figure 2c reports its mean over the T rounds. All arithmetic is float64; all
randomness comes from generators seeded by (seed, round), never the global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from fednorm.config import ToyConfig, run_config
from fednorm.data.partition import gamma_similarity
from fednorm.fl.server import commit_stats
from fednorm.norms import FedBatchNorm2d, Normalizer, NormContext, norm_context, normalizer_for
from fednorm.plan import TOY_ERROR_SCHEMES as ERROR_SCHEMES
from fednorm.plan import TOY_SCATTER_FIGURES as SCATTER_FIGURES
from fednorm.plots.scatter import error_figure, toy_figure

SCHEMES = ("central", "bn", "fbn", "fixbn")
FEATURES = 2
DTYPE = torch.float64
_POINTS_STREAM, _PARTITION_STREAM = 0, 1


@dataclass(frozen=True)
class ToyResult:
    """One simulated run. Row j of a round is client j // m's point (client-major order)."""

    scheme: str
    gamma: float
    seed: int
    points: Tensor  # (T, N, 2) raw points
    labels: Tensor  # (T, N) int64 class labels k = i - 1 in [0, n)
    normalized: Tensor  # (T, N, 2) as the scheme's clients normalized them
    central: Tensor  # (T, N, 2) centralized BatchNorm of the same points (the reference)
    error: Tensor  # (T,) mean Euclidean distance between normalized and central
    running_mean: Tensor  # (T, 2) shared running mean after each round
    running_var: Tensor  # (T, 2) shared running variance after each round


def class_means(cfg: ToyConfig) -> Tensor:
    """(n, 2): row k = i − 1 is μ_i = r·(cos θ_i, sin θ_i), θ_i = (2πi − 1)/n, i = 1..n."""
    i = torch.arange(1, cfg.n_clients + 1, dtype=DTYPE)
    theta = (2 * math.pi * i - 1) / cfg.n_clients
    return cfg.radius * torch.stack([torch.cos(theta), torch.sin(theta)], dim=1)


def round_seed(seed: int, round_index: int, stream: int) -> int:
    """A 63-bit seed that is a pure function of (seed, round, stream) (numpy's SeedSequence)."""
    state = np.random.SeedSequence([seed, round_index, stream]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def draw_round(cfg: ToyConfig, seed: int, round_index: int) -> tuple[Tensor, Tensor]:
    """One round's (n·m, 2) points and (n·m,) labels, class-major: x = μ_k + s·z, z ~ N(0, I₂)."""
    gen = torch.Generator().manual_seed(round_seed(seed, round_index, _POINTS_STREAM))
    n, m = cfg.n_clients, cfg.points_per_client
    noise = torch.randn(n, m, FEATURES, generator=gen, dtype=DTYPE)
    points = class_means(cfg).unsqueeze(1) + math.sqrt(cfg.spread) * noise
    labels = torch.arange(n).repeat_interleave(m)
    return points.reshape(n * m, FEATURES), labels


def client_major(labels: Tensor, cfg: ToyConfig, gamma: float, seed: int,
                 round_index: int) -> Tensor:
    """Indices that stack the round's points client by client (γ-similarity split).

    Every client gets the same number of points: m, except for γ where γ·N or (1−γ)·N is not a
    multiple of n (gamma_similarity then drops at most n − 1 points of each pool).
    """
    part_seed = round_seed(seed, round_index, _PARTITION_STREAM)
    return torch.cat(gamma_similarity(labels, cfg.n_clients, gamma, part_seed))


def _normalizer(cfg: ToyConfig, scheme: str) -> Normalizer:
    """The project's normalizer for ``scheme`` with T = rounds (one step per round)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme={scheme!r}; allowed: {', '.join(SCHEMES)}")
    run = run_config({
        "normalizer": scheme, "steps": cfg.rounds, "fixbn_freeze": cfg.fixbn_freeze,
        "bn_eps": cfg.eps, "bn_momentum": cfg.beta, "n_clients": cfg.n_clients,
    }, where="toy")
    return normalizer_for(run)


def _layer(normalizer: Normalizer) -> FedBatchNorm2d:
    """A fresh float64 layer with the affine part fixed to the identity (w = 1, b = 0)."""
    layer = normalizer.make_layer(FEATURES).double()
    for p in layer.parameters():
        p.requires_grad_(False)
    return layer


def _normalize_round(layer: FedBatchNorm2d, normalizer: Normalizer, round_index: int, x: Tensor,
                     cfg: ToyConfig) -> Tensor:
    """One round of one scheme: the clients' forward pass, then the server's aggregation."""
    rule = normalizer.rule_at(round_index)
    ctx = NormContext(rule, cfg.n_clients, cfg.n_clients, cfg.beta)
    with norm_context(ctx):
        out = layer(x)
    commit_stats([layer], ctx.reports, rule, cfg.n_clients, cfg.beta)
    return out


@torch.no_grad()
def simulate(cfg: ToyConfig, scheme: str, gamma: float, seed: int) -> ToyResult:
    """Run ``scheme`` for ``cfg.rounds`` rounds on the draws of ``seed`` at similarity ``gamma``.

    The draws and splits depend only on (cfg, gamma, seed), so every scheme sees the same points.
    """
    normalizer = _normalizer(cfg, scheme)
    reference = _normalizer(cfg, "central")
    layer, ref_layer = _layer(normalizer), _layer(reference)
    keep: dict[str, list[Tensor]] = {k: [] for k in ("points", "labels", "out", "ref", "mu", "var")}
    for t in range(cfg.rounds):
        points, labels = draw_round(cfg, seed, t)
        order = client_major(labels, cfg, gamma, seed, t)
        x = points[order]
        keep["points"].append(x)
        keep["labels"].append(labels[order])
        keep["out"].append(_normalize_round(layer, normalizer, t, x, cfg))
        keep["ref"].append(_normalize_round(ref_layer, reference, t, x, cfg))
        keep["mu"].append(layer.running_mean.clone())
        keep["var"].append(layer.running_var.clone())
    stacked = {k: torch.stack(v) for k, v in keep.items()}
    error = (stacked["out"] - stacked["ref"]).norm(dim=-1).mean(dim=-1)
    return ToyResult(
        scheme=scheme, gamma=float(gamma), seed=seed, points=stacked["points"],
        labels=stacked["labels"], normalized=stacked["out"], central=stacked["ref"], error=error,
        running_mean=stacked["mu"], running_var=stacked["var"],
    )


def error_table(cfg: ToyConfig, schemes: Iterable[str], gammas: Iterable[float],
                seeds: Iterable[int]) -> pd.DataFrame:
    """Tidy: one row per (scheme, gamma, seed); ``error`` = (1/T) Σ_t err_t (Figure 2c)."""
    rows = [
        {"scheme": scheme, "gamma": float(gamma), "seed": seed,
         "error": float(simulate(cfg, scheme, gamma, seed).error.mean())}
        for scheme in schemes for gamma in gammas for seed in seeds
    ]
    return pd.DataFrame(rows, columns=["scheme", "gamma", "seed", "error"])


def points_table(result: ToyResult, round: int) -> pd.DataFrame:
    """Round ``round`` (1-based, 1..T) as rows x, y, label, stage: the raw points ("before")
    followed by the same points as the scheme normalized them ("after")."""
    rounds = result.points.shape[0]
    if not 1 <= round <= rounds:
        raise ValueError(f"round must be in [1, {rounds}], got round={round}")
    stages = {"before": result.points[round - 1], "after": result.normalized[round - 1]}
    labels = result.labels[round - 1].numpy()
    frames = [
        pd.DataFrame({"x": xy[:, 0].numpy(), "y": xy[:, 1].numpy(), "label": labels,
                      "stage": stage})
        for stage, xy in stages.items()
    ]
    return pd.concat(frames, ignore_index=True)


def make_toy_figures(cfg: ToyConfig, out_dir: Path, gammas: Sequence[float] = (0, 0.1, 0.5, 1),
                     seeds: Sequence[int] = (0, 1, 2)) -> list[Path]:
    """Figures 1a, 1b, 2a, 2b (points before/after at round T, γ = 0, seed ``seeds[0]``) and 2c
    (error vs γ for fbn, fixbn, bn; band over ``seeds``), each as .pdf, .png and .csv."""
    out_dir = Path(out_dir)
    paths: list[Path] = []
    for stem, (scheme, title) in SCATTER_FIGURES.items():
        result = simulate(cfg, scheme, 0.0, seeds[0])
        table = points_table(result, cfg.rounds)
        paths += toy_figure(table, out_dir / stem, f"{title} (round {cfg.rounds})")
    errors = error_table(cfg, ERROR_SCHEMES, gammas, seeds)
    paths += error_figure(errors, out_dir / "fig2c", "Normalization error vs centralized BN")
    return paths
