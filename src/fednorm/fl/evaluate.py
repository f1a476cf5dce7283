"""Evaluation of a bundle's runs at an evaluation point: every run's test accuracy, loss and
accuracy on its clients' own label distributions, in one vectorized pass per chunk of test
images (runs and, with personalized BN, clients are tensor dimensions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, vmap

from fednorm.data import Arrays
from fednorm.data.arrays import slices
from fednorm.data.imagenet import StreamedImages
from fednorm.fl.step import over_runs
from fednorm.fl.trainer import Trainer

EVAL_IMAGES = 4096  # images of all runs together in one evaluation forward
# The images of an evaluation, requested ``size`` at a time: an iterable of (x, y) chunks
Chunks = Callable[[int], Iterable[tuple[Tensor, Tensor]]]


def evaluate(trainer: Trainer, x: Tensor, y: Tensor, label_dist: Tensor) -> Evaluation:
    """:func:`evaluate_chunks` on the images ``x`` and labels ``y`` held in memory."""
    return evaluate_chunks(trainer, partial(slices, x, y), label_dist)


class Evaluation(NamedTuple):
    """Every run's test accuracy (fraction), mean NLL and accuracy on its clients' own label
    distributions, (R,) each; and each domain's accuracy, (R, D) (D = 0 without domains)."""

    accuracy: Tensor
    loss: Tensor
    local_accuracy: Tensor
    domain_accuracy: Tensor


@torch.no_grad()
def evaluate_chunks(trainer: Trainer, chunks: Chunks, label_dist: Tensor,
                    domain_of: Tensor | None = None, domain_dist: Tensor | None = None
                    ) -> Evaluation:
    """Every run's :class:`Evaluation`, in eval mode, on the test images ``chunks(size)`` hands
    out in order in chunks of at most ``size`` (x, y): sliced from tensors in memory
    (Arrays.chunks), or decoded from disk (fednorm.data.imagenet.StreamedImages.chunks). The
    sums (loss, right answers per class and domain, images per class and domain) are
    accumulated over the chunks, in one pass.

    The model tested is the global one; with personalized BN (FedBN, SiloBN: the state's
    ``local`` parts that the server never averages; Hybrid BN's d, which it averages, is
    tested as the global model's) there is none, and client i's model is the averaged
    weights with its own BN parts: then the accuracy and NLL are the mean over the clients'
    models on the (global) test set. The local accuracy is sum_c p_i(c) acc_i(c) averaged over
    the clients i, with p_i = ``label_dist`` (R, n, classes) the label distribution of client
    i's training data and acc_i(c) the accuracy of client i's model (or the global one) on the
    test images of class c: its test set drawn from its own label distribution, in
    expectation. Feature shift (``domain_of``: image j's domain, in the chunks' order): each
    domain's accuracy through the global model, or under personalized BN the clients'
    accuracies on it weighted by the share of it each holds, sum_i q_i(d) acc_i(d) / sum_i
    q_i(d), q_i = ``domain_dist`` (R, n, D): a client that holds one domain is tested on that
    domain alone (FedBN's evaluation), as its own label distribution weighs the local
    accuracy.
    """
    runs = trainer.runs
    fn, state, models = _models(trainer)
    classes, dtype = label_dist.shape[-1], label_dist.dtype
    n_domains = 0 if domain_dist is None else domain_dist.shape[-1]
    cells = classes * max(n_domains, 1)  # (class, domain) pairs: one count of each
    loss = label_dist.new_zeros(runs, models)
    correct = label_dist.new_zeros(runs, models, cells)  # right answers per class and domain
    counts = torch.zeros(cells, dtype=torch.int64, device=label_dist.device)  # test images
    start = 0
    for xb, yb in chunks(max(1, EVAL_IMAGES // (runs * models))):
        out = fn(*state, xb)  # (R, models, B, classes)
        loss += F.nll_loss(out.permute(0, 3, 1, 2), yb.expand(runs, models, -1),
                           reduction="none").sum(2)
        cell = yb if domain_of is None else yb * n_domains + domain_of[start:start + len(yb)]
        start += len(yb)
        right = (out.argmax(3) == yb).to(dtype)  # (R, models, B)
        correct += right @ F.one_hot(cell, cells).to(dtype)
        counts += torch.bincount(cell, minlength=cells)
    trainer.model.train()
    total = int(counts.sum())
    by_class = correct.view(runs, models, classes, -1).sum(-1)
    per_class = by_class / counts.view(classes, -1).sum(-1).clamp_min(1).to(dtype)
    local_acc = (label_dist * per_class).sum(-1).mean(-1)  # (R, n) with (R, 1 or n) models
    by_domain = label_dist.new_zeros(runs, 0)
    if domain_dist is not None:
        per_domain = (correct.view(runs, models, classes, -1).sum(2)
                      / counts.view(classes, -1).sum(0).clamp_min(1).to(dtype))  # (R, m, D)
        by_domain = (per_domain[:, 0] if models == 1 else
                     (domain_dist * per_domain).sum(1) / domain_dist.sum(1).clamp_min(1e-12))
    return Evaluation((by_class.sum(-1) / total).mean(1), (loss / total).mean(1), local_acc,
                      by_domain)


def _models(trainer: Trainer) -> tuple[Callable, tuple, int]:
    """What tests the runs, in eval mode: ``fn(*state, x)`` gives (R, models, B, classes),
    ``models`` 1 (the global model) or n (personalized BN: each client's own model)."""
    model, runs = trainer.model, trainer.runs
    local = trainer.parts.tested_parts(trainer.state)
    model.eval()
    if local:
        def clients(p, s, own, xb):  # one run: (n, B, classes), a model per client
            return vmap(lambda o: functional_call(model, {**p, **s, **o}, (xb,)))(own)

        return (over_runs(clients, runs, in_dims=(0, 0, 0, None)),
                (trainer.state.params, trainer.state.stats, local), trainer.n)
    fn = over_runs(lambda p, s, xb: functional_call(model, {**p, **s}, (xb,)).unsqueeze(0),
                   runs, in_dims=(0, 0, None))
    return fn, (trainer.state.params, trainer.state.stats), 1


def _shares(values: Tensor, count: int, parts: Sequence[Sequence[Tensor]],
            dtype: torch.dtype) -> Tensor:
    """(R, n, count): the fraction of each value 0 .. count - 1 of ``values`` (one per training
    image) in each client's part, per run."""
    return torch.stack([torch.stack([
        torch.bincount(values[idx.to(values.device)], minlength=count).to(dtype)
        / max(len(idx), 1) for idx in run_parts]) for run_parts in parts])


def label_distributions(data: Arrays | StreamedImages, parts: Sequence[Sequence[Tensor]]) -> Tensor:
    """(R, n, classes): the fraction of each class in each client's training data, per run."""
    return _shares(data.train_y, data.n_classes, parts, data.dtype)


def domain_distributions(data: Arrays, parts: Sequence[Sequence[Tensor]]) -> Tensor:
    """(R, n, D): the fraction of each domain in each client's training data, per run."""
    return _shares(data.train_domain, len(data.domains), parts, data.dtype)
