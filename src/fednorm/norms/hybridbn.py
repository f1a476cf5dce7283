"""Hybrid BN (Chen, Xu, Wu, Kittler, ICML 2025, "Hybrid Batch Normalisation: Resolving the
Dilemma of Batch Normalisation in Federated Learning"; arXiv 2505.21877): its layer
(:class:`HybridBatchNorm2d`), its rule (:class:`HybridStats`), and its hooks
(:class:`RoundStartStatistics`): the statistics the clients report at each round's start, and
the fresh statistics of each test (``hybridbn_eval: fresh``, the authors' code). Every detail,
paper against code against ours: docs/methods.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from fednorm import methods, rng
from fednorm.config import RunConfig
from fednorm.norms.hooks import Hooks, Pending, Tools, restored
from fednorm.norms.layer import FedBatchNorm2d
from fednorm.norms.parts import client_parts
from fednorm.norms.rules import FederatedStats, StatRule, Stats


@dataclass(frozen=True)
class RoundStart:
    """Statistics of the downloaded global model at a round's start (the reports of
    :class:`HybridStats`)."""

    images: int  # per client, in one no-grad training-mode forward
    momentum: float  # the server's smoothing a round (fednorm.methods.per_round)
    fresh_eval: bool  # each test recomputes them from the current global model, unsmoothed


def layers(cfg: RunConfig) -> dict:
    """Hybrid BN: its layer, its rule, the round-start statistics its keys describe, and its
    own d kept by each client (``hybridbn_mixing: client``) or one shared d."""
    start = RoundStart(cfg.hybridbn_stats_images, methods.per_round(cfg, "hybridbn_momentum"),
                       cfg.hybridbn_eval == "fresh")
    rule = HybridStats(cfg.hybridbn_report)
    return dict(make_layer=lambda c: HybridBatchNorm2d(c, eps=cfg.bn_eps),
                rule_at=lambda step: rule, hooks=RoundStartStatistics(start),
                parts=client_parts(shared=("mixing",) if cfg.hybridbn_mixing == "client" else ()))


class RoundStartStatistics(Hooks):
    """The clients' reports of the global model at a round's start (Algorithm 1): each client
    of the round (all n, or its m participants) runs the downloaded global model in training
    mode, with no gradient, over ``start.images`` of its own images (a sampler of its own,
    the same participants); per layer (R, clients, C), moved from the global statistics by
    ``start.momentum`` (the rule's ``report``). All clients share the weights but their own
    parts ``own`` (each client's own d, ``hybridbn_mixing: client``), which the layers take
    per client: one forward over their stacked images."""

    def __init__(self, start: RoundStart, batches: Any = None) -> None:
        self.start, self.batches = start, batches

    def bind(self, model: nn.Module, batches: Any) -> RoundStartStatistics:
        return RoundStartStatistics(self.start, batches.resized(self.start.images,
                                                                rng.STATISTICS))

    def select(self, runs: Tensor) -> None:
        self.batches = self.batches.select(runs)

    @torch.no_grad()
    def reports(self, tools: Tools, rule: StatRule, step: int | Tensor, beta: float,
                own: dict[str, Tensor]) -> Pending:
        x, _ = self.batches.sample(step)
        clients = x.shape[1] // self.batches.b
        reports = tools.forward(rule, clients, beta, x, rng.fold(tools.keys, rng.STATISTICS, step),
                                params=own, clients=clients)
        return Pending(reports, {la.key: la.elements_per_client for la in tools.layers}, beta)

    def round_start(self, tools: Tools, rule: StatRule | None, step: int | Tensor,
                    own: dict[str, Tensor]) -> Pending | None:
        if rule is None or not rule.reports_at_round_start or not tools.layers:
            return None
        return self.reports(tools, rule, step, self.start.momentum, own)

    @contextlib.contextmanager
    def evaluation(self, tools: Tools, step: int) -> Iterator[None]:
        """With ``fresh_eval``: the global statistics recomputed from the current global model
        as at a round's start (the last round's clients, with their own d, and images, beta =
        1: the pooled statistics themselves), for the test alone; restored after it."""
        rule = tools.rule_at(step)
        if not self.start.fresh_eval or rule is None:
            yield
            return
        with restored(tools.state.stats):
            last = max(step - tools.local_steps, 0)
            own = tools.own_parts(tools.participants(last), True)
            pending = self.reports(tools, rule, last, 1.0, own)
            tools.commit(pending.reports, rule, 1.0,
                         next(iter(pending.reports.values()))[0].shape[1], pending.K)
            yield


class HybridStats(FederatedStats):
    """Hybrid BN (Chen, Xu, Wu, Kittler, ICML 2025, "Hybrid Batch Normalisation: Resolving the
    Dilemma of Batch Normalisation in Federated Learning"; arXiv 2505.21877), Algorithm 1.

    (1) A client normalizes a training batch with a per-channel mixture of the global statistics
    G and its batch's (mean, biased variance): (1 - a) G + a batch, a = sigmoid(d) with d a
    learnable parameter (fednorm.norms.layer.HybridBatchNorm2d; the gradient flows through the
    batch part, G is a constant fixed for the whole round). (2) What it reports is computed
    apart from training: at the round's start, one no-grad training-mode forward of the
    *downloaded global model* over S (``RoundStart.images``) of its images
    (``reports_at_round_start``; fednorm.fl.round), each layer reporting the statistics it
    normalized with, the mixture (``mixed``, the authors' code) or its input's own
    (its ``report: batch``); so the report depends on the global weights and the data,
    never on the learning rate. (3) The server pools the n clients' reports count-weighted
    (equal counts, K = S*H*W values per channel each) and smooths with beta =
    ``RoundStart.momentum`` (its per-round smoothing, scaled with the budget
    when requested: fednorm.methods.per_round):

        mean <- (1 - beta) G_mean + beta mean_i m_i,
        var  <- (1 - beta) G_var + beta N/(N-1) (mean_i v_i + mean_i (m_i - mean_i m_i)^2),

    N = nK: the pooled mean and unbiased pooled variance (law of total variance), which is
    exactly FBN's aggregation (``FederatedStats.aggregate``) of the reports moved from G by
    beta (``report``, unchanged). Under partial participation the pool is the round's m
    participants' (n -> m). (4) The global model normalizes with G; with
    ``RoundStart.fresh_eval`` (the authors' code) each test first recomputes G from the current
    global model as in (2)-(3) with beta = 1, for the test alone (its ``evaluation`` hook).
    """

    name = "hybrid"
    normalize_with = "mixture"
    reports_at_round_start = True

    def __init__(self, report: str = "mixed") -> None:
        self.reports_mixture = report == "mixed"


class HybridBatchNorm2d(FedBatchNorm2d):
    """Hybrid BN's layer (fednorm.norms.rules.HybridStats): in training, each client's batch is
    normalized with (1 - a) running + a batch, per channel, for both the mean and the (biased)
    variance, a = sigmoid(``mix``), ``mix`` (the paper's d) a parameter initialized at 0 (a =
    0.5); the gradient flows through the batch statistics, the running ones are constants. Eval
    mode normalizes with the running (global) statistics, as FedBatchNorm2d does. ``mix`` may
    carry a client dimension, (g, C): each client's own d (the round-start forward of all
    clients at once, fednorm.fl.round)."""

    mixing = ("mix",)

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__(num_features, eps)
        self.mix = nn.Parameter(torch.zeros(num_features))

    def _mixture(self, batch: Stats, running: Stats) -> Stats:
        """(1 - a) running + a batch, per channel, for the mean and the (biased) variance."""
        a = torch.sigmoid(self.mix)
        return Stats((1 - a) * running.mean + a * batch.mean, (1 - a) * running.var + a * batch.var)

    def _mixed(self, xg: Tensor, running: Stats) -> Tensor:
        dims = (1, *range(3, xg.dim()))
        var, mean = torch.var_mean(xg, dim=dims, correction=0)  # (g, C), with gradient
        mixed = self._mixture(Stats(mean, var), running)
        return self._affine(xg, mixed.mean, mixed.var)
