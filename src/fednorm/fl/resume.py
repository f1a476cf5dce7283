"""Resume points: a bundle's whole training state, saved between rounds, so that a job killed
by a time limit, a preemption or Ctrl-C continues where it stopped instead of from step 0.

Not Snakemake's ``checkpoint`` rules (which re-evaluate the DAG): a *resume point* is one file
per bundle, owned by a :class:`ResumeStore` in the spirit of torchtitan's checkpoint manager:
the bundle's driver (fednorm.fl.train.train_bundle) hands it a snapshot between rounds and the
store decides whether to write it (every ``every_s`` seconds, or at once when SIGTERM / SIGUSR1
arrived, after which it raises :class:`Interrupted`); at start the driver asks it for a saved
state, and deletes it once when the bundle is done. The driver never touches files, the store
never touches tensors' meaning.

What a snapshot holds (fednorm.fl.train, FORMAT 2): ``header`` (format, code, the bundle's
runs), ``slices``: the ``state_dict()`` of each :class:`fednorm.fl.state.BundleState` still to
train (the one training now, then the parts of an out-of-memory split waiting their turn; every
run's parameters, statistics, momenta, clients' own parts, dynamics' sums, rows so far, loss
summed since the last evaluation point and the next step), and ``finished``: each run already
finished, with its rows, status and final parameters. The random draws need nothing: they are
counter-based (fednorm.rng), a pure function of (seed, step). So a resumed run computes exactly
what it would have computed uninterrupted (bit-identical on CPU; tests/fl/test_resume.py).

A saved state is used only when it was written for the same runs by the same code
(``code``: the package version and git commit) in the same format; otherwise, or when the file
is unreadable, the store says why in the log and the bundle trains from step 0. Files are
written atomically (fednorm.io): a kill during a save leaves the previous resume point.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fednorm.config import CHECKPOINT_MINUTES, RunConfig
from fednorm.io import atomic_path

FORMAT = 2  # bump when a snapshot's layout changes: older files are refused, never misread
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # SLURM: SIGTERM at the limit, --signal=USR1@s before
log = logging.getLogger("fednorm.resume")


class Interrupted(Exception):  # a request to stop, not an error
    """A signal told the job to stop; the bundle's state was saved at ``step``."""

    def __init__(self, signum: int, step: int, path: Path) -> None:
        super().__init__(f"stopped by signal {signal.Signals(signum).name} at step {step}; "
                         f"state saved to {path}: run again to resume")
        self.signum, self.step, self.path = signum, step, path

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention for a process ended by a signal


@dataclass
class ResumeStore:
    """The resume point of one bundle at ``path``; ``every_s``: seconds between saves."""

    path: Path
    every_s: float = 60.0 * CHECKPOINT_MINUTES
    code: str = ""  # the code version a saved state must match
    signalled: int | None = field(default=None, init=False)
    last_save: float = field(default=0.0, init=False)  # time.monotonic() of the last save

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.last_save = time.monotonic()  # the interval counts from the bundle's start
        if not self.every_s > 0:
            raise ValueError(f"ResumeStore: every_s must be > 0 seconds, got {self.every_s!r}")

    def header(self, cfgs: Sequence[RunConfig]) -> dict[str, Any]:
        """What a saved state must match to be resumed: format, code and the bundle's runs."""
        return {"format": FORMAT, "code": self.code, "runs": [c.identity() for c in cfgs]}

    def load(self, cfgs: Sequence[RunConfig]) -> dict[str, Any] | None:
        """The state saved by this code for a bundle that holds these runs, or None (nothing
        saved, or a saved state refused: the log says why). A run of the saved bundle may be
        missing: finished before the kill or since the save (its files exist, so it is not
        requested again)."""
        if not self.path.exists():
            return None
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as err:  # any unreadable file: start over
            return self._refuse(f"unreadable ({type(err).__name__}: {err})")
        if not isinstance(saved, dict) or "header" not in saved:
            return self._refuse("not a fednorm resume point")
        want, got = self.header(cfgs), saved["header"]
        for key, what in (("format", "format"), ("code", "code version")):
            if got.get(key) != want[key]:
                return self._refuse(f"written by another {what} ({got.get(key)!r}, this is "
                                    f"{want[key]!r})")
        runs = got.get("runs", [])
        if any(r not in runs for r in want["runs"]):
            return self._refuse("written for other runs (another config)")
        others = sum(r not in want["runs"] for part in saved["slices"] for r in part["runs"])
        if others:  # finished since the save (their files exist): not requested
            log.info("resume point %s: %d of its runs still training are not requested; the "
                     "others continue", self.path, others)
        return saved  # the driver selects the requested runs (fednorm.fl.state.BundleState.select)

    def _refuse(self, reason: str) -> None:
        log.warning("resume point %s refused: %s; training from step 0", self.path, reason)

    def between_rounds(self, step: int, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Called by the training loop before the round from ``step``: saves ``snapshot()``
        when the interval has passed or a signal arrived (then raises :class:`Interrupted`).
        Costs one clock read otherwise."""
        signum = self.signalled
        if signum is None and time.monotonic() - self.last_save < self.every_s:
            return
        self.save(snapshot())
        if signum is not None:
            raise Interrupted(signum, step, self.path)

    def save(self, state: dict[str, Any]) -> None:
        with atomic_path(self.path) as tmp:
            torch.save(state, tmp)
        self.last_save = time.monotonic()
        log.info("resume point saved at step %d: %s", state["step"], self.path)

    def purge(self) -> None:
        """The bundle finished: its resume point is no longer needed (called once, by the
        driver: fednorm.fl.train.train_bundle)."""
        self.path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """Within the block, SIGTERM and SIGUSR1 ask for a save and a stop at the next round
        boundary instead of killing the process (only in the main thread, where Python
        delivers signals; elsewhere the block changes nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: object) -> None:
            self.signalled = signum

        previous = {s: signal.signal(s, handler) for s in SIGNALS}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

