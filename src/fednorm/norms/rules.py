"""How BN-like normalizers answer the four questions of federated normalization.

1. how a client normalizes while training      -> :attr:`StatRule.normalize_with`: its own
                                                   batch, the union of all clients' batches,
                                                   or the shared running statistics
2. which statistics it reports to the server   -> :meth:`StatRule.report`
3. how the server aggregates them              -> :meth:`StatRule.aggregate`, with ``combine``
                                                   the server's rule for one statistic (mean,
                                                   or a robust one: fednorm.robust)
4. how the global model normalizes at test     -> always the aggregated running statistics
   (see :class:`fednorm.norms.layer.FedBatchNorm2d` in eval mode).

Conventions (DESIGN.md; they must not drift):
- ``beta`` is the weight of the new batch in the running averages (PyTorch's ``momentum``; the
  FBN paper's beta): ``run <- (1 - beta) * run + beta * batch``.
- Batch statistics are per channel over K = b*H*W values of one client; ``var`` is the biased
  (1/K) variance used to normalize; running variances are unbiased (K/(K-1), or Kn/(Kn-1) when
  the statistic estimates the union of n clients' batches).
- Shapes: per-client statistics are (g, C) (g clients in this forward pass); running statistics
  are (C,) and broadcast over clients.
- ``n`` is the number of clients whose batches form the union the statistics estimate: all
  n_clients, or under partial participation the round's m participants (the engine then hands
  the rules their m rows alone: fednorm.fl.round).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Combine = Callable[[Tensor], Tensor]  # the server's rule: (n, C) client rows -> (C,)


def mean_rows(x: Tensor) -> Tensor:
    """The plain average over clients, the server's rule unless a robust one is configured."""
    return x.mean(0)


@dataclass(frozen=True)
class Stats:
    """A mean and a variance per channel: (C,) shared, or (g, C) one row per client."""

    mean: Tensor
    var: Tensor


def ema(running: Stats, new_mean: Tensor, new_var: Tensor, beta: float) -> Stats:
    """run <- (1 - beta) * run + beta * new, for both statistics, computed as run + beta *
    (new - run) (one lerp each: the same value up to rounding, fewer operators)."""
    return Stats(torch.lerp(running.mean, new_mean, beta), torch.lerp(running.var, new_var, beta))


def union(batch: Stats) -> Stats:
    """Mean and biased variance of the union of the clients' batches (equal sizes K).

    Law of total variance: Var(union) = mean_i var_i + mean_i (mean_i - mean)^2.
    (What `central` reports; it normalizes with F.batch_norm on the union batch itself.)
    """
    mean = batch.mean.mean(0)
    var = batch.var.mean(0) + ((batch.mean - mean) ** 2).mean(0)
    return Stats(mean, var)


def mean_over_clients(reports: Stats, combine: Combine = mean_rows) -> Stats:
    """Each statistic combined over the clients' rows (averaged, by default)."""
    return Stats(combine(reports.mean), combine(reports.var))


class StatRule:
    """Base: a client normalizes with its batch; the server averages what clients report."""

    name = "batch"
    normalize_with = "batch"  # "batch" | "union" | "running" | "mixture"
    sends = True  # whether clients send statistics (what Byzantine clients can attack)
    # False: a client's running statistics follow its reports step by step within a round;
    # True: they stay the round's global ones while it trains, and what it reports comes from a
    # separate forward of the downloaded global model at the round's start (Hybrid BN,
    # Algorithm 1: its round-start hook)
    reports_at_round_start = False
    # True: a client reports the statistics it normalized with (Hybrid BN's mixture of the
    # global and the batch statistics), not its batch's own (fednorm.norms.layer)
    reports_mixture = False

    def report(self, batch: Stats, running: Stats, K: int, n: int, beta: float) -> Stats:
        # Algorithm 1, lines 4-5: unbiased local variance K/(K-1).
        return ema(running, batch.mean, batch.var * (K / (K - 1)), beta)

    def aggregate(self, reports: Stats, K: int, n: int, beta: float,
                  combine: Combine = mean_rows) -> Stats:
        return mean_over_clients(reports, combine)


class BatchStats(StatRule):
    """Naive BatchNorm (FBN paper §3): local batch statistics; the server averages the running
    means and running variances, which underestimates the variance of the union by the spread
    of the client means (law of total variance)."""

    name = "bn"


class UnionStats(StatRule):
    """Centralized BatchNorm: statistics of the union of all clients' batches (the reference).

    Every client normalizes with, and reports, the same union statistics, so the server's
    average is exactly the running statistics of nn.BatchNorm2d on the union batch.
    """

    name = "central"
    normalize_with = "union"

    def report(self, batch: Stats, running: Stats, K: int, n: int, beta: float) -> Stats:
        g = batch.mean.shape[0]
        u = union(batch)
        new = ema(running, u.mean, u.var * (K * g / (K * g - 1)), beta)
        return Stats(new.mean.expand_as(batch.mean), new.var.expand_as(batch.var))


class FederatedStats(StatRule):
    """FBN, the FBN paper's Algorithm 2.

    Line 3: normalize with the previous *shared* running statistics (constants, no gradient).
    Lines 5-6: each client moves the shared statistics towards its batch, with the variance
    unbiased as for the union batch: Kn/(Kn-1).
    Lines 9-10: the server averages and adds the spread of the client running means,
        var = mean_i var_i + Kn/((Kn-1) beta) * mean_i (mean_i - mean)^2,
    which makes the shared statistics equal to BatchNorm's on the union batch (Appendix A).
    """

    name = "fbn"
    normalize_with = "running"

    def report(self, batch: Stats, running: Stats, K: int, n: int, beta: float) -> Stats:
        return ema(running, batch.mean, batch.var * (K * n / (K * n - 1)), beta)

    def aggregate(self, reports: Stats, K: int, n: int, beta: float,
                  combine: Combine = mean_rows) -> Stats:
        """Line 10 with the server's rule ``combine`` in place of every average:

            mean = A(mean_i),   var = A(var_i) + Kn/((Kn-1) beta) * A((mean_i - mean)^2).

        With A the plain mean this is Algorithm 2 exactly. With a robust A (median, trimmed
        mean, after NNM or not) the spread of the client means is measured around the *robust*
        mean and aggregated with the same robust rule, so f Byzantine rows can neither move the
        centre the spread is measured from nor inflate the spread itself (a plain average of
        squared deviations would let one client's 1e6 through).
        """
        agg = mean_over_clients(reports, combine)
        spread = combine((reports.mean - agg.mean) ** 2)
        return Stats(agg.mean, agg.var + K * n / ((K * n - 1) * beta) * spread)


class FrozenStats(StatRule):
    """FixBN's calibration stage: normalize with the frozen aggregated statistics, in training
    and at test; nothing is updated any more."""

    name = "frozen"
    normalize_with = "running"
    sends = False  # frozen: nothing is communicated, so nothing can be attacked

    def report(self, batch: Stats, running: Stats, K: int, n: int, beta: float) -> Stats:
        return Stats(running.mean.expand_as(batch.mean), running.var.expand_as(batch.var))

    def aggregate(self, reports: Stats, K: int, n: int, beta: float,
                  combine: Combine = mean_rows) -> Stats:
        # Every row is the frozen statistic; averaging n float32 copies could move it by rounding.
        return Stats(reports.mean[0], reports.var[0])
