"""Training runs from configs: data onto the device, clients sampled, evaluated every k steps.

:func:`train_bundle` trains the R runs of a bundle (configs that share
:func:`fednorm.config.bundle_key`) in lock-step on one device, their state stacked with a
leading run dimension (fednorm.fl.engine); :func:`train` is a bundle of one. Each run gets what
it would get alone: its own initialization (the global seed set to its seed before its model is
built), partition, batches, augmentation and dropout masks (counter-based, fednorm.rng), and its
own metrics. A run whose training or test loss becomes non-finite is recorded ``diverged`` at
that evaluation point, handed to ``on_finish`` at once, and dropped from the bundle; the others
go on unchanged. Returns the metrics as rows; writing files is :mod:`fednorm.run`'s job.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from fednorm import rng
from fednorm.config import RunConfig, bundle_key
from fednorm.data import Arrays
from fednorm.data.arrays import hold_out, slices
from fednorm.data.augment import augment_for
from fednorm.data.imagenet import StreamedImages
from fednorm.data.partition import partition
from fednorm.fl.batches import ClientBatches
from fednorm.fl.dynamics import QUANTITIES, Dynamics
from fednorm.fl.engine import _Trainer, make_trainer, over_runs
from fednorm.fl.norm_error import layer_errors, union_statistics
from fednorm.fl.resume import ResumeStore
from fednorm.models import build_model
from fednorm.norms import normalizer_for

LAYER_COLUMNS = ("step", "layer", "mean_error", "var_error")
DYNAMICS_COLUMNS = ("step", "layer", *QUANTITIES)  # fednorm.fl.dynamics, when recorded
EVAL_IMAGES = 4096  # images of all runs together in one evaluation forward
log = logging.getLogger("fednorm.train")
# A data set in memory (Arrays) or on disk (ImageNet-1K: StreamedImages)
Data = Arrays | StreamedImages
# The images of an evaluation, asked ``size`` at a time: an iterable of (x, y) chunks
Chunks = Callable[[int], Iterable[tuple[Tensor, Tensor]]]


@dataclass
class TrainResult:
    rows: list[dict[str, float]] = field(default_factory=list)  # fednorm.metrics.METRIC_COLUMNS
    layer_rows: list[dict] = field(default_factory=list)  # LAYER_COLUMNS: normalization error
    dynamics_rows: list[dict] = field(default_factory=list)  # DYNAMICS_COLUMNS
    status: str = "ok"  # "ok" or "diverged"
    model: nn.Module | None = None


def evaluate(trainer: _Trainer, x: Tensor, y: Tensor, label_dist: Tensor
             ) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`evaluate_chunks` on the images ``x`` and labels ``y`` held in memory."""
    return evaluate_chunks(trainer, partial(slices, x, y), label_dist)


@torch.no_grad()
def evaluate_chunks(trainer: _Trainer, chunks: Chunks, label_dist: Tensor
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """Every run's test accuracy (fraction), mean NLL and accuracy on its clients' own label
    distributions, (R,) each, in eval mode, on the test images ``chunks(size)`` hands out in
    chunks of at most ``size`` (x, y): sliced from tensors in memory (Arrays.chunks), or
    decoded from disk (fednorm.data.imagenet.StreamedImages.chunks). The sums (loss, right
    answers per class, images per class) are accumulated over the chunks.

    The model tested is the global one; with personalized BN (FedBN, SiloBN: the trainer's
    ``local`` parts) there is none, and client i's model is the averaged weights with its own
    BN parts: then the accuracy and NLL are the mean over the clients' models on the (global)
    test set. The local accuracy is sum_c p_i(c) acc_i(c) averaged over the clients i, with
    p_i = ``label_dist`` (R, n, classes) the label distribution of client i's training data
    and acc_i(c) the accuracy of client i's model (or the global one) on the test images of
    class c: its test set drawn from its own label distribution, in expectation.
    """
    model, runs = trainer.model, trainer.runs
    local = getattr(trainer, "local", {})
    model.eval()
    if local:
        def clients(p, s, own, xb):  # one run: (n, B, classes), a model per client
            return vmap(lambda o: functional_call(model, {**p, **s, **o}, (xb,)))(own)

        fn = over_runs(clients, runs, in_dims=(0, 0, 0, None))
        state = (trainer.state.params, trainer.state.stats, local)
        models = trainer.n
    else:
        fn = over_runs(lambda p, s, xb: functional_call(model, {**p, **s}, (xb,)).unsqueeze(0),
                       runs, in_dims=(0, 0, None))
        state, models = (trainer.state.params, trainer.state.stats), 1
    classes, dtype = label_dist.shape[-1], label_dist.dtype
    loss = label_dist.new_zeros(runs, models)
    correct = label_dist.new_zeros(runs, models, classes)  # right answers per test class
    counts = torch.zeros(classes, dtype=torch.int64, device=label_dist.device)  # test images
    for xb, yb in chunks(max(1, EVAL_IMAGES // (runs * models))):
        out = fn(*state, xb)  # (R, models, B, classes)
        loss += F.nll_loss(out.permute(0, 3, 1, 2), yb.expand(runs, models, -1),
                           reduction="none").sum(2)
        right = (out.argmax(3) == yb).to(dtype)  # (R, models, B)
        correct += right @ F.one_hot(yb, classes).to(dtype)
        counts += torch.bincount(yb, minlength=classes)
    model.train()
    total = int(counts.sum())
    per_class = correct / counts.clamp_min(1).to(dtype)
    local_acc = (label_dist * per_class).sum(-1).mean(-1)  # (R, n) with (R, 1 or n) models
    return (correct.sum(-1) / total).mean(1), (loss / total).mean(1), local_acc


def train(cfg: RunConfig, data: Data, device: str | torch.device = "cpu",
          force_fedavg: bool = False) -> TrainResult:
    """Train one run (a bundle of one)."""
    return train_bundle([cfg], data, device, force_fedavg=force_fedavg)[0]


def _check_bundle(cfgs: Sequence[RunConfig]) -> None:
    if not cfgs:
        raise ValueError("a bundle needs at least one run")
    keys = {bundle_key(c) for c in cfgs}
    if len(keys) > 1:
        raise ValueError(f"the runs of a bundle must share fednorm.config.bundle_key; these "
                         f"{len(cfgs)} runs have {len(keys)} different keys")


def train_bundle(
    cfgs: Sequence[RunConfig], data: Data, device: str | torch.device = "cpu",
    on_finish: Callable[[int, TrainResult], None] | None = None, force_fedavg: bool = False,
    resume: ResumeStore | None = None, size: int | None = None,
) -> list[TrainResult]:
    """Train the runs ``cfgs`` together; ``on_finish(i, result)`` is called the moment run i
    finishes (diverged, or at the last step). Returns the results in the order of ``cfgs``.
    The models take the data's floating dtype (float32; float64 for exact comparisons).
    ``resume``: where the bundle's state is saved between rounds, and continued from when a
    saved state of these runs exists (fednorm.fl.resume); a run that had finished before is
    handed to ``on_finish`` again at once.

    ``size``: at most this many runs train together (the bundle in consecutive parts, one after
    the other; None: all at once). When the device runs out of memory, the runs still training
    are split in two halves that continue from the bundle's last resume point (or step 0) one
    after the other, each split again if it does not fit either; a run that does not fit alone
    raises. A part's resume point is its own file (:meth:`ResumeStore.part`)."""
    _check_bundle(cfgs)
    fit = _Fitting(cfgs, data, torch.device(device), on_finish, force_fedavg)
    store, saved = resume, None
    if resume is not None:
        # these very runs split off the bundle in an earlier attempt (the others finished):
        # their own resume point is newer than the bundle's
        split_off = resume.part(cfgs)
        saved = split_off.load(cfgs) if split_off.path.exists() else None
        if saved is None:
            saved = resume.load(cfgs)
        else:
            store = split_off
    ids = list(range(len(cfgs)))
    if size is None or size >= len(cfgs):
        fit.train(ids, store, saved)
    else:
        for start in range(0, len(cfgs), size):
            fit.part(ids[start:start + size], resume, saved)
    for finished in (resume, store):  # the whole bundle's, and the split-off part's
        if finished is not None:
            finished.purge()
    return fit.done()


@dataclass
class _Fitting:
    """Parts of a bundle trained one after the other, split in halves while they do not fit
    the device's memory (:func:`train_bundle`)."""

    cfgs: Sequence[RunConfig]
    data: Data
    device: torch.device
    on_finish: Callable[[int, TrainResult], None] | None
    force_fedavg: bool
    results: dict[int, TrainResult] = field(default_factory=dict)  # the runs finished

    def finished(self, i: int, result: TrainResult) -> None:
        self.results[i] = result
        if self.on_finish is not None:
            self.on_finish(i, result)

    def done(self) -> list[TrainResult]:
        return [self.results[i] for i in range(len(self.cfgs))]

    def part(self, ids: list[int], store: ResumeStore | None, saved: dict | None) -> None:
        """Train the runs ``ids``, a part of a bundle whose resume point is ``store`` and
        saved state ``saved``: from the part's own resume point, else from the part of
        ``saved`` that holds them."""
        cfgs = [self.cfgs[i] for i in ids]
        own = store.part(cfgs) if store is not None else None
        own_saved = own.load(cfgs) if own is not None else None
        self.train(ids, own, own_saved if own_saved is not None else restrict(saved, cfgs))

    def train(self, ids: list[int], store: ResumeStore | None, saved: dict | None) -> None:
        cfgs = [self.cfgs[i] for i in ids]
        try:
            _train_together(cfgs, self.data, self.device,
                            lambda j, result: self.finished(ids[j], result),
                            self.force_fedavg, store, saved)
            return
        except Exception as err:  # only running out of memory is handled
            if not out_of_memory(err) or len(ids) == 1:
                raise
            log.warning("%d runs together do not fit the memory of %s (%s); training them in "
                        "two halves", len(ids), self.device, str(err).splitlines()[0])
        release_memory(self.device)  # outside the except block: its frames are gone
        # the runs that finished before are done; the others continue from the last save
        latest = store.load(cfgs) if store is not None else None
        left = [i for i in ids if i not in self.results]
        for half in (left[:len(left) // 2], left[len(left) // 2:]):
            self.part(half, store, latest)
        if store is not None:
            store.purge()


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


def restrict(saved: dict | None, cfgs: Sequence[RunConfig]) -> dict | None:
    """The resume point ``saved`` of a bundle cut down to the runs ``cfgs`` among those still
    training in it: what a part of the bundle continues from (runs in the order of
    ``saved``)."""
    if saved is None:
        return None
    runs, want = saved["header"]["runs"], [c.identity() for c in cfgs]
    positions = [r for r, j in enumerate(saved["active"]) if runs[j] in want]
    keep = torch.tensor(positions, dtype=torch.long)
    loss_sum = saved["loss_sum"]
    return {**saved, "active": [saved["active"][r] for r in positions],
            "trainer": _Trainer.select_state(saved["trainer"], keep),
            "loss_sum": loss_sum[keep] if isinstance(loss_sum, Tensor) else loss_sum}


def _train_together(
    cfgs: Sequence[RunConfig], data: Data, device: torch.device,
    on_finish: Callable[[int, TrainResult], None], force_fedavg: bool,
    resume: ResumeStore | None, saved: dict | None,
) -> list[TrainResult]:
    """Train the runs ``cfgs`` in lock-step, from step 0 or from the resume point ``saved``
    (of these runs or a bundle that held them)."""
    cfg, saved = cfgs[0], restrict(saved, cfgs)
    data = hold_out(data, cfg.val_fraction).to(device)  # val_fraction: a bundle_key field
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)  # model initialization, as the run alone would have it
        models.append(build_model(c, data.n_classes).to(device, data.dtype))
    # the runs still training, in the order of the trainer's run dimension
    active = list(range(len(cfgs))) if saved is None else _saved_order(saved, cfgs)
    going = [cfgs[i] for i in active]
    parts = [partition(data.train_y.cpu(), c.partition, c.n_clients, c.heterogeneity, c.seed)
             for c in going]
    seeds = [c.seed for c in going]
    batches = training_batches(going, data, parts)
    trainer = make_trainer(going, [models[i] for i in active], normalizer_for(cfg), batches,
                           force_fedavg)
    if cfg.record_dynamics and trainer.layers:  # a bundle_key field: all runs or none
        trainer.dynamics = Dynamics([la.key for la in trainer.layers], cfg.dynamics_window,
                                    len(going), device)
    if cfg.fbn_init == "first_batch" and cfg.normalizer == "fbn" and saved is None:
        trainer.calibrate()
    # The normalization error is measured on separate draws of the clients' batches (their own
    # stream), so measuring never changes the training trajectory. Under attack the reference is
    # the union of the honest clients' batches (the first n - f): what a robust server can at
    # best recover. In memory the probe's images are not augmented; streamed from disk
    # (ImageNet-1K) they are cropped and flipped as training images are, with the draws of the
    # probe's own stream (its batches measure the statistics of training-like batches).
    honest = cfg.n_clients - (cfg.f if cfg.attack != "none" else 0)
    probed = [p[:honest] for p in parts]
    probe = (data.batches(probed, cfg.batch_size, seeds, rng.PROBE)
             if isinstance(data, StreamedImages) else
             ClientBatches(data.train_x, data.train_y, probed, cfg.batch_size, seeds, rng.PROBE))
    loop = _Loop(cfgs, models, data, trainer, probe, on_finish, active, resume)
    loop.label_dist = label_distributions(data, parts)
    return loop.run(saved)


def _saved_order(saved: dict, cfgs: Sequence[RunConfig]) -> list[int]:
    """The indices into ``cfgs`` of a resume point's runs still training, in its order."""
    runs = [c.identity() for c in cfgs]
    return [runs.index(saved["header"]["runs"][j]) for j in saved["active"]]


def label_distributions(data: Data, parts: Sequence[Sequence[Tensor]]) -> Tensor:
    """(R, n, classes): the fraction of each class in each client's training data, per run."""
    y = data.train_y
    return torch.stack([torch.stack([
        torch.bincount(y[idx.to(y.device)], minlength=data.n_classes).to(data.dtype)
        / max(len(idx), 1) for idx in run_parts]) for run_parts in parts])


def training_batches(cfgs: Sequence[RunConfig], data: Data,
                     parts: Sequence[Sequence[Tensor]]) -> ClientBatches:
    """The bundle's training sampler: each client's batches from its part of ``data``, augmented
    as the runs' ``augment`` says (fednorm.data.augment.augment_for); images on disk
    (ImageNet-1K) are decoded, cropped and flipped in its worker processes
    (fednorm.data.imagenet.StreamedBatches; fednorm.config allows no other augmentation)."""
    cfg = cfgs[0]
    if isinstance(data, StreamedImages):
        return data.batches(parts, cfg.batch_size, [c.seed for c in cfgs])
    return ClientBatches(data.train_x, data.train_y, parts, cfg.batch_size,
                         [c.seed for c in cfgs], rng.SAMPLE,
                         augment_for(cfg.augment, cfg.crop_padding))


class _Loop:
    """The evaluation schedule of a bundle: train between evaluation points, record every run
    still going, finish and drop the runs that diverged."""

    def __init__(self, cfgs, models, data, trainer, probe, on_finish, active, store) -> None:
        self.cfgs, self.cfg, self.data = cfgs, cfgs[0], data
        self.trainer, self.probe = trainer, probe
        self.results = [TrainResult(model=m) for m in models]
        self.active = list(active)  # bundle index of each run still training
        self.on_finish = on_finish or (lambda i, result: None)
        self.store: ResumeStore | None = store
        self.started = self.last_time = time.perf_counter()
        self.first_step = 0  # where this process started (a resumed bundle: not 0)

    def run(self, saved: dict | None = None) -> list[TrainResult]:
        """Train from step 0, or from the resume point ``saved`` (fednorm.fl.resume)."""
        cfg, trainer = self.cfg, self.trainer
        if saved is None:
            self.record(0, torch.full((trainer.runs,), math.nan, device=self.data.device))
            loss_sum, since = 0.0, 0
        else:
            loss_sum, since = self.restore(saved)
        for first in range(self.first_step, cfg.steps, cfg.local_steps):
            if self.store is not None:  # between rounds: a save when due, a stop when asked
                self.store.between_rounds(first, partial(self.snapshot, first, loss_sum, since))
            loss_sum = loss_sum + trainer.round(first)
            since += cfg.local_steps
            step = first + cfg.local_steps
            if step // cfg.eval_every == first // cfg.eval_every and step != cfg.steps:
                continue
            # the only host syncs: at evaluation points
            going = self.record(step, loss_sum / since)
            self.progress(step, since)
            if not going:
                return self.done()
            loss_sum, since = 0.0, 0
        self.finish(list(range(trainer.runs)))
        return self.done()

    def done(self) -> list[TrainResult]:
        """Every run's files are written: the resume point has served."""
        if self.store is not None:
            self.store.purge()
        return self.results

    def snapshot(self, step: int, loss_sum: Tensor | float, since: int) -> dict:
        """Everything :meth:`restore` needs to continue before the round from ``step``: the
        rows so far, a finished run's final parameters, the trainer's state, the training loss
        summed since the last evaluation point."""
        assert self.store is not None
        results = [{"rows": r.rows, "layer_rows": r.layer_rows, "dynamics_rows": r.dynamics_rows,
                    "status": r.status,
                    "model": None if i in self.active else r.model.state_dict()}
                   for i, r in enumerate(self.results)]
        return {"header": self.store.header(self.cfgs), "step": step, "steps": self.cfg.steps,
                "active": self.active, "results": results, "trainer": self.trainer.state_dict(),
                "loss_sum": loss_sum, "since": since}

    def restore(self, saved: dict) -> tuple[Tensor | float, int]:
        """Continue from a resume point (the trainer was built for its runs still training):
        rows, finished runs (handed to ``on_finish`` again), state; returns the training loss
        summed since the last evaluation point and over how many steps."""
        runs = [c.identity() for c in self.cfgs]
        for j, (identity, res) in enumerate(zip(saved["header"]["runs"], saved["results"],
                                                strict=True)):
            if identity not in runs:  # finished before, not asked for again
                continue
            i = runs.index(identity)
            result = self.results[i]
            result.rows, result.layer_rows = res["rows"], res["layer_rows"]
            result.dynamics_rows, result.status = res["dynamics_rows"], res["status"]
            if j not in saved["active"]:
                result.model.load_state_dict(res["model"])
                self.on_finish(i, result)
        self.trainer.load_state_dict(saved["trainer"])
        self.first_step = saved["step"]
        log.info("resumed at step %d of %d (%d runs training) from %s", saved["step"],
                 saved["steps"], len(self.active), self.store.path if self.store else "")
        loss_sum = saved["loss_sum"]
        if isinstance(loss_sum, Tensor):
            loss_sum = loss_sum.to(self.data.device)
        return loss_sum, saved["since"]

    def record(self, step: int, train_loss: Tensor) -> bool:
        """Append an evaluation row to every active run; finish and drop those that diverged.
        False when no run is left."""
        trainer = self.trainer
        if trainer.normalizer.static:  # HeteroFL: the statistics from one pass, then the test
            trainer.static_statistics(self.data.train_x)
        # the BN layers of a global model (FedBN, SiloBN: the clients keep their statistics)
        measured = [] if "stats" in trainer.normalizer.local else trainer.layers
        # Hybrid BN's fresh statistics of the current global model, for this test alone
        with trainer.evaluation_statistics(step):
            acc, test_loss, local_acc = evaluate_chunks(
                trainer, partial(self.data.chunks, "test"), self.label_dist)
            val_acc = acc.new_full((trainer.runs,), math.nan)  # no validation set held out
            if self.data.val_y is not None:
                val_acc, _, _ = evaluate_chunks(trainer, partial(self.data.chunks, "val"),
                                                self.label_dist)
            mean_err = var_err = acc.new_zeros(trainer.runs, 0)  # no BN layer: nothing to measure
            if measured:
                central = union_statistics(trainer, self.probe.sample(step)[0],
                                           rng.fold(self.probe.keys, step))
                mean_err, var_err = layer_errors(trainer, central)
        trained = torch.isfinite(train_loss) | (step == 0)
        test_loss = torch.where(trained, test_loss, math.nan)
        acc = torch.where(torch.isfinite(test_loss), acc, math.nan)  # argmax over NaN: no acc
        val_acc = torch.where(torch.isfinite(test_loss), val_acc, math.nan)
        names = [layer.key for layer in measured]
        dynamics = ({q: v.tolist() for q, v in trainer.dynamics.take().items()}
                    if trainer.dynamics is not None else None)
        accuracies = acc.tolist()
        self.mean_accuracy = _mean([a for a in accuracies if math.isfinite(a)])
        local_acc = torch.where(torch.isfinite(test_loss), local_acc, math.nan)
        columns = zip(self.active, accuracies, test_loss.tolist(), train_loss.tolist(),
                      mean_err.tolist(), var_err.tolist(), local_acc.tolist(), val_acc.tolist(),
                      strict=True)
        for r, (i, a, tl, trl, me, ve, la, va) in enumerate(columns):
            result = self.results[i]
            result.layer_rows += [{"step": step, "layer": name, "mean_error": m, "var_error": v}
                                  for name, m, v in zip(names, me, ve, strict=True)]
            # the dynamics sum over layers: the L1 norm over every statistic of the network
            totals = dict.fromkeys(QUANTITIES, math.nan)
            if dynamics is not None:
                per_layer = [dynamics[q][r] for q in QUANTITIES]
                result.dynamics_rows += [{"step": step, "layer": name,
                                          **dict(zip(QUANTITIES, values, strict=True))}
                                         for name, *values in zip(trainer.dynamics.keys, *per_layer,
                                                                  strict=True)]
                totals = {q: sum(v) for q, v in zip(QUANTITIES, per_layer, strict=True)}
            result.rows.append(dict(
                step=step, test_accuracy=a, test_loss=tl, train_loss=trl,
                norm_error_mean=_mean(me), norm_error_var=_mean(ve), **totals,
                comm_rounds=trainer.communication_rounds(step), local_test_accuracy=la,
                val_accuracy=va))
        ok = torch.isfinite(test_loss) & trained
        if bool(ok.all()):
            return True
        diverged = (~ok).nonzero().flatten().tolist()
        for r in diverged:
            self.results[self.active[r]].status = "diverged"
        self.finish(diverged)
        kept = ok.nonzero().flatten()
        self.active = [self.active[r] for r in kept.tolist()]
        if not self.active:
            return False
        trainer.keep(kept)
        self.probe = self.probe.select(kept)
        self.label_dist = self.label_dist[kept]
        return True

    def finish(self, positions: list[int]) -> None:
        """Hand the runs at these positions of the trainer to ``on_finish``, with their model."""
        self.trainer.write_back()
        for r in positions:
            i = self.active[r]
            self.on_finish(i, self.results[i])

    def progress(self, step: int, since: int) -> None:
        """One log line per evaluation point, so that a user watching a long job sees it move."""
        cfg, now = self.cfg, time.perf_counter()
        images = len(self.active) * cfg.n_clients * cfg.batch_size * since
        rate = images / max(now - self.last_time, 1e-9)
        left = (now - self.started) * (cfg.steps - step) / max(step - self.first_step, 1)
        log.info("step %d/%d  runs going %d/%d  mean accuracy %.3f  %.0f images/s  %.0f s left",
                 step, cfg.steps, len(self.active), len(self.results), self.mean_accuracy, rate,
                 left)
        self.last_time = now


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
