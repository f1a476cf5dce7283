"""Atomic file output: nothing half-written is ever left where a reader (or Snakemake) looks.

Every writer goes through :func:`atomic_path`: the content is written to a temporary file in the
same directory, then renamed over the target (``os.replace`` is atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` if the block succeeds.

    The temporary file keeps the target's suffix, so libraries that choose a format from the
    suffix (matplotlib, pandas) behave as they would on the target.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=target.suffix)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(target: str | os.PathLike[str], text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_csv(target: str | os.PathLike[str], frame: Any) -> None:
    """Write a pandas DataFrame as CSV without the index."""
    with atomic_path(target) as tmp:
        frame.to_csv(tmp, index=False)
