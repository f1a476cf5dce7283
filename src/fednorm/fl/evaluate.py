"""Evaluation of a bundle's runs at an evaluation point: every run's test accuracy, loss and
accuracy on its clients' own label distributions, in one vectorized pass per chunk of test
images (runs and, with personalized BN, clients are tensor dimensions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, vmap

from fednorm.data import Arrays
from fednorm.data.arrays import slices
from fednorm.data.imagenet import StreamedImages
from fednorm.fl.engine import _Trainer, over_runs

EVAL_IMAGES = 4096  # images of all runs together in one evaluation forward
# The images of an evaluation, asked ``size`` at a time: an iterable of (x, y) chunks
Chunks = Callable[[int], Iterable[tuple[Tensor, Tensor]]]


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

    The model tested is the global one; with personalized BN (FedBN, SiloBN: the state's
    ``local`` parts that the server never averages; Hybrid BN's d, which it averages, is
    tested as the global model's) there is none, and client i's model is the averaged
    weights with its own BN parts: then the accuracy and NLL are the mean over the clients'
    models on the (global) test set. The local accuracy is sum_c p_i(c) acc_i(c) averaged over
    the clients i, with p_i = ``label_dist`` (R, n, classes) the label distribution of client
    i's training data and acc_i(c) the accuracy of client i's model (or the global one) on the
    test images of class c: its test set drawn from its own label distribution, in
    expectation.
    """
    runs = trainer.runs
    fn, state, models = _models(trainer)
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
    trainer.model.train()
    total = int(counts.sum())
    per_class = correct / counts.clamp_min(1).to(dtype)
    local_acc = (label_dist * per_class).sum(-1).mean(-1)  # (R, n) with (R, 1 or n) models
    return (correct.sum(-1) / total).mean(1), (loss / total).mean(1), local_acc


def _models(trainer: _Trainer) -> tuple[Callable, tuple, int]:
    """What tests the runs, in eval mode: ``fn(*state, x)`` gives (R, models, B, classes),
    ``models`` 1 (the global model) or n (personalized BN: each client's own model)."""
    model, runs = trainer.model, trainer.runs
    local = {k: own for k, own in trainer.state.local.items() if k not in trainer.kept}
    model.eval()
    if local:
        def clients(p, s, own, xb):  # one run: (n, B, classes), a model per client
            return vmap(lambda o: functional_call(model, {**p, **s, **o}, (xb,)))(own)

        return (over_runs(clients, runs, in_dims=(0, 0, 0, None)),
                (trainer.state.params, trainer.state.stats, local), trainer.n)
    fn = over_runs(lambda p, s, xb: functional_call(model, {**p, **s}, (xb,)).unsqueeze(0),
                   runs, in_dims=(0, 0, None))
    return fn, (trainer.state.params, trainer.state.stats), 1


@torch.no_grad()
def domain_accuracies(trainer: _Trainer, chunks: Chunks, domain_of: Tensor,
                      domain_dist: Tensor) -> Tensor:
    """Every run's accuracy on each domain's test images, (R, D) (feature shift): the images
    ``chunks(size)`` hands out, in order, image j of domain ``domain_of[j]``. Through the
    global model; under personalized BN (a model per client) the clients' accuracies on the
    domain weighted by the share of it each holds, sum_i p_i(d) acc_i(d) / sum_i p_i(d), p_i =
    ``domain_dist`` (R, n, D): a client that holds one domain is tested on that domain alone
    (FedBN's evaluation), as its own label distribution weighs the local accuracy."""
    runs = trainer.runs
    fn, state, models = _models(trainer)
    n_domains, dtype = domain_dist.shape[-1], domain_dist.dtype
    correct = domain_dist.new_zeros(runs, models, n_domains)
    start = 0
    for xb, yb in chunks(max(1, EVAL_IMAGES // (runs * models))):
        ids = domain_of[start:start + len(yb)]
        start += len(yb)
        right = (fn(*state, xb).argmax(3) == yb).to(dtype)  # (R, models, B)
        correct += right @ F.one_hot(ids, n_domains).to(dtype)
    trainer.model.train()
    counts = torch.bincount(domain_of, minlength=n_domains).clamp_min(1).to(dtype)
    accuracy = correct / counts  # (R, models, D)
    if models == 1:
        return accuracy[:, 0]
    held = domain_dist.sum(1)  # (R, D)
    return (domain_dist * accuracy).sum(1) / held.clamp_min(1e-12)


def label_distributions(data: Arrays | StreamedImages, parts: Sequence[Sequence[Tensor]]) -> Tensor:
    """(R, n, classes): the fraction of each class in each client's training data, per run."""
    y = data.train_y
    return torch.stack([torch.stack([
        torch.bincount(y[idx.to(y.device)], minlength=data.n_classes).to(data.dtype)
        / max(len(idx), 1) for idx in run_parts]) for run_parts in parts])


def domain_distributions(data: Arrays, parts: Sequence[Sequence[Tensor]]) -> Tensor:
    """(R, n, D): the fraction of each domain in each client's training data, per run."""
    domain = data.train_domain
    return torch.stack([torch.stack([
        torch.bincount(domain[idx.to(domain.device)], minlength=len(data.domains)).to(data.dtype)
        / max(len(idx), 1) for idx in run_parts]) for run_parts in parts])
