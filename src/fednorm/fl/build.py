"""The one builder of a bundle's trainer, used by training (fednorm.fl.train), the GPU check
(fednorm.gpucheck.throughput) and the tests: each run's model (the global seed set to its seed
first, as the run alone would have it), its clients' parts, the training sampler, and the
round schedule its method and keys call for (fednorm.fl.round)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fednorm import rng
from fednorm.config import RunConfig
from fednorm.data import Arrays
from fednorm.data.augment import augment_for
from fednorm.data.imagenet import StreamedImages
from fednorm.data.partition import partition
from fednorm.fl.batches import ClientBatches
from fednorm.fl.graphed import Graphed
from fednorm.fl.precision import autocast_dtype
from fednorm.fl.round import DSGD, FedAvg, StackedClients
from fednorm.fl.streamed import streamed_batches
from fednorm.fl.trainer import Trainer
from fednorm.models import build_model
from fednorm.norms import Normalizer, normalizer_for

# A data set in memory (Arrays) or on disk (ImageNet-1K: StreamedImages)
Data = Arrays | StreamedImages


def model_for(cfg: RunConfig, data: Data, device: torch.device) -> nn.Module:
    """A run's initialized model on ``device`` in the data's dtype."""
    torch.manual_seed(cfg.seed)  # model initialization, as the run alone would have it
    return build_model(cfg, data.n_classes).to(device, data.dtype)


def partitions(cfgs: Sequence[RunConfig], data: Data) -> list[list[Tensor]]:
    """Each run's clients' parts of the training images (under feature shift, by domain)."""
    domains = getattr(data, "train_domain", None)
    return [partition(data.train_y.cpu(), c.partition, c.n_clients, c.heterogeneity, c.seed,
                      None if domains is None else domains.cpu())
            for c in cfgs]


def training_batches(cfgs: Sequence[RunConfig], data: Data,
                     parts: Sequence[Sequence[Tensor]]) -> ClientBatches:
    """The bundle's training sampler: each client's batches from its part of ``data``, augmented
    as the runs' ``augment`` says (fednorm.data.augment.augment_for); images on disk
    (ImageNet-1K) are decoded, cropped and flipped in its worker processes
    (fednorm.fl.streamed.StreamedBatches; fednorm.config allows no other augmentation)."""
    cfg = cfgs[0]
    if isinstance(data, StreamedImages):
        return streamed_batches(data, parts, cfg.batch_size, [c.seed for c in cfgs])
    return ClientBatches(data.train_x, data.train_y, parts, cfg.batch_size,
                         [c.seed for c in cfgs], rng.SAMPLE,
                         augment_for(cfg.augment, cfg.crop_padding))


def schedule_for(cfg: RunConfig, normalizer: Normalizer) -> type[Trainer]:
    """DSGD's single fused pass when E = 1; FedAvg's stacked clients otherwise, and whenever
    the server needs each client's update (``attack_updates``), the clients' own state
    (partial participation, parts a client keeps) or each client's own gradient (a method's
    ``per_client``: parts a client keeps or hooks that need each client's gradient; gradient
    clipping, a weighted average); the stacked-client rounds for layers that take
    client-stacked weights."""
    if normalizer.stacked_weights:
        return StackedClients
    per_client = (cfg.local_steps > 1 or cfg.attack_updates or cfg.participation < 1
                  or normalizer.per_client or cfg.clip_norm is not None or cfg.weighted_average)
    return FedAvg if per_client else DSGD


def make_trainer(
    cfgs: Sequence[RunConfig], models: Sequence[nn.Module], normalizer: Normalizer,
    batches: ClientBatches, compile: dict[str, Any] | None = None,
    autocast: torch.dtype | None = None, cuda_graph: str = "off",
    schedule: type[Trainer] | None = None,
) -> Trainer:
    """The trainer of the runs ``cfgs`` (they share a bundle key) with their initialized
    ``models``: :func:`schedule_for`'s (or ``schedule``'s) rounds; ``compile``: torch.compile's
    arguments for the gradient steps (None: eager); ``autocast``: their autocast dtype
    (fednorm.fl.precision; None: none); ``cuda_graph`` (``execution.cuda_graph``: ``auto`` or
    ``off``): the local steps captured as CUDA graphs on a CUDA device, eagerly elsewhere."""
    trainer = (schedule or schedule_for(cfgs[0], normalizer))(cfgs, models, normalizer,
                                                               batches)
    trainer.compile, trainer.autocast = compile, autocast
    trainer.graphed = Graphed(cuda_graph, trainer.dropout_keys.device)
    return trainer


def build(cfgs: Sequence[RunConfig], data: Data,
          parts: Sequence[Sequence[Tensor]] | None = None, *,
          compile: dict[str, Any] | None = None, precision: str = "float32",
          cuda_graph: str = "off", device: torch.device | None = None) -> Trainer:
    """The trainer of a bundle of the runs ``cfgs`` on ``data``, as a
    training job builds it; ``parts``: the clients' parts (:func:`partitions` when None);
    ``precision``: the gradient steps' autocast (fednorm.fl.precision); the rest as
    :func:`make_trainer`; ``device``: the models' (the data's when None)."""
    device = data.device if device is None else device
    models = [model_for(c, data, device) for c in cfgs]
    parts = partitions(cfgs, data) if parts is None else parts
    return make_trainer(cfgs, models, normalizer_for(cfgs[0]),
                        training_batches(cfgs, data, parts), compile=compile,
                        autocast=autocast_dtype(precision), cuda_graph=cuda_graph)
