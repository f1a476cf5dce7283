"""Training batches of images streamed from disk (ImageNet-1K: :mod:`fednorm.data.imagenet`):
the draws of :class:`fednorm.fl.batches.ClientBatches`, the images decoded, cropped and flipped
(:func:`fednorm.data.imagenet.decode_crop_flip`) in DataLoader worker processes, off the
training thread.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from fednorm import rng
from fednorm.data.imagenet import (
    DRAWS,
    ImageFiles,
    StreamedImages,
    decode_crop_flip,
    normalize,
)
from fednorm.fl.batches import ClientBatches

# The normalization-error probe's decoding processes: it decodes one step per evaluation point
PROBE_WORKERS = 2


class _Steps(torch.utils.data.Dataset):
    """Item ``(t, j)``: piece j of ``pieces`` of step t's images, uint8 (k, 3, s, s), and their
    labels (k,), the step's images taken run-major as :meth:`ClientBatches.indices` lists them;
    decoded in the worker that fetches it."""

    def __init__(self, batches: StreamedBatches, pieces: int = 1) -> None:
        self.batches, self.pieces = copy.copy(batches), pieces
        self.batches._ahead = None  # a worker needs the draws and the files, not the workers

    def __getitem__(self, item: tuple[int, int]) -> tuple[Tensor, Tensor]:
        step, piece = item
        b = self.batches
        idx = b.indices(step).flatten()  # (R * n*b,), on the CPU
        u = b.augment_draws(step, DRAWS).flatten(0, 1)  # a row per image of idx
        lo, hi = piece * len(idx) // self.pieces, (piece + 1) * len(idx) // self.pieces
        x = np.stack([decode_crop_flip(b.files.paths[k], uk, b.image_size)
                      for k, uk in zip(idx[lo:hi].tolist(), u[lo:hi].tolist(), strict=True)])
        return torch.from_numpy(x), b.files.labels[idx[lo:hi]]


class StreamedBatches(ClientBatches):
    """:class:`fednorm.fl.batches.ClientBatches` over image files: what is drawn is decided
    exactly as there, only the images are read from disk.

    The draw: client i of run r at step t takes the b positions ``floor(u * |part_i|)`` of
    ``u = rng.uniform(fold(fold(run_key(seed_r), SAMPLE), t), (n, b))`` in its index list
    ``parts[r][i]`` (the partition of the labels, fednorm.data.partition, as for in-memory data);
    image k of the step gets the 5 uniforms ``rng.uniform(fold(fold(run_key(seed_r), AUGMENT),
    t), (n*b, 5))[k]``: its crop box and flip (:func:`decode_crop_flip`). Every draw is a pure
    function of (seed, step, position), so the batches do not depend on the number of workers,
    on which worker decodes which step, or on the other runs of the bundle. ``stream``
    (rng.SAMPLE: the training batches; rng.PROBE: the normalization-error probe's, whose crops
    and flips come from a stream of their own too: :class:`ClientBatches`) picks the draws.

    :meth:`sample` returns step t's ``x`` (R, n*b, 3, s, s) normalized in ``dtype``, on ``device``,
    and ``y`` (R, n*b). ``read_ahead`` (training): ``workers`` processes (torch's DataLoader)
    each decode a whole step, ``prefetch`` steps each, while the engine trains; a step requested out
    of order (calibration's step -1, a restart) starts the read-ahead again from it. Without
    (the probe, one step per evaluation point): the step requested is decoded alone, split
    among the ``workers``, nothing beyond it. ``workers = 0`` decodes in the calling thread.
    """

    on_device = False  # decoded on the host, by step number: the engine hands it Python steps

    def __init__(self, files: ImageFiles, parts: Sequence[Sequence[Tensor]], batch_size: int,
                 seeds: Sequence[int], image_size: int, workers: int = 4, prefetch: int = 2,
                 device: torch.device | str = "cpu", stream: int = rng.SAMPLE,
                 read_ahead: bool = True, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(None, files.labels, parts, batch_size, seeds, stream)
        self.files, self.image_size, self.device = files, image_size, torch.device(device)
        self.dtype = dtype
        self.workers, self.prefetch, self.read_ahead = workers, prefetch, read_ahead
        self._ahead: Iterator[tuple[Tensor, Tensor]] | None = None
        self._next = 0  # the step that self._ahead yields next

    def _loader(self, items: Iterator[tuple[int, int]] | list[tuple[int, int]],
                pieces: int) -> Iterator[tuple[Tensor, Tensor]]:
        extra = {"prefetch_factor": self.prefetch} if self.workers else {}
        return iter(torch.utils.data.DataLoader(_Steps(self, pieces), batch_size=None,
                                                sampler=items, num_workers=self.workers,
                                                **extra))

    def sample(self, step: int) -> tuple[Tensor, Tensor]:
        shape = (len(self.keys), (self.n if self.participants is None else self.participants.m)
                 * self.b)
        if not self.read_ahead:
            pieces = max(1, self.workers)
            x, y = map(torch.cat, zip(*self._loader([(step, j) for j in range(pieces)],
                                                    pieces), strict=True))
        else:
            if self._ahead is None or self._next != step:  # the steps in order, from ``step``
                self._ahead = self._loader(((t, 0) for t in range(step, 2**62)), 1)
            x, y = next(self._ahead)
            self._next = step + 1
        x, y = x.view(*shape, *x.shape[1:]), y.view(shape)
        return normalize(x.to(self.device, non_blocking=True), self.dtype), y.to(self.device)

    def select(self, runs: Tensor) -> StreamedBatches:
        out = super().select(runs.cpu())  # the draws live on the CPU, with the workers
        out._ahead = None  # its workers would read the dropped runs too
        return out


def streamed_batches(data: StreamedImages, parts: Sequence[Sequence[Tensor]], batch_size: int,
                     seeds: Sequence[int], stream: int = rng.SAMPLE) -> StreamedBatches:
    """The sampler of ``data``'s training files' batches: read ahead by its ``workers``
    processes for training (rng.SAMPLE); for the probe (rng.PROBE), each step requested decoded
    alone by at most PROBE_WORKERS."""
    if stream == rng.SAMPLE:
        return StreamedBatches(data.train, parts, batch_size, seeds, data.image_size,
                               data.workers, device=data.device, dtype=data.dtype)
    return StreamedBatches(data.train, parts, batch_size, seeds, data.image_size,
                           min(data.workers, PROBE_WORKERS), device=data.device,
                           stream=stream, read_ahead=False, dtype=data.dtype)
