"""A round's schedule: open → E × the local step → close → serve.

Every path runs all clients of all runs at once; the local step reads nothing back to the host
and dispatches the same operators on the same tensors every time, so on CUDA it may be captured
once as a graph and replayed (fednorm.fl.graphed).

- :class:`DSGD` (E = 1, the FBN paper's Algorithm 3): all clients of a run hold the same
  weights, so one forward/backward over its n*b stacked batch gives the mean of the clients'
  gradients; the normalization layers see the client dimension and compute per-client
  statistics. With mean aggregation only the mean of the clients' momenta matters (the update
  is linear), so one buffer per run holds exactly that mean.
- :class:`FedAvg` (E >= 1 local steps): clients hold different weights between aggregations.
  Parameters, statistics and momenta get a client dimension after the run dimension, and a
  local step of all clients of all runs is one vmap over the (run, client) lanes of ``grad``.
  At the end of a round the server averages parameters (or, with ``attack_updates``, combines
  the clients' updates with its robust rule) and aggregates BN statistics with the method's
  rule (fednorm.fl.server). With ``client_momentum: local`` and E = 1 it computes exactly what
  DSGD does. A method's statistics with E > 1: every client normalizes with its own copy of
  the round's shared statistics and moves it towards each of its batches; the server's rule
  takes the effective momentum of E steps, beta_E = 1 - (1 - beta)^E.
- :class:`StackedClients`: layers that take client-stacked weights
  (``Normalizer.stacked_weights``), so
  that a BN layer's statistics may reduce across the clients inside the forward pass: one
  forward per run of the n clients' stacked batches, each client through its own weights.

Partial participation (``participation`` < 1; the FixBN paper, Fig. I): each round run r draws
m of its n clients (fednorm.fl.participation: the same clients alone or in a bundle). Only the
(R, m) participants compute: their parameters and statistics start from the global ones as
(R, m, ...), their momenta are gathered from the (R, n, ...) buffers and scattered back at the
round's end (an idle client's own momentum stays as it was), the sampler draws their batches
alone, and the server's averages are the plain means over the m rows (n = m in the rules'
Kn/(Kn-1)). So a step costs the work and memory of m clients, not n.

The method enters through its hooks (fednorm.norms.hooks): statistics reported at a round's
start (the round's steps then commit none), and a gradient transform inside the local step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from fednorm import rng
from fednorm.fl.buffers import per_client, row_index
from fednorm.fl.server import average_params, client_weights, combine_updates
from fednorm.fl.step import over_clients, over_runs
from fednorm.fl.trainer import Trainer
from fednorm.norms import Pending, StatRule


@dataclass(frozen=True)
class Round:
    """What a round decides on the host, once, before its first step: what chooses its steps'
    operators."""

    first: int  # the round's first step
    rule: StatRule | None  # the method's rule for the whole round
    who: Tensor | None  # (R, m): the participants; None: every client
    n: int  # the clients that compute (n, or m)
    names: tuple[str, ...]  # the parameters the optimizer steps (a method may freeze some)
    start: Pending | None = None  # statistics reported at the round's start (the steps commit
    # none then)


class Rounds(Trainer):
    """What every schedule shares: the fused step over all clients' stacked batches."""

    def _fused_step(self, step: Callable, params: dict[str, Tensor], t: int, rnd: Round
                    ) -> Tensor:
        """Step ``t`` of round ``rnd`` of all clients of every run in one forward over their
        stacked batches (``step``: DSGD's gradient at the global weights, the stacked clients'
        at each client's own), normalized by the round's rule with the global statistics, which
        the server then commits at once (unless the clients reported at the round's start);
        ``params`` (the global ones or the clients') are stepped in place. Returns the (R,)
        loss."""
        x, y = self.batches.sample(self._drawn_at(t))
        grads, (loss, reports, batches) = step(params, self.state.stats, x, y,
                                               rng.fold(self.dropout_keys, self.clock))
        if self.dynamics is not None:
            self.dynamics.observe_step(self.state.dynamics, batches, self.state.stats)
        self._optimize(list(rnd.names), params, grads)
        if self.layers and rnd.start is None:
            with self._observed_round():
                self._commit(reports, rnd.rule, self.cfg.bn_momentum)
        self.clock.add_(1)
        return loss

    def _average_params(self, params: dict[str, Tensor], trained: set[str],
                        who: Tensor | None = None) -> None:
        """The server's new parameters from the clients' (R, n or m, ...): their average
        (``weighted_average``: weighted by the clients' images) or, with ``attack_updates``,
        the robust rule on their updates; those not ``trained`` keep their global value."""
        if self.cfg.attack_updates:
            combine = over_runs(lambda c, s: combine_updates(self.server, self.names, self.n,
                                                             c, s), self.runs)
            with torch.no_grad():
                for k, p in combine(params, self.state.params).items():
                    if k in trained:
                        self.state.params[k].copy_(p)
            return
        weights = (client_weights(self.batches.sizes, who, self.lrs.dtype)
                   if self.cfg.weighted_average else None)
        average_params(self.state.params, params, trained, weights)


class DSGD(Rounds):
    """One communication per step; gradients (momenta) averaged by the server."""

    def round(self, first_step: int) -> Tensor:
        self._start_clock(first_step)
        self.start_round()
        rule = self.normalizer.rule_at(first_step)
        start = self.hooks.round_start(self.tools, rule, self._drawn_at(first_step), {})
        step = self.gradient_step(("union", rule), lambda: over_runs(
            self.grad_fn(rule, self.n), self.runs))
        names = self.trainable(first_step)
        rnd = Round(first_step, rule, None, self.n, tuple(names), start)
        loss = self._stepped(
            ("fused", id(step), rnd.names, start is None),
            [*self.state.params.values(), *self.state.stats.values(),
             *self.state.momenta.values()],
            lambda: self._fused_step(step, self.state.params, first_step, rnd))
        if start is not None:
            self._commit_pending(start, rule)
        self.end_round()
        return loss


class FedAvg(Rounds):
    """E local steps per round on stacked per-client state, then the server's round.

    Personalized BN (``normalizer.local``): the parts each client keeps live in the state's
    ``local``, (R, n, ...) per parameter or statistic; a round starts every client from the
    global state with its own parts in place, and ends with them stored back, never averaged
    (the global copies are left as they were). Parts a client keeps that the server also
    averages (``normalizer.kept``) start from the server's average until the client trains.
    """

    per_client_momenta = True

    def __init__(self, cfgs, models, normalizer, batches) -> None:
        super().__init__(cfgs, models, normalizer, batches)
        self.clients = torch.arange(self.n, device=self.dropout_keys.device)  # dropout streams
        self.parts.create(self.state, self.n)

    @property
    def personalized(self) -> bool:
        """Whether each client is tested with its own parts."""
        return bool(self.parts.tested)

    def _zero_momentum(self, stacked: Tensor) -> Tensor:
        return stacked.new_zeros((stacked.shape[0], self.n, *stacked.shape[1:]))

    def round(self, first_step: int) -> Tensor:
        E, R = self.cfg.local_steps, self.runs
        self._start_clock(first_step)
        rule = self.normalizer.rule_at(first_step)  # one rule for the whole round
        who = self.participants(first_step)  # (R, m), or None: every client takes part
        n = self.n if who is None else who.shape[1]  # the clients that compute
        # open: the clients' buffers from the global state, each with its own parts
        params, stats = self.views.round_buffers(self.state, n)
        for k, own in self.own_parts(who).items():
            (params if k in params else stats)[k].copy_(own)
        start = self.hooks.round_start(self.tools, rule, self._drawn_at(first_step),
                                       {k: params[k] for k in self.parts.averaged})
        step = self.gradient_step(("clients", rule, n), lambda: over_clients(
            self.grad_fn(rule, 1, union_clients=n)))
        names = self.trainable(first_step)  # a method's frozen parameters left out
        rnd = Round(first_step, rule, who, n, tuple(names), start)
        self.start_round()
        every = self.state.momenta
        if who is not None:  # the participants' momenta step; the idle clients' stay
            self.state.momenta = self.views.picked_momenta(self.state, who)
        total = torch.zeros(R, device=self.dropout_keys.device, dtype=self.lrs.dtype)
        buffers = [*params.values(), *stats.values(), *self.state.momenta.values()]
        self._step_views(params, stats, n)
        self._client_keys(who)
        for e in range(E):  # E x the local step
            total = total + self._stepped(
                ("local", id(step), rnd.names, start is not None), buffers,
                lambda e=e: self._local_step(step, params, stats, first_step + e, rnd))
        trained = self._close(params, stats, every, who)
        # serve: the parts the clients keep to themselves are never averaged; kept ones are
        self._aggregate(params, stats, rule, set(names) - self.parts.never_averaged,
                        start, clients=n, who=who)
        matrix = self.hooks.aggregation_matrix(self.tools, who)  # each client's own mix
        if matrix is not None:
            self.parts.serve(self.state, matrix, params, who)
        self.end_round(trained if who is not None else None)
        return total

    def _close(self, params: dict[str, Tensor], stats: dict[str, Tensor],
               every: dict[str, Tensor], who: Tensor | None) -> dict[str, Tensor]:
        """The round's end on the clients: the participants' momenta scattered back into
        ``every`` client's, each client's own parts stored (idle ones' as they were), the
        clients that trained marked. Returns the momenta that trained."""
        trained = self.state.momenta
        if who is not None:
            for k, m in every.items():
                m.scatter_(1, row_index(who, m), trained[k])
            self.state.momenta = every
        self.parts.save(self.state, {**params, **stats}, who)
        return trained

    def _local_step(self, step: Callable, params: dict[str, Tensor], stats: dict[str, Tensor],
                    t: int, rnd: Round) -> Tensor:
        """Local step ``t`` of round ``rnd`` of every computing client of every run, each on
        its own batch with its own weights (``step``: vmap over the (run, client) lanes of the
        gradient); updates the clients' ``params`` and running ``stats`` (R, n, ...) in place
        (when they reported at the round's start, the statistics stay the round's and the
        reports are dropped); returns the (R,) mean loss of the clients. The state goes in as
        views made once, the new statistics are copied into the buffers (never rebound): every
        step dispatches the same operators on the same tensors."""
        R, b, n = self.runs, self.cfg.batch_size, rnd.n
        x, y = self.batches.sample(self._drawn_at(t))
        flat_params, flat_stats, momenta, reported = self._step_views(params, stats, n)
        grads, (losses, reports, batches) = step(
            flat_params, flat_stats, x.view(R * n, b, *x.shape[2:]), y.view(R * n, b),
            self._client_keys(rnd.who))
        if self.dynamics is not None:  # each client's (R*n, 1, C) -> (R, n, C)
            self.dynamics.observe_step(self.state.dynamics,
                                       {k: (m.view(R, n, -1), v.view(R, n, -1))
                                        for k, (m, v) in batches.items()}, self.state.stats)
        lr = self._lr()  # (R,) -> each client's (R*n,)
        self._optimize(list(rnd.names), flat_params, grads, momenta,
                       lr.unsqueeze(1).expand(R, n).reshape(R * n))
        self.clock.add_(1)
        if reports and rnd.start is None:  # each client's statistics, (R*n, 1, C), in place
            torch._foreach_copy_([reported[f"{key}.running_{s}"]
                                  for key in reports for s in ("mean", "var")],
                                 [s for key in reports for s in reports[key]])
        return losses.view(R, n).mean(1)

    def _step_views(self, params: dict[str, Tensor], stats: dict[str, Tensor], n: int
                    ) -> tuple[dict[str, Tensor], ...]:
        """The views a local step of ``n`` computing clients reads and writes: parameters,
        statistics and momenta flattened over (run, client), the statistics as the layers
        report them, (R*n, 1, C); made once per buffer, before the round's first step."""
        views = self.views
        return (views.flat("params", params), views.flat("statistics", stats),
                views.flat("momenta", self.state.momenta),
                {k: views.view("reported", k, t, lambda u: u.view(self.runs * n, 1, -1))
                 for k, t in stats.items()})

    def _client_keys(self, who: Tensor | None) -> Tensor:
        """(R*n,) each client's dropout key at the clock's step (its participants' ``who``);
        a model that draws no dropout mask gets a constant (the keys are not read)."""
        if not self.draws_dropout:
            n = self.n if who is None else who.shape[1]
            return self.views.zeros(self.dropout_keys, self.runs * n)
        keys = rng.fold(self.dropout_keys[:, None], self.clock,
                        self.clients if who is None else who)
        return keys.flatten()

    @torch.no_grad()
    def _aggregate(self, params: dict[str, Tensor], stats: dict[str, Tensor],
                   rule: StatRule | None, trained: set[str] | None = None,
                   start: Pending | None = None, clients: int | None = None,
                   who: Tensor | None = None) -> None:
        """The server's round: parameters (those not ``trained`` keep their global value
        exactly), then BN statistics: from the clients' running ``stats``, or those reported
        at the round's ``start``. ``clients``: the rows of ``params`` and ``stats`` when not
        n_clients (the round's m participants ``who``)."""
        n = clients or self.n
        self._average_params(params, set(self.names) if trained is None else trained, who)
        if (not self.layers or not self.hooks.tracks_statistics
                or self.parts.keeps_statistics):
            return  # nothing to aggregate: no running statistics, or the clients keep theirs
        if start is not None:
            self._commit_pending(start, rule)
            return
        reports = {la.key: (stats[f"{la.key}.running_mean"], stats[f"{la.key}.running_var"])
                   for la in self.layers}
        # After E local updates a client's running mean has moved by 1 - (1 - beta)^E towards
        # its batches: the effective momentum the rules divide by (= beta when E = 1).
        beta_eff = 1.0 - (1.0 - self.cfg.bn_momentum) ** self.cfg.local_steps
        with self._observed_round():
            self._commit(reports, rule, beta_eff, n=n)


class StackedClients(FedAvg):
    """Rounds of layers that take client-stacked weights (``Normalizer.stacked_weights``): per
    run, one forward of the n clients' stacked batches (n*b, ...) with client-stacked weights
    (n, *shape); the BN layers reduce over all rows (the union's statistics) and apply each
    client's own affine. The gradient is that of J = sum_i L_i (``loss_scale`` n on the
    union's mean) with respect to the client-stacked weights: client i's gradient is dL_i/dw_i
    through its own activations plus, through the shared statistics, the other clients'
    losses' gradients. The server's running statistics are the union's moving average,
    updated every step.

    The round's leading steps whose rule is its first step's (``Normalizer.rule_at``) are
    fused; when the rule changes within the round, the other steps run each client's own batch
    under that rule (the per-client path), the running statistics averaged at the round's end;
    momenta of ``client_momentum: reset`` runs are zeroed again after the fused steps (a fresh
    optimizer for the rest)."""

    def fused_steps(self, first_step: int) -> int:
        """The leading steps of the round from ``first_step`` under its first step's rule."""
        rule, E = self.normalizer.rule_at(first_step), self.cfg.local_steps
        return next((e for e in range(1, E) if self.normalizer.rule_at(first_step + e)
                     is not rule), E)

    def round(self, first_step: int) -> Tensor:
        E, R = self.cfg.local_steps, self.runs
        self._start_clock(first_step)
        rule = self.normalizer.rule_at(first_step)  # the union's statistics
        params = {k: per_client(p, self.n) for k, p in self.state.params.items()}
        union_step = self.gradient_step(("stacked", rule), lambda: over_runs(
            self.grad_fn(rule, self.n, loss_scale=float(self.n)), R))
        fused = self.fused_steps(first_step)
        names = self.trainable(first_step)
        union = Round(first_step, rule, None, self.n, tuple(names))
        self.start_round()
        total = torch.zeros(R, device=self.dropout_keys.device, dtype=self.lrs.dtype)
        for e in range(fused):
            total = total + self._fused_step(union_step, params, first_step + e, union)
        if fused == E:
            self._average_params(params, set(names))
        else:  # the other steps on each client's own batch, then the per-client server's round
            own_rule = self.normalizer.rule_at(first_step + fused)
            stats = {k: per_client(s, self.n) for k, s in self.state.stats.items()}
            local = self.gradient_step(("clients", own_rule), lambda: over_clients(
                self.grad_fn(own_rule, 1)))
            self.start_round()  # a fresh optimizer after the fused steps
            self._step_views(params, stats, self.n)
            self._client_keys(None)
            own = Round(first_step, own_rule, None, self.n, tuple(names))
            for e in range(fused, E):
                total = total + self._local_step(local, params, stats, first_step + e, own)
            self._aggregate(params, stats, own_rule, set(names))
        self.end_round()
        return total

    def communication_rounds(self, steps: int) -> int:
        """3L per fused step (each BN layer: the clients' means, their variances, then the
        gradients with respect to the union's statistics) plus one model average per round."""
        E = self.cfg.local_steps
        rounds, fused = steps // E, self.fused_steps(0)
        union_steps = rounds * fused + (steps % E if fused == E else 0)
        return 3 * len(self.layers) * union_steps + rounds
