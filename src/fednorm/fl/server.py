"""The server's side of a round, as functions of the reports, the clients' tensors and the
global state: statistics aggregated by the normalizer's rule (through each run's own server:
attack and robust combine, fednorm.robust), parameters averaged (plain or weighted by the
clients' images) or, with ``attack_updates``, the clients' updates combined by the robust rule,
and the clients' momenta between rounds (``client_momentum``).

Client momentum between rounds (the FixBN paper, §7 and Fig. 5), for both paths:
- ``local`` (the paper's "maintained local momentum"): each client keeps its own.
- ``reset`` (standard FedAvg, the paper's default): every round starts from zero momentum on
  every client, as a fresh ``torch.optim.SGD`` per client and round would; with E = 1 and one
  buffer per run (DSGD), SGD without momentum.
- ``global`` (the paper's "maintained global momentum"): at the end of a round every client
  starts the next round from the plain mean of the clients' momenta (the parameters' average
  is plain too, so the two stay consistent; exact for equal parts). With E = 1 ``global`` and
  ``local`` give the same parameters: the update uses only the mean of the momenta.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from fednorm.fl.buffers import Views
from fednorm.fl.step import Reports, over_runs
from fednorm.norms import FedBatchNorm2d, StatRule, Stats
from fednorm.robust import Server

HONEST = Server()  # no attack, plain mean


def aggregate_reports(reports: Reports, K: dict[str, int], rule: StatRule, n: int,
                      beta: float, server: Server = HONEST) -> Reports:
    """One run: each layer's (n, C) client reports -> its new (C,) running statistics. The
    server receives ``server.receive(reports)`` (the Byzantine rows replaced by the attack)
    when the rule has clients send statistics, and combines with ``server.combine``."""
    out = {}
    for key, (mean, var) in reports.items():
        received = Stats(mean, var)
        if rule.sends:
            received = server.receive(received)
        agg = rule.aggregate(received, K[key], n, beta, server.combine)
        out[key] = (agg.mean, agg.var)
    return out


@torch.no_grad()
def commit_stats(
    layers: list[FedBatchNorm2d], reports: dict[str, Stats], rule: StatRule, n: int, beta: float,
    server: Server = HONEST,
) -> None:
    """:func:`aggregate_reports` of one model's layers, written into their running statistics."""
    new = aggregate_reports({la.key: (reports[la.key].mean, reports[la.key].var) for la in layers},
                            {la.key: la.elements_per_client for la in layers}, rule, n, beta,
                            server)
    for layer in layers:
        layer.running_mean.copy_(new[layer.key][0])
        layer.running_var.copy_(new[layer.key][1])


@torch.no_grad()
def commit(stats: dict[str, Tensor], reports: Reports, K: dict[str, int], rule: StatRule,
           beta: float, rows: int, servers: Sequence[Server], server_of: Tensor,
           views: Views) -> None:
    """Every run's server aggregates its clients' (R, ``rows``, C) ``reports`` into its
    running ``stats`` (R, C); ``server_of`` (R,): each run's index into ``servers`` (every
    distinct server aggregates every run's reports, each run keeps its own's: reports are
    small)."""
    runs = server_of.shape[0]

    def aggregate(rep: Reports, which: Tensor) -> Reports:
        out = aggregate_reports(rep, K, rule, rows, beta, servers[0])
        for i, server in enumerate(servers[1:], start=1):
            other = aggregate_reports(rep, K, rule, rows, beta, server)
            out = tree_map(lambda a, b, i=i: torch.where(which == i, b, a), out, other)
        return out

    if runs == 1:  # the run's own reports (views made once)
        one = {key: tuple(views.view("one run", f"{key}.{i}", t, lambda u: u.squeeze(0))
                          for i, t in enumerate(pair)) for key, pair in reports.items()}
        new = aggregate(one, server_of[0])
    else:
        new = over_runs(aggregate, runs)(reports, server_of)
    # one foreach copy into the statistics, (C,) broadcast over a single run's (1, C); a rule
    # that keeps them (frozen statistics) hands back their own memory: left as is
    pairs = [(stats[f"{key}.running_{s}"], t)
             for key in new for s, t in zip(("mean", "var"), new[key], strict=True)]
    pairs = [(dst, src) for dst, src in pairs if dst.data_ptr() != src.data_ptr()]
    if pairs:
        torch._foreach_copy_([dst for dst, _ in pairs], [src for _, src in pairs])


@torch.no_grad()
def average_params(glob: dict[str, Tensor], clients: dict[str, Tensor], trained: set[str],
                   weights: Tensor | None) -> None:
    """The server's new parameters ``glob`` (R, ...) from the clients' (R, n, ...): their
    plain mean, or their sum with ``weights`` (R, n); those not ``trained`` this round keep
    their global value exactly. Written into the global tensors (out=), no copy."""
    for k, p in clients.items():
        if k in trained:
            if weights is None:
                torch.mean(p, 1, out=glob[k])
            else:
                torch.sum(p * weights.view(*weights.shape, *[1] * (p.dim() - 2)), 1,
                          out=glob[k])


def combine_updates(server: Server, names: list[str], n: int, clients: dict[str, Tensor],
                    start: dict[str, Tensor]) -> dict[str, Tensor]:
    """One run: theta <- theta + A(Delta), with the clients' updates Delta_i = theta_i - theta
    as one (n, d) matrix, the last f rows replaced by the attack, combined by the server's
    rule A (the mean of Delta_i is exactly the plain average of the theta_i)."""
    deltas = torch.cat([(clients[k] - start[k]).reshape(n, -1) for k in names], dim=1)
    delta = server.combine(server.receive_rows(deltas))
    sizes = [start[k].numel() for k in names]
    return {k: start[k] + part.view_as(start[k])
            for k, part in zip(names, delta.split(sizes), strict=True)}


def client_weights(sizes: Tensor, who: Tensor | None, dtype: torch.dtype) -> Tensor:
    """(R, n or m): each client's share of the round's clients' training images (``sizes``
    (R, n), the participants ``who`` (R, m) when not all)."""
    sizes = (sizes if who is None else sizes.gather(1, who)).to(dtype)
    return sizes / sizes.sum(1, keepdim=True)


def where_runs(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(mask.view(-1, *[1] * (old.dim() - 1)), new, old)


@torch.no_grad()
def reset_momenta(momenta: dict[str, Tensor], mask: Tensor | None) -> None:
    """``client_momentum: reset`` (the runs of ``mask``): every round starts from zero."""
    if mask is not None:
        for m in momenta.values():
            m.copy_(where_runs(mask, torch.zeros_like(m), m))


@torch.no_grad()
def share_momenta(momenta: dict[str, Tensor], mask: Tensor | None,
                  trained: dict[str, Tensor] | None = None) -> None:
    """``client_momentum: global`` (the runs of ``mask``): every client's momentum (R, n, ...)
    replaced by the clients' plain mean; under partial participation, by the mean of the
    participants' momenta ``trained`` (R, m, ...)."""
    if mask is not None:
        for k, m in momenta.items():
            mean = (m if trained is None else trained[k]).mean(1)
            m.copy_(where_runs(mask, mean.unsqueeze(1).expand_as(m), m))
