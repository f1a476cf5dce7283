"""The federated engine: clients and runs are tensor dimensions, never Python loops.

A trainer advances a *bundle* of R runs that share the shape of their computation (the same
model, normalizer, local steps, batch and steps; see :func:`fednorm.config.bundle_key`) and
differ in seed, partition, heterogeneity, learning rate, client momentum mode, or the attack and
the server's rule for the statistics (every distinct server of the bundle aggregates every run's
reports, and each run keeps its own server's result: the reports are small). Their state is
stacked with a leading run dimension: parameters (R, *shape), BN running
statistics (R, C), momenta (R, *shape) for DSGD or (R, n, *shape) for FedAvg, all in the trainer's
``state`` (:class:`fednorm.fl.state.BundleState`, with the clients' own parts, the dynamics' sums,
the loss summed so far and the rows). A single run is a bundle of one.

Design: every step is a pure function of one run's state, written once:
``functional_call`` of a template model with the run's parameters and statistics, the
normalization layers reporting per-client statistics into a context (they never mutate their
buffers), the server's aggregation a pure function of the reports. :func:`over_runs` lifts such
a function to the bundle: ``torch.func.vmap`` over the run dimension when R > 1 (conv weights
with a run dimension become one grouped convolution, so a step of all runs is one vectorized
call), and a plain call on the squeezed state when R = 1. The runs are independent lanes of
vmap: no reduction crosses the run dimension, so a run that diverges (NaN) cannot touch the
others; the caller drops it from the bundle at the next evaluation point (:meth:`keep`).

- :class:`DSGD` (E = 1, the FBN paper's Algorithm 3): all clients of a run hold the same
  weights, so one forward/backward over its n*b stacked batch gives the mean of the clients'
  gradients; the normalization layers see the client dimension and compute per-client
  statistics. With mean aggregation only the mean of the clients' momenta matters (the update
  is linear), so one buffer per run holds exactly that mean.
- :class:`FedAvg` (E >= 1 local steps): clients hold different weights between aggregations.
  Parameters, statistics and momenta get a client dimension after the run dimension and one
  local step of all clients of all runs is ``vmap`` (runs) of ``vmap`` (clients) of
  ``grad``. At the end of a round the server averages parameters (or, with ``attack_updates``,
  combines the clients' updates with its robust rule) and aggregates BN statistics with the
  normalizer's rule. With ``client_momentum: local`` client momenta persist across rounds, so
  with E = 1 it computes exactly what DSGD does.
  FBN with E > 1 (the FBN paper has E = 1 only): within a round every client normalizes with
  its own copy of the shared statistics (the round's start), which it moves towards each of
  its batches (Algorithm 2, lines 5-6); the server averages the copies and adds the spread of
  the client means with the effective momentum of E steps, beta_E = 1 - (1 - beta)^E (line 10
  with beta_E for beta; exactly Algorithm 2 at E = 1). Tested against a per-client loop
  (tests/fl/test_engine.py::test_fbn_with_local_steps_equals_per_client_loop).

Client momentum between rounds (``client_momentum``; the FixBN paper, §7 and Fig. 5), decided in
two places for both trainers, :meth:`_Trainer.start_round` and :meth:`_Trainer.end_round`:
- ``local`` (the paper's "maintained local momentum", *): each client keeps its own.
- ``reset`` (standard FedAvg, the paper's default): every round starts from zero momentum on
  every client, as a fresh ``torch.optim.SGD`` per client and round would. For DSGD (E = 1) the
  buffer is zeroed every step: SGD without momentum (with weight decay; under the ``ema``
  convention the step is scaled by 1 - momentum).
- ``global`` (the paper's "maintained global momentum", †): at the end of a round the server
  averages the clients' momenta and every client starts the next round from that average. The
  paper averages with Equation 6's weights |D_m|/|D|, the same as the parameters; our server
  averages parameters (and BN statistics) with the plain mean over clients, i.e. as if every
  client held the same amount of data (exact for iid, gamma and shards splits, whose parts are
  equal; not for Dirichlet parts), and the momenta get the same plain mean, so the two
  averages stay consistent. With E = 1 and a plain mean, ``global`` and ``local`` give the same
  parameters: the next update uses only the mean of the clients' momenta, which averaging does
  not change (the update is linear). DSGD keeps that mean alone, so for it the two are one.

Partial participation (``participation`` < 1; the FixBN paper, Fig. I). Each round run r draws
m of its n clients (:mod:`fednorm.fl.participation`, counter-based: the same clients alone or in
a bundle, on CPU or CUDA; ``bundle_key`` gives every run of a bundle the same m). Only the
round's (R, m) participants compute: their parameters and statistics start from the global
ones as (R, m, ...), their momenta are gathered from the (R, n, ...) buffers and scattered back
at the round's end (an idle client's own momentum, ``local``, stays as it was), the sampler
draws their batches alone (:meth:`fednorm.fl.batches.ClientBatches.for_participants`, the same
rows as the full draw), and the server's averages are the plain means over the m rows, with
n = m in the normalizer's Kn/(Kn-1) factors (FBN: a client reports, and the server spreads,
with the union of the m participants' batches; Hybrid BN pools the m participants'
round-start statistics). So a
step costs the work and memory of m clients, not n: what makes 10 % of ImageNet's 100 clients
fit. ``global`` momenta: every client, idle ones included, starts the next round from the mean
of the participants' momenta; ``reset`` zeroes all; the training loss reported is the
participants' mean. A run with participation < 1 trains on FedAvg's per-client path, also with
E = 1: DSGD's single momentum buffer holds the mean of all clients' momenta, which cannot
represent idle clients that keep their own (``local``). Refused by the config (fednorm.config):
attacks, robust aggregators and NNM (they take all n rows), ``central`` and FedTAN (one union
batch of all clients), personalized BN, the dynamics, and FBN's first-batch calibration.

Training dynamics (``record_dynamics``; the FixBN paper's Fig. 3): when the trainer has a
:class:`fednorm.fl.dynamics.Dynamics` recorder (:meth:`_Trainer.record_dynamics`, called by the
training loop; its sums live in the state), the
normalization layers also report each client's raw mini-batch statistics, which every local
step hands to the recorder with the global statistics of the round's start, and every
aggregation hands it the global statistics before and after. Without one, the layers record
nothing and nothing else runs.

FixBN's variants (``fixbn_fix``, Table H): the normalizer names the parameters frozen at a step
(:meth:`fednorm.norms.Normalizer.frozen_params_at`); they are left out of the optimizer step
and out of the server's average, so they stay bit-identical on every client and globally.

Randomness (batches, augmentation, dropout masks) is counter-based (fednorm.rng): run r's draws
depend on its seed and the step only, so a run gets the same draws alone or in any bundle.

A local step reads nothing back to the host and makes no tensor from a Python number (what a
CUDA graph of it needs): its step is the trainer's ``clock``, a device tensor set once a round
and advanced in place, from which the draws and the learning rate's phase are computed on the
device. What chooses the operators (the rule in force, FixBN's frozen parameters, whether the
participants are drawn) is decided per round on the host, from the round's first step alone
(tests/fl/test_dispatched.py). FedAvg's clients' parameters and statistics are buffers allocated
once per bundle, filled in place each round and stepped in place, with the views a step needs
made once: every local step of a kind dispatches the same operators on the same tensors, so
on CUDA it may be captured once as a graph and replayed (fednorm.fl.graphed; make_trainer's
``cuda_graph``). Operators a local step, by region: docs/speed.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from torch.utils._pytree import tree_map

from fednorm import rng
from fednorm.config import CLIENT_MOMENTA, RunConfig
from fednorm.fl.batches import ClientBatches
from fednorm.fl.dynamics import Dynamics
from fednorm.fl.graphed import Graphed
from fednorm.fl.optim import adaptive_clip, momentum_step
from fednorm.fl.participation import Participants, participation_keys
from fednorm.fl.precision import autocast_step
from fednorm.fl.state import BundleState, empty_history
from fednorm.models.dropout import KeyedDropout
from fednorm.norms import (
    BatchStats,
    FedBatchNorm2d,
    Normalizer,
    NormContext,
    StatRule,
    Stats,
    UnionStats,
    bn_layers,
    norm_context,
)
from fednorm.robust import Server

HONEST = Server()  # no attack, plain mean
Reports = dict[str, tuple[Tensor, Tensor]]  # layer key -> (mean, var), each (n, C): a pytree


def over_runs(fn: Callable, runs: int, in_dims: tuple[int | None, ...] | None = None
              ) -> Callable:
    """``fn`` of one run's tensors, applied to a bundle's: every argument (but those whose
    ``in_dims`` entry is None, shared by all runs) and every result carries a leading run
    dimension. vmap over it for several runs; for one, a plain call without it."""
    if runs > 1:
        return vmap(fn, in_dims=0 if in_dims is None else in_dims)

    def single(*args):
        dims = in_dims or (0,) * len(args)
        out = fn(*(a if d is None else tree_map(lambda t: t.squeeze(0), a)
                   for a, d in zip(args, dims, strict=True)))
        return tree_map(lambda t: t.unsqueeze(0), out)

    return single


def over_clients(fn: Callable) -> Callable:
    """``fn`` of one client's tensors, applied to a bundle's clients flattened over (run,
    client): every argument and result carries a leading R*n dimension (the caller's views of
    its (R, n, ...) buffers, :meth:`_Trainer._flat`). One vmap over the R*n clients, not a vmap
    over runs of a vmap over clients: the clients of all runs are independent lanes alike, and
    one level of batching rules dispatches far fewer operators (docs/speed.md)."""
    return vmap(fn)


def aggregate_reports(reports: Reports, K: dict[str, int], rule: StatRule, n: int,
                      beta: float, server: Server = HONEST) -> Reports:
    """Server side, one run: each layer's (n, C) client reports -> its new (C,) running
    statistics. The server receives ``server.receive(reports)`` (the Byzantine rows replaced by
    the attack) when the rule has clients send statistics, and combines with ``server.combine``.
    """
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


def _stack(tensors: list[Tensor]) -> Tensor:
    # One run: a view of the model's own tensor, so the model sees every in-place update.
    return tensors[0].detach().unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


class _Trainer:
    per_client_momenta = False  # momenta (R, *shape); True: (R, n, *shape)
    # torch.compile's arguments for the gradient steps (:meth:`gradient_step`): None runs
    # them eagerly; {} compiles each once with inductor, {"mode": "reduce-overhead"} replays
    # it as CUDA graphs, {"backend": ...} picks another backend
    compile: dict[str, Any] | None = None
    # execution.precision's autocast dtype for the gradient steps (fednorm.fl.precision): None
    # runs them in the state's dtype; the state, the optimizer and aggregation stay in it
    autocast: torch.dtype | None = None

    def __init__(self, cfgs: Sequence[RunConfig], models: Sequence[nn.Module],
                 normalizer: Normalizer, batches: ClientBatches) -> None:
        self.cfg, self.cfgs, self.models = cfgs[0], list(cfgs), list(models)
        self.normalizer, self.batches = normalizer, batches
        self.n = self.cfg.n_clients
        self.model = models[0]  # the template that functional_call runs
        self.layers = bn_layers(self.model)
        self.names = [name for name, _ in self.model.named_parameters()]
        # what adaptive gradient clipping needs: each parameter's unit (all dimensions but its
        # first) and the classifier's parameters (the last nn.Linear, by type), never clipped
        # (a vector, a bias or a gain, is one unit, as in Brock et al.'s code; or each element)
        self.unit_dims = {name: max(p.dim() - 1, int(normalizer.agc_vector))
                          for name, p in self.model.named_parameters()}
        linears = [m for m in self.model.modules() if isinstance(m, nn.Linear)]
        self.classifier = ({f"{name}.{p}" for name, m in self.model.named_modules()
                            if m is linears[-1] for p, _ in m.named_parameters(recurse=False)}
                           if linears else set())
        self.stat_names = [f"{la.key}.{s}" for la in self.layers
                           for s in ("running_mean", "running_var")]
        params = [dict(m.named_parameters()) for m in models]
        buffers = [dict(m.named_buffers()) for m in models]
        stacked = {k: _stack([p[k] for p in params]) for k in self.names}
        first = stacked[self.names[0]]
        # the bundle's whole training state (fednorm.fl.state); with one run, the parameters
        # and statistics are views of its model's own tensors
        self.state = BundleState(
            runs=[c.identity() for c in cfgs], params=stacked,
            stats={k: _stack([b[k] for b in buffers]) for k in self.stat_names},
            momenta={k: self._zero_momentum(p) for k, p in stacked.items()},
            loss_sum=first.new_zeros(len(cfgs)),
            history=[empty_history() for _ in cfgs])
        # Per-run learning rates, lr x lr_scale (the milestones are shared), (R, len(lr)), in the
        # parameters' dtype so that a float64 run is not stepped with float32-rounded rates.
        self.lrs = torch.tensor([[v * c.lr_scale for v in c.lr] for c in cfgs],
                                device=first.device, dtype=first.dtype)
        # The local step's number on the device (int64, 0-dim): the batches, augmentation and
        # dropout draws and the learning rate's phase are computed from it there, and it is
        # advanced in place, so no number that changes between steps leaves or enters the
        # host inside a local step (docs/speed.md: a CUDA graph of the local step). Set once a round
        # (:meth:`_start_clock`), a write that reads nothing back.
        self.clock = torch.zeros((), dtype=torch.int64, device=first.device)
        self.milestones = torch.tensor(self.cfg.lr_milestones, dtype=torch.int64,
                                       device=first.device)
        self.dropout_keys = rng.fold(rng.run_key(torch.tensor([c.seed for c in cfgs]),
                                                 first.device),
                                     rng.DROPOUT)
        # The runs' servers (attack and aggregation rule) may differ (fednorm.config.bundle_key):
        # each distinct one runs on every run's reports and each run keeps its own result
        # (cheap: a layer's reports are (n, C)).
        servers = [Server.from_config(c) for c in cfgs]
        self.servers = list(dict.fromkeys(servers))
        self.server = self.servers[0]  # attack_updates: one server per bundle
        self.server_of = torch.tensor([self.servers.index(x) for x in servers],
                                      device=first.device)
        # Each run's client_momentum as an index into CLIENT_MOMENTA: the per-run masks of
        # start_round / end_round come from it on the device, with no host copy per round.
        self.momentum_mode = torch.tensor([CLIENT_MOMENTA.index(c.client_momentum)
                                           for c in cfgs], device=first.device)
        # Partial participation (bundle_key: every run of a bundle draws the same m clients a
        # round, or all n): the sampler draws the participants' batches alone.
        self.partial = self.cfg.participation < 1
        if self.partial and not self.per_client_momenta:
            raise ValueError("participation < 1 trains on FedAvg's per-client path "
                             "(make_trainer picks it)")
        if self.partial:
            self.batches = batches.for_participants(Participants(
                participation_keys([c.seed for c in cfgs], first.device), self.n,
                self.cfg.participants, self.cfg.local_steps))
        self.dynamics: Dynamics | None = None  # the training dynamics' recorder, when requested
        self.kept: set[str] = set()  # own parts the server also averages (FedAvg sets them)
        # Hybrid BN: the images of each client's round-start forward of the global model, drawn
        # apart from the training batches (its own stream; the same participants)
        start = self.normalizer.round_start
        self.stat_batches = (self.batches.resized(start.images, rng.STATISTICS)
                             if start is not None else None)
        self._steps: dict[tuple, Callable] = {}  # gradient_step's, built once per key
        # views of the state's tensors made once, not per step (:meth:`_view`)
        self._views: dict[tuple, tuple[Tensor, Tensor]] = {}
        # the local steps through a CUDA graph or eagerly (make_trainer's cuda_graph)
        self.graphed = Graphed("off")
        # whether a forward draws dropout masks (else the step's keys are a constant)
        self.draws_dropout = any(isinstance(m, KeyedDropout) for m in self.model.modules())

    def gradient_step(self, key: tuple, build: Callable[[], Callable]) -> Callable:
        """The gradient step that ``build`` makes (a function of tensors alone), built once
        for ``key`` (what it closes over that can change between rounds: the rule, the
        clients that compute) and then the same function object every round, so that
        torch.compile, when ``compile`` asks for it, traces it once and replays it."""
        # over_runs differs for one run; a recorder adds the batches' statistics
        key = (*key, self.runs, self.dynamics is not None)
        step = self._steps.get(key)
        if step is None:
            step = build()
            if self.autocast is not None:
                step = autocast_step(step, self.clock.device.type, self.autocast)
            if self.compile is not None:  # one graph or an error; static shapes (a
                # second bundle's shapes would otherwise make the functorch wrappers that
                # every step shares dynamic, which vmap's convolution cannot take)
                step = torch.compile(step, fullgraph=True, dynamic=False, **self.compile)
            self._steps[key] = step
        return step

    @property
    def runs(self) -> int:
        return len(self.cfgs)

    def _view(self, role: str, key: str, t: Tensor, make: Callable[[Tensor], Tensor]) -> Tensor:
        """``make(t)``, a view of ``t``, made once while ``t`` is the same tensor (the round's
        static buffers, the state's tensors): a local step then dispatches no operator to
        reshape its state (docs/speed.md)."""
        held = self._views.get((role, key))
        if held is None or held[0] is not t:
            held = self._views[(role, key)] = (t, make(t))
        return held[1]

    def _stepped(self, kind: tuple, buffers: list[Tensor], step: Callable[[], Tensor]
                 ) -> Tensor:
        """``step()``, a local step, through the trainer's CUDA-graph wrapper
        (fednorm.fl.graphed), keyed by what decides its operators (``kind``) and the
        addresses of the static ``buffers`` it steps; eagerly where no graph may hold it: a
        dynamics recorder (its clones), batches decoded on the host (a Python step)."""
        if not self.graphed.enabled or self.dynamics is not None or not self.batches.on_device:
            return step()
        return self.graphed((*kind, tuple(t.data_ptr() for t in buffers)), step)

    def _flat(self, role: str, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        """(R, n, ...) -> (R*n, ...) views, made once per tensor (:meth:`_view`)."""
        return {k: self._view(role, k, t, lambda u: u.view(-1, *u.shape[2:]))
                for k, t in tensors.items()}

    def _start_clock(self, first_step: int) -> None:
        """The round from ``first_step`` starts: the device's step counter set to it (per
        round, outside the local steps, which advance it themselves)."""
        self.clock.fill_(first_step)

    def _drawn_at(self, t: int) -> int | Tensor:
        """What the sampler takes as step ``t``: the device clock for batches drawn on the
        device; the host's number for images decoded on the host (fednorm.fl.streamed),
        whose workers read ahead by step number."""
        return self.clock if self.batches.on_device else t

    def _lr(self) -> Tensor:
        """(R,) each run's learning rate at the clock's step: its phase is the milestones
        passed, counted on the device."""
        if self.lrs.shape[1] == 1:
            return self.lrs[:, 0]
        phase = (self.clock >= self.milestones).sum().view(1)
        return self.lrs.index_select(1, phase).squeeze(1)

    def _zero_momentum(self, stacked: Tensor) -> Tensor:
        return torch.zeros_like(stacked)

    def keep(self, runs: Tensor) -> None:
        """Continue with the runs ``runs`` (indices into the bundle) alone: their state
        (:meth:`BundleState.select`) and what their configs give (samplers, learning rates,
        keys, servers). The kept runs' arithmetic and random draws are unchanged."""
        idx = runs.tolist()
        self.cfgs = [self.cfgs[i] for i in idx]
        self.models = [self.models[i] for i in idx]
        self.state = self.state.select(runs)
        self.batches = self.batches.select(runs)
        if self.stat_batches is not None:
            self.stat_batches = self.stat_batches.select(runs)
        self.lrs, self.dropout_keys = self.lrs[runs], self.dropout_keys[runs]
        self.graphed.reset()  # captured on the dropped runs' buffers
        self._views.clear()  # views and buffers of R runs (a constant key's R·n zeros among them)
        self.server_of, self.momentum_mode = self.server_of[runs], self.momentum_mode[runs]

    def record_dynamics(self, window: int) -> None:
        """Record the training dynamics (fednorm.fl.dynamics) of every BN layer from now on,
        their sums kept in the state."""
        self.dynamics = Dynamics([la.key for la in self.layers], window)
        self.state.dynamics = self.dynamics.zeros(self.runs, self.dropout_keys.device)

    def own_parts(self, who: Tensor | None, kept: bool = False) -> dict[str, Tensor]:
        """Each client's own parts (the state's ``local``), (R, n, ...), or those of the
        round's participants ``who`` (R, m); ``kept``: the parts the server also averages
        (``Normalizer.kept``) alone. Such a part is the global value for a client that has not
        trained yet: its first round starts from the server's average, as in Hybrid BN's code
        (a client's ``buffer_w`` is empty until it has trained)."""
        out = {}
        for k, own in self.state.local.items():
            if kept and k not in self.kept:
                continue
            rows = own if who is None else _rows(own, who)
            if k in self.kept:
                joined = self.state.joined["clients"]
                joined = joined if who is None else joined.gather(1, who)
                glob = {**self.state.params, **self.state.stats}[k].unsqueeze(1)
                rows = torch.where(joined.view(*joined.shape, *[1] * (rows.dim() - 2)), rows,
                                   glob)
            out[k] = rows.clone()
        return out

    def participants(self, first_step: int) -> Tensor | None:
        """(R, m) clients taking part in the round from ``first_step``, in increasing order;
        None when every run's participation is full (the code path without participants)."""
        return self.batches.participants.at(first_step) if self.partial else None

    def trainable(self, step: int) -> list[str]:
        """The parameter names the optimizer steps during ``step`` (FixBN's ``fixbn_fix``
        freezes BN's affine parameters from T*: Normalizer.frozen_params_at)."""
        frozen = self.normalizer.frozen_params_at(step, self.model)
        return [k for k in self.names if k not in frozen]

    def write_back(self) -> None:
        """Copy each run's parameters and statistics into its own model."""
        tensors = {**self.state.params, **self.state.stats}
        with torch.no_grad():
            for r, model in enumerate(self.models):
                for k, t in {**dict(model.named_parameters()), **dict(model.named_buffers())
                             }.items():
                    if k in tensors and t.data_ptr() != tensors[k].data_ptr():
                        t.copy_(tensors[k][r])

    def forward_fn(self, rule: StatRule | None, n_groups: int, beta: float,
                   record: bool = False, union_clients: int | None = None) -> Callable:
        """One run's training-mode forward: (params, stats, x, key) -> (log-probs, reports,
        batches); ``union_clients`` replaces n_clients as the n of the rules' Kn/(Kn-1).
        ``batches`` holds each layer's raw mini-batch statistics per client when ``record``,
        else nothing."""
        model, n = self.model, union_clients or self.n

        def forward(params: dict[str, Tensor], stats: dict[str, Tensor], x: Tensor,
                    key: Tensor) -> tuple[Tensor, Reports, Reports]:
            ctx = NormContext(rule, n_groups, n, beta, batches={} if record else None)
            with norm_context(ctx), rng.dropout_key(key):
                out = functional_call(model, {**params, **stats}, (x,))
            batches = {k: (s.mean, s.var) for k, s in (ctx.batches or {}).items()}
            return out, {k: (s.mean, s.var) for k, s in ctx.reports.items()}, batches

        return forward

    def grad_fn(self, rule: StatRule | None, n_groups: int, loss_scale: float = 1.0,
                union_clients: int | None = None) -> Callable:
        """One run's (or client's) gradient: (params, stats, x, y, key) -> (grads, (loss,
        reports, batches)); the loss is the mean over the batch (= the mean of the clients'
        losses), differentiated times ``loss_scale``; ``batches``: see :meth:`forward_fn`
        (recorded when the run has a recorder); ``union_clients``: the n of the rules'
        Kn/(Kn-1) when not n_clients (the round's m participants)."""
        forward = self.forward_fn(rule, n_groups, self.cfg.bn_momentum,
                                  record=self.dynamics is not None, union_clients=union_clients)

        def loss_fn(params, stats, x, y, key):
            out, reports, batches = forward(params, stats, x, key)
            loss = F.nll_loss(out, y)
            return loss * loss_scale, (loss.detach(), reports, batches)

        return grad(loss_fn, has_aux=True)

    def _optimize(self, names: list[str], params: dict[str, Tensor],
                  grads: dict[str, Tensor], momenta: dict[str, Tensor] | None = None,
                  lr: Tensor | None = None) -> None:
        """The optimizer step of the parameters ``names`` (stacked per run, or per run and
        client, or per client flattened over (run, client) with their ``momenta`` and ``lr``
        (R*n,)), after adaptive gradient clipping when the normalizer asks for it (FedWon):
        unit-wise per output unit (the template's first dimension; every run and client
        clipped on its own), the classifier excluded (Brock et al. 2021, §4.1)."""
        lam = self.normalizer.agc
        clipped = {k: adaptive_clip(grads[k], params[k], lam, self.unit_dims[k])
                   if lam is not None and k not in self.classifier else grads[k]
                   for k in names}
        if self.cfg.clip_norm is not None:
            clipped = self._clip_norm(clipped, self.cfg.clip_norm,
                                      lead=1 if momenta is not None else 2)
        momenta = self.state.momenta if momenta is None else momenta
        momentum_step(
            [params[k] for k in names], [clipped[k] for k in names],
            [momenta[k] for k in names], lr=self._lr() if lr is None else lr,
            beta=self.cfg.momentum,
            convention=self.cfg.momentum_convention, weight_decay=self.cfg.weight_decay,
        )

    def _clip_norm(self, grads: dict[str, Tensor], max_norm: float, lead: int = 2
                   ) -> dict[str, Tensor]:
        """Each client's gradient, (R, n, ...) per parameter (a per-client path:
        make_trainer; ``lead`` 1: (R*n, ...)), scaled to at most ``max_norm`` in global L2
        norm over the parameters it steps, as torch.nn.utils.clip_grad_norm_ (its coefficient
        max_norm / (norm + 1e-6), at most 1), after any adaptive clipping; no host
        synchronization (a tensor coefficient)."""
        squares = sum(g.pow(2).flatten(lead).sum(-1) for g in grads.values())
        coef = (max_norm / (squares.sqrt() + 1e-6)).clamp(max=1.0)  # (R, n) or (R*n,)
        return {k: g * coef.view(*coef.shape, *[1] * (g.dim() - lead))
                for k, g in grads.items()}

    @torch.no_grad()
    def _commit(self, reports: Reports, rule: StatRule, beta: float, n: int | None = None,
                K: dict[str, int] | None = None) -> None:
        """Every run's server aggregates its clients' (R, n, C) reports into its statistics;
        ``n``: the rows when not n_clients (the round's m participants); ``K``: each layer's
        values per client and channel when not those of the last forward."""
        if not self.layers:
            return
        K = K or {la.key: la.elements_per_client for la in self.layers}
        rows = n or self.n

        def aggregate(rep: Reports, which: Tensor) -> Reports:
            """One run: its own server's aggregation, which = its index in self.servers."""
            out = aggregate_reports(rep, K, rule, rows, beta, self.servers[0])
            for i, server in enumerate(self.servers[1:], start=1):
                other = aggregate_reports(rep, K, rule, rows, beta, server)
                out = tree_map(lambda a, b, i=i: torch.where(which == i, b, a), out, other)
            return out

        if self.runs == 1:  # the run's own reports (views made once: :meth:`_view`)
            one = {key: tuple(self._view("one run", f"{key}.{i}", t, lambda u: u.squeeze(0))
                              for i, t in enumerate(pair)) for key, pair in reports.items()}
            new = aggregate(one, self.server_of[0])
        else:
            new = over_runs(aggregate, self.runs)(reports, self.server_of)
        # one foreach copy into the statistics, (C,) broadcast over a single run's (1, C);
        # a rule that keeps them (FixBN's frozen ones) hands back their own memory: left as is
        pairs = [(self.state.stats[f"{key}.running_{s}"], t)
                 for key in new for s, t in zip(("mean", "var"), new[key], strict=True)]
        pairs = [(dst, src) for dst, src in pairs if dst.data_ptr() != src.data_ptr()]
        if pairs:
            torch._foreach_copy_([dst for dst, _ in pairs], [src for _, src in pairs])

    @torch.no_grad()
    def start_statistics(self, rule: StatRule, first_step: int | Tensor,
                         beta: float | None = None,
                         own: dict[str, Tensor] | None = None
                         ) -> tuple[Reports, dict[str, int]]:
        """Hybrid BN's reports (Algorithm 1): each client of the round from ``first_step`` (all
        n, or its m participants) runs the downloaded global model in training mode, with no
        gradient, over its own ``round_start.images`` images; (R, n or m, C) per layer,
        moved from the global statistics by ``beta`` (``round_start.momentum`` unless given;
        ``rule.report``). All clients share the weights but their own parts ``own`` (R, n or
        m, ...): each client's own d (``Normalizer.kept``), which the layers take per client.
        So this is one forward over their stacked images, the layers' statistics per client
        from the client dimension. Also returns each layer's K in this forward (S*H*W, for the
        server's N/(N-1))."""
        assert self.stat_batches is not None and self.normalizer.round_start is not None
        x, _ = self.stat_batches.sample(first_step)
        clients = x.shape[1] // self.stat_batches.b
        beta = self.normalizer.round_start.momentum if beta is None else beta
        forward = over_runs(self.forward_fn(rule, clients, beta, union_clients=clients),
                            self.runs)
        _, reports, _ = forward({**self.state.params, **(own or {})}, self.state.stats, x,
                                rng.fold(self.dropout_keys, rng.STATISTICS, first_step))
        return reports, {la.key: la.elements_per_client for la in self.layers}

    def _commit_start_statistics(self, start: tuple[Reports, dict[str, int]], rule: StatRule,
                                 beta: float) -> None:
        """The server's step of Hybrid BN: the clients' round-start reports (with their K)
        pooled and smoothed by ``beta`` (HybridStats; n = the clients that reported)."""
        reports, K = start
        self._commit(reports, rule, beta, n=next(iter(reports.values()))[0].shape[1], K=K)

    @contextlib.contextmanager
    def evaluation_statistics(self, step: int) -> Iterator[None]:
        """Around a test at ``step``: with ``round_start.fresh_eval`` (Hybrid BN's
        fresh evaluation, the authors' code), the global statistics recomputed from
        the current global model as at a round's start (the last round's clients, with their
        own d, and images, beta = 1: unsmoothed), for the test alone; the clients' G is
        restored after it. Otherwise nothing changes."""
        rule = self.normalizer.rule_at(step)
        start = self.normalizer.round_start
        if self.stat_batches is None or start is None or not start.fresh_eval or rule is None:
            yield
            return
        kept = {k: s.clone() for k, s in self.state.stats.items()}
        last = max(step - self.cfg.local_steps, 0)
        # beta 1: the pooled statistics themselves
        own = self.own_parts(self.participants(last), kept=True)
        self._commit_start_statistics(self.start_statistics(rule, last, beta=1.0, own=own),
                                      rule, 1.0)
        try:
            yield
        finally:
            with torch.no_grad():
                for k, s in self.state.stats.items():
                    s.copy_(kept[k])

    @torch.no_grad()
    def calibrate(self) -> None:
        """Set every BN layer's shared statistics to those of one union batch of all clients
        (the ``fbn_init: first_batch`` option: beta = 1, no parameter update); the batch is the
        draw of step -1, before training."""
        x, _ = self.batches.sample(-1)
        forward = over_runs(self.forward_fn(UnionStats(), self.n, 1.0), self.runs)
        _, reports, _ = forward(self.state.params, self.state.stats, x,
                                rng.fold(self.dropout_keys, -1))
        self._commit(reports, UnionStats(), 1.0)

    def round(self, first_step: int) -> Tensor:
        """Train every run for one round from ``first_step``; returns the (R,) summed losses."""
        raise NotImplementedError

    def _fused_step(self, step: Callable, params: dict[str, Tensor], rule: StatRule | None,
                    t: int, names: list[str], commit: bool = True) -> Tensor:
        """Step ``t`` of all clients of every run in one forward over their stacked batches
        (``step``: DSGD's gradient at the global weights, FedTAN's at each client's own),
        normalized by ``rule`` with the global statistics, which the server then commits at
        once (unless not ``commit``: Hybrid BN reports at the round's start); ``params`` (the
        global ones or the clients') are stepped in place. Returns the (R,) loss."""
        x, y = self.batches.sample(self._drawn_at(t))
        grads, (loss, reports, batches) = step(params, self.state.stats, x, y,
                                               rng.fold(self.dropout_keys, self.clock))
        if self.dynamics is not None:
            self.dynamics.observe_step(self.state.dynamics, batches, self.state.stats)
        self._optimize(names, params, grads)
        if self.layers and commit:
            with self._observed_round():
                self._commit(reports, rule, self.cfg.bn_momentum)
        self.clock.add_(1)
        return loss

    def communication_rounds(self, steps: int) -> int:
        """Client-server exchanges in the first ``steps`` local steps: one per round (E = 1:
        one per step), carrying the weights, or the gradients, and the BN statistics."""
        return steps // self.cfg.local_steps

    @contextlib.contextmanager
    def _observed_round(self) -> Iterator[None]:
        """Around the server's aggregation of the statistics: hands the recorder (if any) the
        global statistics before and after it."""
        if self.dynamics is None:
            yield
            return
        before = {k: s.clone() for k, s in self.state.stats.items()}
        yield
        self.dynamics.observe_round(self.state.dynamics, before, self.state.stats)

    def _runs_with(self, mode: str) -> Tensor | None:
        """(R,) mask of the runs whose ``client_momentum`` is ``mode``; None when none is (a
        per-run setting: a bundle may mix them, see fednorm.config.BUNDLE_FREE)."""
        if all(c.client_momentum != mode for c in self.cfgs):
            return None
        return self.momentum_mode == CLIENT_MOMENTA.index(mode)

    @staticmethod
    def _where_runs(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
        return torch.where(mask.view(-1, *[1] * (old.dim() - 1)), new, old)

    @torch.no_grad()
    def start_round(self) -> None:
        """``client_momentum: reset``: every round starts from zero momentum."""
        mask = self._runs_with("reset")
        if mask is not None:
            for m in self.state.momenta.values():
                m.copy_(self._where_runs(mask, torch.zeros_like(m), m))

    @torch.no_grad()
    def end_round(self, trained: dict[str, Tensor] | None = None) -> None:
        """``client_momentum: global``: the server replaces every client's momentum by their
        plain mean (a no-op for DSGD's single buffer, which already is that mean); under
        partial participation, by the mean of the participants' momenta ``trained`` (R, m,
        ...)."""
        mask = self._runs_with("global") if self.per_client_momenta else None
        if mask is not None:
            for k, m in self.state.momenta.items():  # (R, n, ...)
                mean = (m if trained is None else trained[k]).mean(1)
                m.copy_(self._where_runs(mask, mean.unsqueeze(1).expand_as(m), m))


def _row_index(who: Tensor, t: Tensor) -> Tensor:
    """(R, m) clients -> an index of ``t`` (R, n, ...)'s client dimension for gather/scatter."""
    return who.view(*who.shape, *[1] * (t.dim() - 2)).expand(*who.shape, *t.shape[2:])


def _rows(t: Tensor, who: Tensor) -> Tensor:
    """The clients ``who`` (R, m) of ``t`` (R, n, ...): (R, m, ...), a copy."""
    return t.gather(1, _row_index(who, t))


class DSGD(_Trainer):
    """One communication per step; gradients (momenta) averaged by the server."""

    def round(self, first_step: int) -> Tensor:
        self._start_clock(first_step)
        self.start_round()
        rule = self.normalizer.rule_at(first_step)
        start = (self.start_statistics(rule, self._drawn_at(first_step))
                 if rule is not None and rule.reports_at_round_start and self.layers else None)
        step = self.gradient_step(("union", rule), lambda: over_runs(
            self.grad_fn(rule, self.n), self.runs))
        names = self.trainable(first_step)
        loss = self._stepped(
            ("fused", id(step), tuple(names), start is None),
            [*self.state.params.values(), *self.state.stats.values(),
             *self.state.momenta.values()],
            lambda: self._fused_step(step, self.state.params, rule, first_step, names,
                                     commit=start is None))
        if start is not None:
            with self._observed_round():
                self._commit_start_statistics(start, rule, self.normalizer.round_start.momentum)
        self.end_round()
        return loss


class FedAvg(_Trainer):
    """E local steps per round on stacked per-client state, then server averaging.

    Personalized BN (``normalizer.local``: FedBN, SiloBN): the parts each client keeps live in
    the state's ``local`` (fednorm.fl.state.BundleState), (R, n, ...) per parameter or
    statistic; a round starts every client from the global state with its own parts in place,
    and ends with them stored back, never averaged (the global copies of those parameters are
    left as they were). Static BN (``normalizer.static``: HeteroFL) commits no statistics in
    training; :meth:`static_statistics` computes them before each test.
    """

    per_client_momenta = True

    def __init__(self, cfgs, models, normalizer, batches) -> None:
        super().__init__(cfgs, models, normalizer, batches)
        self.clients = torch.arange(self.n, device=self.dropout_keys.device)  # dropout streams
        names = {"affine": [f"{la.key}.{p}" for la in self.layers for p in ("weight", "bias")],
                 "stats": self.stat_names,
                 "mixing": [f"{la.key}.{p}" for la in self.layers for p in la.mixing]}
        self.kept = {k for part in normalizer.kept for k in names[part]}
        everything = {**self.state.params, **self.state.stats}
        self.state.local = {k: self._per_client(everything[k])
                            for part in (*normalizer.local, *normalizer.kept)
                            for k in names[part]}
        if self.kept:
            self.state.joined = {"clients": torch.zeros(self.runs, self.n, dtype=torch.bool,
                                                        device=self.dropout_keys.device)}

    @property
    def personalized(self) -> bool:
        """Whether each client is tested with its own parts (never averaged: FedBN, SiloBN)."""
        return bool(set(self.state.local) - self.kept)

    def _zero_momentum(self, stacked: Tensor) -> Tensor:
        return stacked.new_zeros((stacked.shape[0], self.n, *stacked.shape[1:]))

    def round(self, first_step: int) -> Tensor:
        E, R = self.cfg.local_steps, self.runs
        self._start_clock(first_step)
        rule = self.normalizer.rule_at(first_step)  # one rule for the whole round
        who = self.participants(first_step)  # (R, m), or None: every client takes part
        n = self.n if who is None else who.shape[1]  # the clients that compute

        params, stats = self._round_buffers(n)
        for k, own in self.own_parts(who).items():  # each client's own parts, kept by it
            (params if k in params else stats)[k].copy_(own)
        # Hybrid BN: the reports of the global model (with each client's own d) at the round's
        # start; the clients' statistics stay the round's global ones while they train
        start = (self.start_statistics(rule, self._drawn_at(first_step),
                                       own={k: params[k] for k in self.kept})
                 if rule is not None and rule.reports_at_round_start and self.layers else None)
        step = self.gradient_step(("clients", rule, n), lambda: over_clients(
            self.grad_fn(rule, 1, union_clients=n)))
        names = self.trainable(first_step)  # FixBN's frozen affine parameters left out
        self.start_round()
        every = self.state.momenta
        if who is not None:  # the participants' momenta step; the idle clients' stay
            self.state.momenta = self._picked_momenta(who)
        total = torch.zeros(R, device=self.dropout_keys.device, dtype=self.lrs.dtype)
        buffers = [*params.values(), *stats.values(), *self.state.momenta.values()]
        self._step_views(params, stats, n)
        self._client_keys(who)
        for e in range(E):
            total = total + self._stepped(
                ("local", id(step), tuple(names), start is not None), buffers,
                lambda e=e: self._local_step(step, params, stats, first_step + e, names,
                                             start is not None, who))
        trained = self.state.momenta
        if who is not None:
            for k, m in every.items():
                m.scatter_(1, _row_index(who, m), trained[k])
            self.state.momenta = every
        for k, own in self.state.local.items():  # kept by the clients (idle ones' as they were)
            new = params[k] if k in params else stats[k]
            if who is None:
                own.copy_(new)
            else:
                own.scatter_(1, _row_index(who, own), new)
        if self.kept:  # the round's clients have trained: their own parts are theirs now
            joined = self.state.joined["clients"]
            if who is None:
                joined.fill_(True)
            else:
                joined.scatter_(1, who, True)
        # the parts the clients keep to themselves are never averaged; kept ones are
        self._aggregate(params, stats, rule, set(names) - (set(self.state.local) - self.kept),
                        start, clients=n, who=who)
        self.end_round(trained if who is not None else None)
        return total

    def _local_step(self, step: Callable, params: dict[str, Tensor], stats: dict[str, Tensor],
                    t: int, names: list[str], keep_stats: bool = False,
                    who: Tensor | None = None) -> Tensor:
        """Local step ``t`` of every client of every run, each on its own batch with its own
        weights (``step``: vmap over the clients, flattened over (run, client), of the
        gradient); updates the clients' ``params`` and running ``stats`` (R, n, ...) in place
        (``keep_stats``: the statistics stay the round's, the reports are dropped); returns
        the (R,) mean loss of the clients. ``who`` (R, m): the round's participants, whose
        batches the sampler draws and whose dropout streams they use; the state's client
        dimension then holds them alone. The state goes in as views made once
        (:meth:`_flat`), the new statistics are copied into the buffers (never rebound), so
        that every step dispatches the same operators on the same tensors (a CUDA graph's
        static buffers: fednorm.fl.graphed)."""
        R, b = self.runs, self.cfg.batch_size
        n = self.n if who is None else who.shape[1]
        x, y = self.batches.sample(self._drawn_at(t))
        flat_params, flat_stats, momenta, reported = self._step_views(params, stats, n)
        grads, (losses, reports, batches) = step(
            flat_params, flat_stats, x.view(R * n, b, *x.shape[2:]), y.view(R * n, b),
            self._client_keys(who))
        if self.dynamics is not None:  # each client's (R*n, 1, C) -> (R, n, C)
            self.dynamics.observe_step(self.state.dynamics,
                                       {k: (m.view(R, n, -1), v.view(R, n, -1))
                                        for k, (m, v) in batches.items()}, self.state.stats)
        lr = self._lr()  # (R,) -> each client's (R*n,)
        self._optimize(names, flat_params, grads, momenta,
                       lr.unsqueeze(1).expand(R, n).reshape(R * n))
        self.clock.add_(1)
        if reports and not keep_stats:  # each client's statistics, (R*n, 1, C), in place
            torch._foreach_copy_([reported[f"{key}.running_{s}"]
                                  for key in reports for s in ("mean", "var")],
                                 [s for key in reports for s in reports[key]])
        return losses.view(R, n).mean(1)

    def _step_views(self, params: dict[str, Tensor], stats: dict[str, Tensor], n: int
                    ) -> tuple[dict[str, Tensor], ...]:
        """The views a local step of ``n`` computing clients reads and writes: parameters,
        statistics and momenta flattened over (run, client), the statistics as the layers
        report them, (R*n, 1, C). Made once per buffer (:meth:`_view`); the round makes them
        before its first step, so that every local step dispatches the same operators."""
        return (self._flat("params", params), self._flat("stats", stats),
                self._flat("momenta", self.state.momenta),
                {k: self._view("reported", k, t, lambda u: u.view(self.runs * n, 1, -1))
                 for k, t in stats.items()})

    def _client_keys(self, who: Tensor | None) -> Tensor:
        """(R*n,) each client's dropout key at the clock's step (its participants' ``who``);
        a model that draws no dropout mask gets a constant (the keys are not read)."""
        if not self.draws_dropout:
            n = self.n if who is None else who.shape[1]
            zeros = self._views.get(("keys", str(n)))
            if zeros is None:
                zero = self.dropout_keys.new_zeros(self.runs * n)
                zeros = self._views[("keys", str(n))] = (zero, zero)
            return zeros[1]
        keys = rng.fold(self.dropout_keys[:, None], self.clock,
                        self.clients if who is None else who)
        return keys.flatten()

    def _round_buffers(self, n: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The clients' parameters and statistics of a round of ``n`` computing clients, (R, n,
        ...): buffers allocated once per bundle and ``n``, each client's filled from the
        global state in place (one foreach copy, broadcast over the clients)."""
        key = ("buffers", str(n))
        held = self._views.get(key)
        glob = {**self.state.params, **self.state.stats}
        if held is None or held[0] is not self.state:
            made = {k: t.new_empty((t.shape[0], n, *t.shape[1:])) for k, t in glob.items()}
            held = self._views[key] = (self.state, made)
        buffers = held[1]
        torch._foreach_copy_(list(buffers.values()),
                             [self._view("per_client", k, t, lambda u: u.unsqueeze(1))
                              for k, t in glob.items()])
        params = {k: buffers[k] for k in self.state.params}
        return params, {k: buffers[k] for k in self.state.stats}

    def _picked_momenta(self, who: Tensor) -> dict[str, Tensor]:
        """The participants' ``who`` (R, m) rows of the clients' momenta, (R, m, ...), gathered
        into buffers allocated once per bundle (a round's gathered state stays static)."""
        key = ("picked", str(who.shape[1]))
        held = self._views.get(key)
        if held is None or held[0] is not self.state:
            made = {k: m.new_empty((m.shape[0], who.shape[1], *m.shape[2:]))
                    for k, m in self.state.momenta.items()}
            held = self._views[key] = (self.state, made)
        for k, m in self.state.momenta.items():
            torch.gather(m, 1, _row_index(who, m), out=held[1][k])
        return dict(held[1])

    def _per_client(self, t: Tensor, n: int | None = None) -> Tensor:
        """(R, ...) global state -> (R, n, ...): every client (``n`` of them: the round's
        participants) starts the round from it."""
        return t.unsqueeze(1).expand(t.shape[0], n or self.n, *t.shape[1:]).clone()

    @torch.no_grad()
    def _average_params(self, params: dict[str, Tensor], trained: set[str],
                        who: Tensor | None = None) -> None:
        """The server's new parameters from the clients' (R, n, ...) (the participants' ``who``
        (R, m, ...)): their average (``weighted_average``: weighted by the clients' images,
        |D_i| / sum_j |D_j| over the round's clients) or, with ``attack_updates``, the robust
        rule on their updates; those not ``trained`` this round keep their global value
        exactly."""
        if self.cfg.attack_updates:
            combined = over_runs(self._combine_updates, self.runs)(params, self.state.params)
            for k, p in combined.items():
                if k in trained:
                    self.state.params[k].copy_(p)
            return
        weights = self._client_weights(who) if self.cfg.weighted_average else None
        for k, p in params.items():
            if k in trained:  # written into the global tensor (out=), no copy
                if weights is None:
                    torch.mean(p, 1, out=self.state.params[k])
                else:
                    torch.sum(p * weights.view(*weights.shape, *[1] * (p.dim() - 2)), 1,
                              out=self.state.params[k])

    def _client_weights(self, who: Tensor | None) -> Tensor:
        """(R, n or m): each client's share of the round's clients' training images."""
        sizes = self.batches.sizes if who is None else self.batches.sizes.gather(1, who)
        sizes = sizes.to(self.lrs.dtype)
        return sizes / sizes.sum(1, keepdim=True)

    @torch.no_grad()
    def _aggregate(self, params: dict[str, Tensor], stats: dict[str, Tensor],
                   rule: StatRule | None, trained: set[str] | None = None,
                   start: tuple[Reports, dict[str, int]] | None = None,
                   clients: int | None = None, who: Tensor | None = None) -> None:
        """The server's round: parameters (those not ``trained`` this round keep their global
        value exactly), then BN statistics: from the clients' running ``stats``, or from their
        reports at the round's ``start`` (Hybrid BN: :meth:`start_statistics`). ``clients``:
        the rows of ``params`` and ``stats`` when not n_clients (the round's m participants
        ``who``)."""
        n = clients or self.n
        self._average_params(params, set(self.names) if trained is None else trained, who)
        if not self.layers or self.normalizer.static or "stats" in self.normalizer.local:
            return  # nothing to aggregate: no running statistics, or the clients keep theirs
        if start is not None:
            with self._observed_round():
                self._commit_start_statistics(start, rule, self.normalizer.round_start.momentum)
            return
        reports = {la.key: (stats[f"{la.key}.running_mean"], stats[f"{la.key}.running_var"])
                   for la in self.layers}
        # After E local updates a client's running mean has moved by 1 - (1 - beta)^E towards
        # its batches; FBN's correction divides by that effective momentum (= beta when E = 1).
        beta_eff = 1.0 - (1.0 - self.cfg.bn_momentum) ** self.cfg.local_steps
        with self._observed_round():
            self._commit(reports, rule, beta_eff, n=n)

    @torch.no_grad()
    def static_statistics(self, x: Tensor) -> None:
        """HeteroFL's static BN (its step (4)): every BN layer's statistics of the global model
        over the images ``x`` (N, ...), in batches of ``batch_size`` each normalized with its
        own statistics as in training, averaged over the batches (the cumulative average of
        nn.BatchNorm2d with momentum None), written as every run's running statistics. A
        last incomplete batch is left out; the batches go through in groups, one forward
        each (no Python loop over batches)."""
        b = self.cfg.batch_size
        per_forward = max(1, 4096 // b)
        total: dict[str, list[Tensor]] = {}
        count = 0
        usable = (len(x) // b) * b
        for start in range(0, usable, per_forward * b):
            chunk = x[start: min(usable, start + per_forward * b)]
            groups = len(chunk) // b
            forward = over_runs(self.forward_fn(BatchStats(), groups, 1.0), self.runs,
                                in_dims=(0, 0, None, None))
            _, reports, _ = forward(self.state.params, self.state.stats, chunk,
                                    torch.zeros(2, dtype=torch.int64, device=x.device))
            for key, (mean, var) in reports.items():  # (R, groups, C): each batch's own
                sums = total.setdefault(key, [0, 0])
                sums[0], sums[1] = sums[0] + mean.sum(1), sums[1] + var.sum(1)
            count += groups
        for key, (mean, var) in total.items():
            self.state.stats[f"{key}.running_mean"].copy_(mean / count)
            self.state.stats[f"{key}.running_var"].copy_(var / count)

    def _combine_updates(self, clients: dict[str, Tensor],
                         start: dict[str, Tensor]) -> dict[str, Tensor]:
        """One run: theta <- theta + A(Delta), with the clients' updates Delta_i = theta_i -
        theta as one (n, d) matrix, the last f rows replaced by the attack, combined by the
        server's rule A (the mean of Delta_i is exactly the plain average of the theta_i)."""
        deltas = torch.cat([(clients[k] - start[k]).reshape(self.n, -1) for k in self.names],
                           dim=1)
        delta = self.server.combine(self.server.receive_rows(deltas))
        sizes = [start[k].numel() for k in self.names]
        return {k: start[k] + part.view_as(start[k])
                for k, part in zip(self.names, delta.split(sizes), strict=True)}


class FedTAN(FedAvg):
    """FedTAN (Wang, Shi, Chang 2023, "Why Batch Normalization Damage Federated Learning on
    Non-IID Data?"): FedAvg whose clients normalize, in every local step and every BN layer,
    with the statistics of the union of all clients' current batches, each client through its
    own weights; the gradients with respect to those statistics are aggregated across clients
    in the backward pass (layer-wise aggregation: 3L exchanges per local step for L BN layers,
    plus the round's model average: :meth:`communication_rounds`).

    Design: a BN layer's statistics reduce across clients inside the forward pass, which vmap
    over clients cannot express. So the client dimension is explicit through the layers
    (fednorm.models.clientwise): per run, one forward of the n clients' stacked batches
    (n*b, ...) with client-stacked weights (n, *shape); layers with weights apply client i's to
    client i's rows, the BN layers reduce over all rows and apply each client's own affine.
    Runs stay a vmap (over_runs) around it. The gradient is that of J = sum_i L_i (the clients'
    mean losses; ``loss_scale`` n on the union's mean) with respect to the client-stacked
    weights: client i's gradient is dL_i/dw_i through its own activations plus, through the
    shared statistics, the other clients' losses' gradients: exactly what FedTAN's aggregation
    of the statistics' gradients hands client i. At E = 1 every client holds the global weights
    and the average of these gradients is the gradient of the union batch's mean loss, so
    FedTAN equals centralized BN (``central``; tests/fl/test_fedtan.py). The union statistics
    are every client's, so the server's running statistics are their moving average, updated
    every local step as nn.BatchNorm2d's on the union batch; dropout masks are drawn for the
    union batch as ``central`` draws them.

    ``fedtan_union: first_step`` is the authors' public code (wangyanmeng/FedTAN, its
    ``first_local_updating``): the union statistics in the first local step of a round only
    (all clients then hold the global weights), the other E - 1 steps naive BN on each
    client's own batch (FedAvg's per-client vmap), the running statistics averaged with the
    weights at the round's end: 3L + 1 exchanges per round, the count FixBN's Table 5 quotes
    (580K = 10K rounds x 58 for ResNet-20's L = 19). Its SGD restarts after the union step
    (``FedTAN.py`` line 203 builds a fresh optimizer for the E - 1 naive steps): the momenta of
    ``client_momentum: reset`` runs are zeroed again there, so step 2's momentum is its own
    gradient, as a fresh torch.optim.SGD's first step; ``local`` and ``global`` runs (modes the
    authors' code has not) keep theirs.
    """

    def round(self, first_step: int) -> Tensor:
        E, R = self.cfg.local_steps, self.runs
        self._start_clock(first_step)
        rule = self.normalizer.rule_at(first_step)  # the union's statistics
        params = {k: self._per_client(p) for k, p in self.state.params.items()}
        union_step = self.gradient_step(("clientwise", rule), lambda: over_runs(
            self.grad_fn(rule, self.n, loss_scale=float(self.n)), R))
        every = self.cfg.fedtan_union == "every_step"
        names = self.trainable(first_step)
        self.start_round()
        total = torch.zeros(R, device=self.dropout_keys.device, dtype=self.lrs.dtype)
        for e in range(E if every else 1):
            total = total + self._fused_step(union_step, params, rule, first_step + e, names)
        if every or E == 1:
            self._average_params(params, set(names))
        else:  # the authors' code: E - 1 steps of naive BN, then FedAvg's aggregation
            stats = {k: self._per_client(s) for k, s in self.state.stats.items()}
            local = self.gradient_step(("clients", "naive BN"), lambda: over_clients(
                self.grad_fn(BatchStats(), 1)))
            self.start_round()  # the authors' fresh SGD after the union step
            self._step_views(params, stats, self.n)
            self._client_keys(None)
            for e in range(1, E):
                total = total + self._local_step(local, params, stats, first_step + e, names)
            self._aggregate(params, stats, BatchStats(), set(names))
        self.end_round()
        return total

    def communication_rounds(self, steps: int) -> int:
        """3L per local step with the union's statistics (each BN layer: the clients' means,
        their variances, then the gradients with respect to the union's statistics) plus one
        model average per round; ``first_step``: the union in one step per round."""
        rounds = steps // self.cfg.local_steps
        union_steps = steps if self.cfg.fedtan_union == "every_step" else rounds
        return 3 * len(self.layers) * union_steps + rounds


def make_trainer(
    cfgs: Sequence[RunConfig], models: Sequence[nn.Module], normalizer: Normalizer,
    batches: ClientBatches, force_fedavg: bool = False,
    compile: dict[str, Any] | None = None, autocast: torch.dtype | None = None,
    cuda_graph: str = "off",
) -> _Trainer:
    """DSGD's single fused pass when E = 1, FedAvg's stacked clients otherwise (and whenever
    the server needs each client's update: ``attack_updates``; or the clients' own state under
    partial participation: ``participation`` < 1; or each client's own gradient, clipped by
    itself: FedWon's adaptive clipping, which the mean of the clients' gradients would not
    reproduce). ``cfgs`` share a bundle key; ``models``
    are their initialized models, one per run; ``compile``: torch.compile's arguments for
    the gradient steps (None: eager; :meth:`_Trainer.gradient_step`); ``autocast``: their
    autocast dtype (fednorm.fl.precision; None: none); ``cuda_graph`` (``execution.cuda_graph``:
    ``auto`` or ``off``): the local steps captured as CUDA graphs and replayed on a CUDA device,
    eagerly elsewhere (fednorm.fl.graphed)."""
    cfg = cfgs[0]
    fedavg = (cfg.local_steps > 1 or cfg.attack_updates or cfg.participation < 1
              or bool(normalizer.local or normalizer.kept) or normalizer.static
              or normalizer.agc is not None or cfg.clip_norm is not None
              or cfg.weighted_average)
    # FedTAN: one forward over all clients' stacked batches
    cls = FedTAN if normalizer.clientwise else FedAvg if force_fedavg or fedavg else DSGD
    trainer = cls(cfgs, models, normalizer, batches)
    trainer.compile, trainer.autocast = compile, autocast
    trainer.graphed = Graphed(cuda_graph, trainer.dropout_keys.device)
    return trainer
