"""FedAP (Lu, Wang, Chen, Qin, Xu, Dimitriadis, Qin, "Personalized Federated Learning with
Adaptive Batchnorm for Healthcare", IEEE Transactions on Big Data 2022; arXiv 2112.00734): each
client keeps its own BN layers (statistics and gamma, beta), and the server serves each client
its own weighted average of the clients' other parameters, the weights fixed before round 0
from how alike the clients' data look to a pretrained model.

Before round 0 (:meth:`AdaptiveMixing.before_training`), per run:

1. a copy of the run's initial model trains for ``pretrain_passes`` (150, the code's) passes of
   plain SGD (no momentum,
   no weight decay; the run's first learning rate, its batch size, BN's running statistics as
   nn.BatchNorm2d keeps them) over a class-balanced ``FRACTION`` of the clients' pooled
   training images (:func:`pretraining_indices`): drawn from the clients' parts, so never a
   validation or test image (the authors' code takes the first 30 % of each class of the
   pooled data, which its clients' test data overlap);
2. under that model (eval mode) each client's images give, per BN layer, the Gaussian of the
   layer's input: its mean and (biased) variance per channel over all the client's values
   (:func:`feature_statistics`);
3. the distance of clients i and j is the sum over the layers of the 2-Wasserstein distance of
   those Gaussians with diagonal covariances, sqrt(||m_i - m_j||^2 + ||s_i - s_j||^2), s the
   standard deviations (:func:`wasserstein`; the code's ``nosquare`` mode);
4. the mixing matrix (:func:`mixing_matrix`): row i is (1 - lambda) times the inverse distances
   1/d_ij (j != i) normalized to sum 1, and lambda (``self_weight``, the code's
   ``model_momentum``) on the diagonal; under partial participation, over the round's
   participants alone.

Each round the server averages every parameter into the global model as FedAvg does (the
global model's row), and serves each participant i its own sum_j W_ij theta_j of the
participants' parameters outside the BN layers (the engine's aggregation_matrix hook,
fednorm.fl.parts), which client i starts its next round from and is tested with, with its own
BN layers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from fednorm import rng
from fednorm.config import RunConfig
from fednorm.norms.hooks import Hooks, Tools
from fednorm.norms.layer import FedBatchNorm2d, NormContext, norm_context
from fednorm.norms.parts import client_parts
from fednorm.norms.rules import BatchStats

FRACTION = 0.3  # of each class of the pooled training images (the authors' code)
SAME = 1e14  # the code's inverse distance of two clients at distance 0
KEY = "inverse_distances"  # the state's (R, n, n) 1 / d_ij (0 on the diagonal)


@dataclass(frozen=True)
class Params:
    """FedAP's parameters (a bundle's runs share them: its own key is in the bundle key)."""

    self_weight: float  # lambda, the mixing matrix's diagonal (``self_weight``)
    beta: float  # BN's momentum in the pretraining (``bn_momentum``)
    passes: int  # of plain SGD over them (``pretrain_passes``; the code's 150)
    fraction: float = FRACTION


def layers(cfg: RunConfig) -> dict:
    """FedAP: BN layers with naive BN's rule, each client's own; the rest served per client."""
    rule = BatchStats()
    return dict(make_layer=lambda c: FedBatchNorm2d(c, eps=cfg.bn_eps),
                rule_at=lambda step: rule,
                parts=client_parts(own=("stats", "affine"), served=("rest",)),
                hooks=AdaptiveMixing(Params(cfg.self_weight, cfg.bn_momentum,
                                            passes=cfg.pretrain_passes)))


def pretraining_indices(y: Tensor, index: Tensor, sizes: Tensor, key: Tensor,
                        fraction: float = FRACTION) -> Tensor:
    """One run's pretraining images: of the clients' pooled training images (``index`` (n,
    max) client i's first ``sizes[i]``), a random ``fraction`` of each class (rounded), drawn
    with ``key``; indices into the training images, in increasing order."""
    pooled = torch.cat([index[i, : int(sizes[i])] for i in range(index.shape[0])])
    order = pooled[rng.uniform(key, (len(pooled),)).argsort()]
    labels = y[order]
    picked = [order[labels == c][: round(fraction * int((labels == c).sum()))]
              for c in labels.unique()]
    return torch.cat(picked).sort().values


def _bn_layers(model: nn.Module) -> list[FedBatchNorm2d]:
    return [m for m in model.modules() if isinstance(m, FedBatchNorm2d)]


def pretrain(model: nn.Module, x: Tensor, y: Tensor, lr: float, batch: int, beta: float,
             key: Tensor, passes: int) -> nn.Module:
    """``model`` trained in place by ``passes`` passes of plain SGD over (x, y) in batches of
    ``batch`` (each pass in an order drawn with ``key``; a last smaller batch left out), its
    BN layers normalizing with their batch and moving their running statistics by ``beta``
    (unbiased variance), as nn.BatchNorm2d does."""
    model.train()
    bns = _bn_layers(model)
    for i, layer in enumerate(bns):
        layer.key = f"pretrained.{i}"
    params = [p for p in model.parameters()]
    for e in range(passes):
        order = rng.uniform(rng.fold(key, e), (len(y),)).argsort()
        for start in range(0, len(y) - batch + 1, batch):
            idx = order[start: start + batch]
            ctx = NormContext(BatchStats(), 1, 1, beta)
            with norm_context(ctx), rng.dropout_key(rng.fold(key, e, start)):
                loss = nn.functional.nll_loss(model(x[idx]), y[idx])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p.sub_(lr * g)
                for layer in bns:
                    new = ctx.reports[layer.key]
                    layer.running_mean.copy_(new.mean[0])
                    layer.running_var.copy_(new.var[0])
    return model


@torch.no_grad()
def feature_statistics(model: nn.Module, x: Tensor, batch: int) -> list[tuple[Tensor, Tensor]]:
    """Per BN layer of ``model`` (eval mode), the (mean, biased variance) per channel of its
    input over all of ``x``'s values, in batches of ``batch`` (combined exactly: Chan et
    al.'s pairwise update of counts, means and sums of squared deviations)."""
    model.eval()
    seen: list[Tensor] = []
    handles = [la.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
               for la in _bn_layers(model)]
    sums: list[list] = []
    try:
        for start in range(0, len(x), batch):
            seen.clear()
            model(x[start: start + batch])
            for i, f in enumerate(seen):
                dims = [d for d in range(f.dim()) if d != 1]
                var, mean = torch.var_mean(f, dim=dims, correction=0)
                count = f.numel() // f.shape[1]
                if i == len(sums):
                    sums.append([count, mean, var * count])
                    continue
                n_a, m_a, m2_a = sums[i]
                total = n_a + count
                delta = mean - m_a
                sums[i] = [total, m_a + delta * count / total,
                           m2_a + var * count + delta ** 2 * n_a * count / total]
    finally:
        for h in handles:
            h.remove()
    model.train()
    return [(mean, m2 / count) for count, mean, m2 in sums]


def wasserstein(a: list[tuple[Tensor, Tensor]], b: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Sum over the layers of the 2-Wasserstein distance of two diagonal Gaussians."""
    return sum(torch.sqrt(((ma - mb) ** 2).sum() + ((va.sqrt() - vb.sqrt()) ** 2).sum())
               for (ma, va), (mb, vb) in zip(a, b, strict=True))


def inverse_distances(stats: list[list[tuple[Tensor, Tensor]]]) -> Tensor:
    """(n, n): 1 / d_ij of the clients' feature statistics (``SAME`` at distance 0), 0 on the
    diagonal."""
    n = len(stats)
    out = torch.zeros(n, n, dtype=stats[0][0][0].dtype, device=stats[0][0][0].device)
    for i in range(n):
        for j in range(n):
            if i != j:
                d = wasserstein(stats[i], stats[j])
                out[i, j] = SAME if d == 0 else 1.0 / d
    return out


def mixing_matrix(inverse: Tensor, self_weight: float, who: Tensor | None = None) -> Tensor:
    """(R, m, m) from the (R, n, n) inverse distances: off the diagonal each row's inverse
    distances over the clients ``who`` (R, m) (None: all n) normalized to 1 - ``self_weight``,
    ``self_weight`` on the diagonal (a single client: 1)."""
    if who is not None:
        R, m = who.shape
        inverse = inverse.gather(1, who.unsqueeze(2).expand(R, m, inverse.shape[2]))
        inverse = inverse.gather(2, who.unsqueeze(1).expand(R, m, m))
    m = inverse.shape[1]
    eye = torch.eye(m, dtype=inverse.dtype, device=inverse.device)
    if m == 1:
        return eye.expand_as(inverse).clone()
    others = inverse / inverse.sum(2, keepdim=True)
    return (1.0 - self_weight) * others + self_weight * eye


class AdaptiveMixing(Hooks):
    """FedAP's hooks: the clients' similarity before round 0, each client's mix after each
    round (the module's docstring)."""

    per_client = True

    def __init__(self, params: Params, model: nn.Module | None = None) -> None:
        self.params, self.model = params, model

    def bind(self, model: nn.Module, batches: Any) -> AdaptiveMixing:
        return AdaptiveMixing(self.params, model)

    def before_training(self, tools: Tools) -> None:
        batches, state = tools.batches, tools.state
        out = []
        for r in range(tools.runs):
            key = rng.fold(tools.keys[r], rng.STATISTICS)
            picked = pretraining_indices(batches.y, batches.index[r], batches.sizes[r], key,
                                         self.params.fraction)
            model = copy.deepcopy(self.model)
            with torch.no_grad():
                for k, t in {**dict(model.named_parameters()),
                             **dict(model.named_buffers())}.items():
                    if k in state.params or k in state.stats:
                        t.copy_({**state.params, **state.stats}[k][r])
            pretrain(model, batches.x[picked], batches.y[picked], float(tools.lrs[r, 0]),
                     tools.batch_size, self.params.beta, key, self.params.passes)
            stats = [feature_statistics(model, batches.x[batches.index[r, i, : int(s)]],
                                        tools.batch_size)
                     for i, s in enumerate(batches.sizes[r])]
            out.append(inverse_distances(stats))
        state.method[KEY] = torch.stack(out)

    def aggregation_matrix(self, tools: Tools, who: Tensor | None) -> Tensor | None:
        return mixing_matrix(tools.state.method[KEY], self.params.self_weight, who)
