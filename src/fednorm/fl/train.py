"""Training runs from configs: data onto the device, clients sampled, evaluated every k steps.

:func:`train_bundle` trains the R runs of a bundle (configs that share
:func:`fednorm.config.bundle_key`) in lock-step on one device, their state stacked with a
leading run dimension (fednorm.fl.round); :func:`train` is a bundle of one. Each run gets what
it would get alone: its own initialization (the global seed set to its seed before its model is
built), partition, batches, augmentation and dropout masks (counter-based, fednorm.rng), and its
own metrics. A run whose training or test loss becomes non-finite is recorded ``diverged`` at
that evaluation point, handed to ``on_finish`` at once, and dropped from the bundle; the others
go on unchanged. Returns the metrics as rows; writing files is :mod:`fednorm.run`'s job.

The bundle's driver (:class:`_Bundle`) keeps a queue of *slices*: runs with their state
(:class:`fednorm.fl.state.BundleState`, or none: step 0), trained one after the other by
:class:`_Loop`. A bundle is one slice; ``size`` cuts it in consecutive ones; a slice that runs
out of memory is replaced by two selections of its last saved state. The driver alone talks to
the resume point (fednorm.fl.resume): it loads it at the start, hands it a snapshot between
rounds (the live slice, the slices waiting, the runs finished) and deletes it at the end.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from fednorm import rng
from fednorm.config import RunConfig, bundle_key
from fednorm.data.arrays import hold_out
from fednorm.data.imagenet import StreamedImages
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import Data, build, model_for, partitions
from fednorm.fl.dynamics import QUANTITIES
from fednorm.fl.evaluate import (
    domain_distributions,
    evaluate_chunks,
    label_distributions,
)
from fednorm.fl.norm_error import layer_errors, union_statistics
from fednorm.fl.resume import ResumeStore
from fednorm.fl.state import HISTORY, BundleState
from fednorm.fl.streamed import streamed_batches
from fednorm.fl.trainer import Trainer
from fednorm.metrics import DOMAIN_ACCURACY

LAYER_COLUMNS = ("step", "layer", "mean_error", "var_error")
DYNAMICS_COLUMNS = ("step", "layer", *QUANTITIES)  # fednorm.fl.dynamics, when recorded
log = logging.getLogger("fednorm.train")
# A slice of a bundle: its runs (indices into the bundle) and their state (None: step 0)
Slice = tuple[list[int], BundleState | None]


@dataclass
class TrainResult:
    rows: list[dict[str, float]] = field(default_factory=list)  # fednorm.metrics.METRIC_COLUMNS
    layer_rows: list[dict] = field(default_factory=list)  # LAYER_COLUMNS: normalization error
    dynamics_rows: list[dict] = field(default_factory=list)  # DYNAMICS_COLUMNS
    status: str = "ok"  # "ok" or "diverged"
    model: nn.Module | None = None


def train(cfg: RunConfig, data: Data, device: str | torch.device = "cpu") -> TrainResult:
    """Train one run (a bundle of one)."""
    return train_bundle([cfg], data, device)[0]


def _check_bundle(cfgs: Sequence[RunConfig]) -> None:
    if not cfgs:
        raise ValueError("a bundle needs at least one run")
    keys = {bundle_key(c) for c in cfgs}
    if len(keys) > 1:
        raise ValueError(f"the runs of a bundle must share fednorm.config.bundle_key; these "
                         f"{len(cfgs)} runs have {len(keys)} different keys")


def train_bundle(
    cfgs: Sequence[RunConfig], data: Data, device: str | torch.device = "cpu",
    on_finish: Callable[[int, TrainResult], None] | None = None,
    resume: ResumeStore | None = None, size: int | None = None,
    precision: str = "float32", cuda_graph: str = "off",
) -> list[TrainResult]:
    """Train the runs ``cfgs`` together; ``on_finish(i, result)`` is called the moment run i
    finishes (diverged, or at the last step). Returns the results in the order of ``cfgs``.
    The models take the data's floating dtype (float32; float64 for exact comparisons).
    ``resume``: where the bundle's state is saved between rounds, and continued from when a
    saved state of these runs exists (fednorm.fl.resume); a run that had finished before is
    handed to ``on_finish`` again at once.

    ``size``: at most this many runs train together (the bundle in consecutive slices, one
    after the other; None: all at once). When the device runs out of memory, the runs still
    training are split in two halves that continue from their last saved state (or the state
    their slice started from) one after the other, each split again if it does not fit either;
    a run that does not fit alone raises.

    ``precision``: the gradient steps' arithmetic (fednorm.fl.precision: bf16 autocasts them;
    the TF32 flags are the caller's, fednorm.run); ``cuda_graph``: execution.cuda_graph."""
    _check_bundle(cfgs)
    bundle = _Bundle(list(cfgs), data, torch.device(device), on_finish, resume, precision,
                     cuda_graph)
    bundle.start(size or len(cfgs))
    while bundle.queue:
        bundle.train_next()
    if resume is not None:  # every run's files are written: the resume point has served
        resume.purge()
    return bundle.done()


@dataclass
class _Bundle:
    """The driver of one bundle: its queue of slices, the runs finished, the resume point."""

    cfgs: list[RunConfig]
    data: Data
    device: torch.device
    on_finish: Callable[[int, TrainResult], None] | None
    store: ResumeStore | None
    precision: str  # execution.precision: the gradient steps' autocast (fednorm.fl.precision)
    # execution.cuda_graph, auto or off: the local steps captured as CUDA graphs on a CUDA
    # device, eagerly elsewhere (fednorm.fl.graphed)
    cuda_graph: str
    queue: list[Slice] = field(default_factory=list)  # the slices still to train, in order
    results: dict[int, TrainResult] = field(default_factory=dict)  # the runs finished
    live: _Loop | None = None  # the slice training now

    def start(self, size: int) -> None:
        """The queue from the resume point (its finished runs handed to ``on_finish`` again),
        or the whole bundle from step 0; slices of at most ``size`` runs."""
        saved = self.store.load(self.cfgs) if self.store is not None else None
        states = []
        if saved is not None:
            wanted = [c.identity() for c in self.cfgs]
            for entry in saved["finished"]:
                if entry["run"] in wanted:
                    self.finished(wanted.index(entry["run"]), self._restored(entry))
            states = [BundleState.from_state_dict(part) for part in saved["slices"]]
        left = [i for i in range(len(self.cfgs)) if i not in self.results]
        self.queue = [(ids[k:k + size], None if state is None
                       else state.select(list(range(k, min(k + size, len(ids))))))
                      for ids, state in self._slices(left, states)
                      for k in range(0, len(ids), size)]

    def _slices(self, ids: list[int], states: Iterable[BundleState]) -> list[Slice]:
        """The runs ``ids`` as the ``states`` hold them: one slice per state that holds some
        of them (the first that does), the rest from step 0."""
        wanted = [self.cfgs[i].identity() for i in ids]
        out, found = [], set()
        for state in states:
            pos = [j for j, r in enumerate(state.runs)
                   if r in wanted and ids[wanted.index(r)] not in found]
            if pos:
                got = [ids[wanted.index(state.runs[j])] for j in pos]
                out.append((got, state.select(pos)))
                found.update(got)
        fresh = [i for i in ids if i not in found]
        return out + ([(fresh, None)] if fresh else [])

    def _restored(self, entry: dict[str, Any]) -> TrainResult:
        """A finished run's result from a resume point, with its final parameters."""
        model = model_for(self.cfgs[[c.identity() for c in self.cfgs].index(entry["run"])],
                       self.data, self.device)
        model.load_state_dict(entry["model"])
        return TrainResult(**{k: entry[k] for k in HISTORY}, status=entry["status"],
                           model=model)

    def finished(self, i: int, result: TrainResult) -> None:
        self.results[i] = result
        if self.on_finish is not None:
            self.on_finish(i, result)

    def done(self) -> list[TrainResult]:
        return [self.results[i] for i in range(len(self.cfgs))]

    def train_next(self) -> None:
        """Train the queue's first slice; when it does not fit the device's memory, its runs
        still training go back to the queue's front in two halves, from their last saved
        state (else the state the slice started from)."""
        ids, state = self.queue.pop(0)
        try:
            self._train(ids, state)
            return
        except Exception as err:  # only running out of memory is handled
            if not out_of_memory(err) or len(ids) == 1:
                raise
            log.warning("%d runs together do not fit the memory of %s (%s); training them in "
                        "two halves", len(ids), self.device, str(err).splitlines()[0])
        self.live = None
        release_memory(self.device)  # outside the except block: its frames are gone
        saved = self.store.load(self.cfgs) if self.store is not None else None
        states = [BundleState.from_state_dict(p) for p in saved["slices"]] if saved else []
        left = [i for i in ids if i not in self.results]
        parts = self._slices(left, [*states, *([state] if state is not None else [])])
        if len(parts) == 1:
            (run_ids, latest), half = parts[0], len(parts[0][0]) // 2
            parts = [(run_ids[a:b], None if latest is None else latest.select(list(range(a, b))))
                     for a, b in ((0, half), (half, len(run_ids)))]
        self.queue[:0] = parts

    def _train(self, ids: list[int], state: BundleState | None) -> None:
        """Train the runs ``ids`` in lock-step, from step 0 or from ``state``."""
        cfgs = [self.cfgs[i] for i in ids]
        cfg = cfgs[0]
        data = hold_out(self.data, cfg.val_fraction).to(self.device)  # a bundle_key field
        domains = getattr(data, "train_domain", None)  # feature shift: each image's domain
        parts = partitions(cfgs, data)
        trainer = build(cfgs, data, parts, precision=self.precision,
                        cuda_graph=self.cuda_graph, device=self.device)
        if cfg.record_dynamics and trainer.layers:  # a bundle_key field: all runs or none
            trainer.record_dynamics(cfg.dynamics_window)
        if state is not None:
            trainer.state.load_state_dict(state.state_dict())
        else:
            trainer.before_training()  # the method's hook
        self.live = _Loop(cfgs, ids, data, trainer, _probe(cfgs, data, parts),
                          label_distributions(data, parts), self,
                          None if domains is None else domain_distributions(data, parts))
        self.live.run(resumed=state is not None)
        self.live = None

    def between_rounds(self, step: int) -> None:
        """Before the live slice's round from ``step``: a save when due, a stop when wanted."""
        if self.store is not None:
            self.store.between_rounds(step, self.snapshot)

    def snapshot(self) -> dict[str, Any]:
        """The resume point (fednorm.fl.resume, FORMAT 2): the live slice's state, those of the
        slices waiting (not those from step 0: a run in no slice starts there), and every run
        finished with its rows, status and final parameters."""
        assert self.store is not None and self.live is not None
        live = self.live.trainer.state
        waiting = [state for _, state in self.queue if state is not None]
        finished = [{"run": self.cfgs[i].identity(), "status": r.status,
                     "model": r.model.state_dict(), **{k: getattr(r, k) for k in HISTORY}}
                    for i, r in sorted(self.results.items())]
        return {"header": self.store.header(self.cfgs), "step": live.step,
                "slices": [s.state_dict() for s in (live, *waiting)], "finished": finished}


def _probe(cfgs: Sequence[RunConfig], data: Data, parts: Sequence[Sequence[Tensor]]
           ) -> ClientBatches:
    """The normalization error's sampler. It draws separately from the clients' batches (its
    own stream), so measuring never changes the training trajectory. Under attack the reference
    is the union of the honest clients' batches (the first n - f): what a robust server can at
    best recover. In memory the probe's images are not augmented; streamed from disk
    (ImageNet-1K) they are cropped and flipped as training images are, with the draws of the
    probe's own stream (its batches measure the statistics of training-like batches)."""
    cfg, seeds = cfgs[0], [c.seed for c in cfgs]
    honest = cfg.n_clients - (cfg.f if cfg.attack != "none" else 0)
    probed = [p[:honest] for p in parts]
    if isinstance(data, StreamedImages):
        return streamed_batches(data, probed, cfg.batch_size, seeds, rng.PROBE)
    return ClientBatches(data.train_x, data.train_y, probed, cfg.batch_size, seeds, rng.PROBE)


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is the device running out of memory (CUDA's OutOfMemoryError, or the
    CPU allocator's error)."""
    return isinstance(err, torch.cuda.OutOfMemoryError) or (
        isinstance(err, RuntimeError)
        and any(m in str(err) for m in ("out of memory", "can't allocate memory")))


def release_memory(device: torch.device) -> None:
    """Hand the memory of a failed attempt back (its tensors are garbage by now)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class _Loop:
    """One slice's evaluation schedule: train between evaluation points, record every run
    still going into the state's rows, finish and drop the runs that diverged."""

    def __init__(self, cfgs: Sequence[RunConfig], ids: list[int], data: Data,
                 trainer: Trainer, probe: ClientBatches, label_dist: Tensor,
                 bundle: _Bundle, domain_dist: Tensor | None = None) -> None:
        self.cfg, self.total, self.data = cfgs[0], len(cfgs), data
        self.trainer, self.probe, self.label_dist = trainer, probe, label_dist
        # feature shift: the share of each domain in each client's data (R, n, D), or None
        self.domain_dist = domain_dist
        self.ids = list(ids)  # the bundle index of each run still training
        self.bundle = bundle
        self.started = self.last_time = time.perf_counter()
        self.first_step = trainer.state.step  # where this process started

    def run(self, resumed: bool) -> None:
        """Train from the state's step: from 0 (with the evaluation of step 0), or from a
        resume point or a slice of one."""
        cfg, trainer = self.cfg, self.trainer
        if resumed:
            store = self.bundle.store
            log.info("resumed at step %d of %d (%d runs training) from %s", self.first_step,
                     cfg.steps, len(self.ids), store.path if store is not None else "memory")
        elif not self.record(0, torch.full((trainer.runs,), math.nan,
                                           device=self.data.device)):
            return
        for first in range(self.first_step, cfg.steps, cfg.local_steps):
            self.bundle.between_rounds(first)
            trainer.advance(first)
            state, step = trainer.state, first + cfg.local_steps
            if step // cfg.eval_every == first // cfg.eval_every and step != cfg.steps:
                continue
            # the only host syncs: at evaluation points
            going = self.record(step, state.loss_sum / state.since)
            self.progress(step, state.since)
            if not going:
                return
            state = trainer.state  # without the runs that diverged
            state.loss_sum, state.since = torch.zeros_like(state.loss_sum), 0
        self.finish(list(range(trainer.runs)), "ok")


    def domain_columns(self, accuracies: list[float]) -> dict[str, float]:
        """A run's per-domain accuracies as metric columns (fednorm.metrics.DOMAIN_ACCURACY),
        their mean and least; NaN where the run has no such domain (or none)."""
        out = dict.fromkeys(("domain_accuracy", "worst_domain_accuracy", *DOMAIN_ACCURACY),
                            math.nan)
        if not accuracies:
            return out
        names = getattr(self.data, "domains", ())
        return {**out, "domain_accuracy": _mean(accuracies),
                "worst_domain_accuracy": min(accuracies),
                **{f"test_accuracy_{d}": a for d, a in zip(names, accuracies, strict=True)}}

    def record(self, step: int, train_loss: Tensor) -> bool:
        """Append an evaluation row to every active run; finish and drop those that diverged.
        False when no run is left."""
        trainer = self.trainer
        trainer.before_test(self.data)  # the method's hook
        # the BN layers of a global model (FedBN, SiloBN: the clients keep their statistics)
        measured = [] if trainer.parts.keeps_statistics else trainer.layers
        with trainer.evaluation_statistics(step):  # the method's context around a test
            acc, test_loss, local_acc, by_domain = evaluate_chunks(
                trainer, partial(self.data.chunks, "test"), self.label_dist,
                getattr(self.data, "test_domain", None), self.domain_dist)
            val_acc = acc.new_full((trainer.runs,), math.nan)  # no validation set held out
            if self.data.val_y is not None:  # scored as the test is: under feature shift the
                # mean of the domains' accuracies, each through its clients' models
                val_acc, _, _, val_domains = evaluate_chunks(
                    trainer, partial(self.data.chunks, "val"), self.label_dist,
                    getattr(self.data, "val_domain", None), self.domain_dist)
                if val_domains.shape[1]:
                    val_acc = val_domains.nanmean(1)
            mean_err = var_err = acc.new_zeros(trainer.runs, 0)  # no BN layer: nothing to measure
            if measured:
                central = union_statistics(trainer, self.probe.sample(step)[0],
                                           rng.fold(self.probe.keys, step))
                mean_err, var_err = layer_errors(trainer, central)
        trained = torch.isfinite(train_loss) | (step == 0)
        test_loss = torch.where(trained, test_loss, math.nan)
        acc = torch.where(torch.isfinite(test_loss), acc, math.nan)  # argmax over NaN: no acc
        val_acc = torch.where(torch.isfinite(test_loss), val_acc, math.nan)
        by_domain = torch.where(torch.isfinite(test_loss)[:, None], by_domain, math.nan)
        names = [layer.key for layer in measured]
        dynamics = ({q: v.tolist()
                     for q, v in trainer.dynamics.take(trainer.state.dynamics).items()}
                    if trainer.dynamics is not None else None)
        accuracies = acc.tolist()
        self.mean_accuracy = _mean([a for a in accuracies if math.isfinite(a)])
        local_acc = torch.where(torch.isfinite(test_loss), local_acc, math.nan)
        columns = zip(trainer.state.history, accuracies, test_loss.tolist(),
                      train_loss.tolist(), mean_err.tolist(), var_err.tolist(),
                      local_acc.tolist(), val_acc.tolist(), by_domain.tolist(), strict=True)
        for r, (result, a, tl, trl, me, ve, la, va, dom) in enumerate(columns):
            result["layer_rows"] += [{"step": step, "layer": name, "mean_error": m, "var_error": v}
                                  for name, m, v in zip(names, me, ve, strict=True)]
            # the dynamics sum over layers: the L1 norm over every statistic of the network
            totals = dict.fromkeys(QUANTITIES, math.nan)
            if dynamics is not None:
                per_layer = [dynamics[q][r] for q in QUANTITIES]
                result["dynamics_rows"] += [{"step": step, "layer": name,
                                          **dict(zip(QUANTITIES, values, strict=True))}
                                         for name, *values in zip(trainer.dynamics.keys, *per_layer,
                                                                  strict=True)]
                totals = {q: sum(v) for q, v in zip(QUANTITIES, per_layer, strict=True)}
            result["rows"].append(dict(
                step=step, test_accuracy=a, test_loss=tl, train_loss=trl,
                norm_error_mean=_mean(me), norm_error_var=_mean(ve), **totals,
                comm_rounds=trainer.communication_rounds(step), local_test_accuracy=la,
                val_accuracy=va, **self.domain_columns(dom)))
        ok = torch.isfinite(test_loss) & trained
        if bool(ok.all()):
            return True
        self.finish((~ok).nonzero().flatten().tolist(), "diverged")
        going_on = ok.nonzero().flatten()
        self.ids = [self.ids[r] for r in going_on.tolist()]
        if not self.ids:
            return False
        trainer.keep(going_on)  # the state's select, and those runs' samplers and keys
        self.probe = self.probe.select(going_on)
        self.label_dist = self.label_dist[going_on]
        if self.domain_dist is not None:
            self.domain_dist = self.domain_dist[going_on]
        return True

    def finish(self, positions: list[int], status: str) -> None:
        """Hand the runs at these positions of the trainer to the driver, with their model."""
        self.trainer.write_back()
        state = self.trainer.state
        for r in positions:
            self.bundle.finished(self.ids[r], TrainResult(
                **state.history[r], status=status, model=self.trainer.models[r]))

    def progress(self, step: int, since: int) -> None:
        """One log line per evaluation point, so that a user watching a long job sees it move."""
        cfg, now = self.cfg, time.perf_counter()
        images = len(self.ids) * cfg.n_clients * cfg.batch_size * since
        rate = images / max(now - self.last_time, 1e-9)
        left = (now - self.started) * (cfg.steps - step) / max(step - self.first_step, 1)
        log.info("step %d/%d  runs going %d/%d  mean accuracy %.3f  %.0f images/s  %.0f s left",
                 step, cfg.steps, len(self.ids), self.total, self.mean_accuracy, rate, left)
        self.last_time = now


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
