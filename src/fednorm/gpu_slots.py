"""One GPU per training job on a machine with several (or a slot of one: several jobs a GPU).

Snakemake's local executor counts GPUs (``--resources gpu=N`` with each training job asking
for ``gpu=1``) but does not tell a job which GPU is its own (Snakemake issue #281), so without
this every job would train on GPU 0. A job therefore claims the first GPU that no other job
holds: an exclusive ``flock`` on one file per GPU, held while the job trains and released by
the kernel when the file is closed or the process ends (even when it is killed). Under SLURM
each job sees only its own GPU(s) (CUDA_VISIBLE_DEVICES), and a single visible GPU needs no
claim.

Several jobs a GPU (execution.jobs_per_gpu = J): Snakemake's resources are integers, so the
resource ``gpu`` counts slots: each job still asks for ``gpu=1`` and the run gives
``--resources gpu=<GPUs x J>``; a job claims a free slot (J a GPU), and the GPU is that slot's.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / f"fednorm-gpus-{os.getuid()}"


@contextmanager
def claimed_gpu(count: int, lock_dir: Path | None = None, per_gpu: int = 1
                ) -> Iterator[int | None]:
    """Within the block, the index of the GPU of the first of ``count`` x ``per_gpu`` slots
    whose lock file in ``lock_dir`` (default LOCK_DIR) this process could lock, held until
    the block ends; None when every one is held by another job. ``per_gpu`` slots a GPU
    (execution.jobs_per_gpu: that many jobs share it), taken slot by slot across the GPUs (every
    GPU's first slot, then every GPU's second, ...), so that jobs spread over the GPUs before
    they share one; slot 0's file is ``gpu<index>.lock``, slot k's ``gpu<index>.slot<k>.lock``."""
    lock_dir = LOCK_DIR if lock_dir is None else lock_dir
    lock_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(per_gpu):
        for index in range(count):
            name = f"gpu{index}.lock" if slot == 0 else f"gpu{index}.slot{slot}.lock"
            handle = open(lock_dir / name, "a")  # closed below, or by the with
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            with handle:  # closing the file releases the lock
                yield index
            return
    yield None
