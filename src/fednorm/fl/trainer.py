"""A bundle's trainer: its one state, what the runs' configs give, and the services the rounds
(fednorm.fl.round) and the method's hooks (fednorm.norms.hooks) use.

A trainer advances a *bundle* of R runs that share the shape of their computation (the same
model, normalizer, local steps, batch and steps: :func:`fednorm.config.bundle_key`) and differ
in seed, partition, heterogeneity, learning rate, client momentum mode, or the attack and the
server's rule for the statistics. Their state is one :class:`fednorm.fl.state.BundleState`,
every tensor with a leading run dimension: parameters (R, *shape), BN running statistics (R,
C), momenta (R, *shape) for DSGD or (R, n, *shape) per client, the clients' own parts, the
dynamics' sums, the loss and the rows. A single run is a bundle of one, whose parameters and
statistics are views of its model's own tensors.

Everything else is a function of the runs' configs and rebuilt from them: the sampler, the
learning rates (R, phases), the dropout keys, the servers (every distinct one aggregates every
run's reports, each run keeps its own result), the momentum modes, and the step counter on the
device (``clock``): a local step reads nothing back to the host and makes no tensor from a
Python number (what a CUDA graph of it needs), so its draws and the learning rate's phase are
computed from the clock there. What chooses a step's operators (the rule in force, the
parameters trained, the participants) is decided per round on the host.

Randomness (batches, augmentation, dropout masks) is counter-based (fednorm.rng): run r's draws
depend on its seed and the step only, so a run gets the same draws alone or in any bundle. A
run that diverges (NaN) touches no other: no reduction crosses the run dimension; the training
loop drops it at the next evaluation point (:meth:`Trainer.keep`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fednorm import rng
from fednorm.config import CLIENT_MOMENTA, RunConfig
from fednorm.fl import server
from fednorm.fl.batches import ClientBatches
from fednorm.fl.buffers import Views, stack
from fednorm.fl.dynamics import Dynamics
from fednorm.fl.graphed import Graphed
from fednorm.fl.participation import Participants, participation_keys
from fednorm.fl.parts import ClientParts
from fednorm.fl.precision import autocast_step
from fednorm.fl.state import BundleState, empty_history
from fednorm.fl.step import Reports, forward_fn, grad_fn, learning_rate, optimize, over_runs
from fednorm.models.dropout import KeyedDropout
from fednorm.norms import Normalizer, PartNames, Pending, StatRule, Tools, bn_layers
from fednorm.robust import Server


class Trainer:
    """The bundle's state and services; a round's schedule is a subclass's
    (fednorm.fl.round)."""

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
        self.stat_names = [f"{la.key}.{s}" for la in self.layers
                           for s in ("running_mean", "running_var")]
        params = [dict(m.named_parameters()) for m in models]
        buffers = [dict(m.named_buffers()) for m in models]
        stacked = {k: stack([p[k] for p in params]) for k in self.names}
        first = stacked[self.names[0]]
        self.state = BundleState(
            runs=[c.identity() for c in cfgs], params=stacked,
            stats={k: stack([b[k] for b in buffers]) for k in self.stat_names},
            momenta={k: self._zero_momentum(p) for k, p in stacked.items()},
            loss_sum=first.new_zeros(len(cfgs)),
            history=[empty_history() for _ in cfgs])
        # Per-run learning rates, lr x lr_scale (the milestones are shared), (R, len(lr)), in the
        # parameters' dtype so that a float64 run is not stepped with float32-rounded rates.
        self.lrs = torch.tensor([[v * c.lr_scale for v in c.lr] for c in cfgs],
                                device=first.device, dtype=first.dtype)
        # The local step's number on the device (int64, 0-dim), set once a round
        # (:meth:`_start_clock`, a write that reads nothing back) and advanced in place.
        self.clock = torch.zeros((), dtype=torch.int64, device=first.device)
        self.milestones = torch.tensor(self.cfg.lr_milestones, dtype=torch.int64,
                                       device=first.device)
        self.dropout_keys = rng.fold(rng.run_key(torch.tensor([c.seed for c in cfgs]),
                                                 first.device),
                                     rng.DROPOUT)
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
        # the tensors each client keeps (fednorm.fl.parts; FedAvg's state holds them)
        self.parts = ClientParts(normalizer.parts(self.model) if normalizer.parts else
                                 PartNames(), self.stat_names)
        self.hooks = normalizer.hooks.bind(self.model, self.batches)  # the method's
        self._steps: dict[tuple, Callable] = {}  # gradient_step's, built once per key
        self.views = Views()  # buffers and views of the state, made once (fednorm.fl.buffers)
        self.graphed = Graphed("off")  # the local steps through a CUDA graph, or eagerly
        # whether a forward draws dropout masks (else the step's keys are a constant)
        self.draws_dropout = any(isinstance(m, KeyedDropout) for m in self.model.modules())

    @property
    def runs(self) -> int:
        return len(self.cfgs)

    # -- the gradient steps and the local step's wrapper ---------------------------------------

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

    def grad_fn(self, rule: StatRule | None, n_groups: int, loss_scale: float = 1.0,
                union_clients: int | None = None) -> Callable:
        """One run's (or client's) gradient (fednorm.fl.step.grad_fn) of the template model;
        ``union_clients``: the n of the rules' Kn/(Kn-1) when not n_clients."""
        return grad_fn(self.model, rule, n_groups, union_clients or self.n,
                       self.cfg.bn_momentum, record=self.dynamics is not None,
                       loss_scale=loss_scale)

    def _stepped(self, kind: tuple, buffers: list[Tensor], step: Callable[[], Tensor]
                 ) -> Tensor:
        """``step()``, a local step, through the trainer's CUDA-graph wrapper
        (fednorm.fl.graphed), keyed by what decides its operators (``kind``) and the
        addresses of the static ``buffers`` it steps; eagerly where no graph may hold it: a
        dynamics recorder (its clones), batches decoded on the host (a Python step)."""
        if not self.graphed.enabled or self.dynamics is not None or not self.batches.on_device:
            return step()
        return self.graphed((*kind, tuple(t.data_ptr() for t in buffers)), step)

    def _optimize(self, names: list[str], params: dict[str, Tensor],
                  grads: dict[str, Tensor], momenta: dict[str, Tensor] | None = None,
                  lr: Tensor | None = None) -> None:
        """The optimizer step (fednorm.fl.step.optimize) of the parameters ``names``: the
        global ones with the state's momenta, or the clients' flattened over (run, client)
        with their ``momenta`` and ``lr`` (R*n,)."""
        optimize(self.cfg, self.hooks.grads, names, params, grads,
                 self.state.momenta if momenta is None else momenta,
                 self._lr() if lr is None else lr, per_client=momenta is not None)

    def _start_clock(self, first_step: int) -> None:
        """The round from ``first_step`` starts: the device's step counter set to it."""
        self.clock.fill_(first_step)

    def _drawn_at(self, t: int) -> int | Tensor:
        """What the sampler takes as step ``t``: the device clock for batches drawn on the
        device; the host's number for images decoded on the host (fednorm.fl.streamed),
        whose workers read ahead by step number."""
        return self.clock if self.batches.on_device else t

    def _lr(self) -> Tensor:
        return learning_rate(self.lrs, self.milestones, self.clock)

    def _zero_momentum(self, stacked: Tensor) -> Tensor:
        return torch.zeros_like(stacked)

    # -- the server: statistics and momenta ---------------------------------------------------

    @torch.no_grad()
    def _commit(self, reports: Reports, rule: StatRule, beta: float, n: int | None = None,
                K: dict[str, int] | None = None) -> None:
        """Every run's server aggregates its clients' (R, n, C) reports into its statistics
        (fednorm.fl.server.commit); ``n``: the rows when not n_clients; ``K``: each layer's
        values per client and channel when not those of the last forward."""
        if not self.layers:
            return
        server.commit(self.state.stats, reports,
                      K or {la.key: la.elements_per_client for la in self.layers}, rule, beta,
                      n or self.n, self.servers, self.server_of, self.views)

    def _commit_pending(self, pending: Pending, rule: StatRule) -> None:
        """The server commits statistics reported at the round's start (the method's
        ``round_start`` hook), pooled over the clients that reported."""
        with self._observed_round():
            self._commit(pending.reports, rule, pending.beta,
                         n=next(iter(pending.reports.values()))[0].shape[1], K=pending.K)

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

    def start_round(self) -> None:
        """``client_momentum: reset``: every round starts from zero momentum."""
        server.reset_momenta(self.state.momenta, self._runs_with("reset"))

    def end_round(self, trained: dict[str, Tensor] | None = None) -> None:
        """``client_momentum: global``: every client's momentum replaced by the clients' mean
        (a no-op for DSGD's single buffer, which already is that mean); under partial
        participation, by the participants' ``trained`` (R, m, ...)."""
        mask = self._runs_with("global") if self.per_client_momenta else None
        server.share_momenta(self.state.momenta, mask, trained)

    # -- what the method's hooks use ----------------------------------------------------------

    @property
    def tools(self) -> Tools:
        """The records and functions the method's hooks receive (fednorm.norms.hooks)."""
        return Tools(state=self.state, n=self.n, runs=self.runs, layers=self.layers,
                     local_steps=self.cfg.local_steps, batch_size=self.cfg.batch_size,
                     keys=self.dropout_keys, lrs=self.lrs, batches=self.batches,
                     rule_at=self.normalizer.rule_at, forward=self._reports_of,
                     commit=self._commit, own_parts=self.own_parts,
                     participants=self.participants)

    def _reports_of(self, rule: StatRule | None, groups: int, beta: float, x: Tensor,
                    key: Tensor, params: dict[str, Tensor] | None = None,
                    clients: int | None = None, shared_x: bool = False) -> Reports:
        """The layers' reports of a training-mode forward of every run's global model (its
        parameters, some replaced by ``params``) over ``x`` (``shared_x``: the same images for
        every run), in ``groups`` groups; ``clients``: the n of the rules' Kn/(Kn-1)."""
        forward = over_runs(forward_fn(self.model, rule, groups, clients or self.n, beta),
                            self.runs, in_dims=(0, 0, None, 0) if shared_x else None)
        _, reports, _ = forward({**self.state.params, **(params or {})}, self.state.stats, x,
                                key)
        return reports

    def before_training(self) -> None:
        """The method's hook before the first round of runs from step 0."""
        self.hooks.before_training(self.tools)

    def before_test(self, data: Any) -> None:
        """The method's hook before a test, with the training ``data``."""
        self.hooks.before_test(self.tools, data)

    def evaluation_statistics(self, step: int) -> contextlib.AbstractContextManager:
        """The method's context around a test at ``step``."""
        return self.hooks.evaluation(self.tools, step)

    # -- the runs ------------------------------------------------------------------------------

    def keep(self, runs: Tensor) -> None:
        """Continue with the runs ``runs`` (indices into the bundle) alone: their state
        (:meth:`BundleState.select`) and what their configs give (samplers, learning rates,
        keys, servers). The kept runs' arithmetic and random draws are unchanged."""
        idx = runs.tolist()
        self.cfgs = [self.cfgs[i] for i in idx]
        self.models = [self.models[i] for i in idx]
        self.state = self.state.select(runs)
        self.batches = self.batches.select(runs)
        self.hooks.select(runs)
        self.lrs, self.dropout_keys = self.lrs[runs], self.dropout_keys[runs]
        self.graphed.reset()  # captured on the dropped runs' buffers
        self.views.clear()  # views and buffers of R runs (a constant key's R·n zeros among them)
        self.server_of, self.momentum_mode = self.server_of[runs], self.momentum_mode[runs]

    def record_dynamics(self, window: int) -> None:
        """Record the training dynamics (fednorm.fl.dynamics) of every BN layer from now on,
        their sums kept in the state."""
        self.dynamics = Dynamics([la.key for la in self.layers], window)
        self.state.dynamics = self.dynamics.zeros(self.runs, self.dropout_keys.device)

    def own_parts(self, who: Tensor | None, averaged: bool = False) -> dict[str, Tensor]:
        """Each client's own parts, or the participants' ``who`` (fednorm.fl.parts:
        :meth:`ClientParts.load`); ``averaged``: those the server also averages alone."""
        return self.parts.load(self.state, who, averaged)

    def participants(self, first_step: int) -> Tensor | None:
        """(R, m) clients taking part in the round from ``first_step``, in increasing order;
        None when every run's participation is full (the code path without participants)."""
        return self.batches.participants.at(first_step) if self.partial else None

    def trainable(self, step: int) -> list[str]:
        """The parameter names the optimizer steps during ``step`` (a method may freeze some:
        Normalizer.frozen_params_at)."""
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

    def advance(self, first_step: int) -> None:
        """The round from ``first_step`` (the state's ``step``), kept in the state: its losses
        summed into ``loss_sum``, its steps into ``since``, ``step`` set to the next round's."""
        state = self.state
        state.loss_sum = state.loss_sum + self.round(first_step)
        state.since += self.cfg.local_steps
        state.step = first_step + self.cfg.local_steps

    def round(self, first_step: int) -> Tensor:
        """Train every run for one round from ``first_step``; returns the (R,) summed losses."""
        raise NotImplementedError

    def communication_rounds(self, steps: int) -> int:
        """Client-server exchanges in the first ``steps`` local steps: one per round (E = 1:
        one per step), carrying the weights, or the gradients, and the BN statistics."""
        return steps // self.cfg.local_steps
