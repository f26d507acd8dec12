"""Spill files: how much one run may write to them, and how long they are kept.

A run's spill files (its stdout and stderr, and those of the tool calls it makes, such as a
`terminal` command's) draw on one SpillBudget of `sandbox.max_spill_bytes`: past it, output is
no longer spilled (the in-memory head and tail are kept) and the run's result says so. Tool
calls find their run's budget the way they find its cancel event, in a context variable set
around the call (`charged_to`), so a capture made anywhere below the call is charged to it.
Files older than `sandbox.spill_retention` seconds are removed when a Runtime starts (`sweep`).
"""

from __future__ import annotations

import contextvars
import logging
import os
import stat
import threading
import time
from pathlib import Path

from .scoped import scoped

log = logging.getLogger(__name__)


class SpillBudget:
    """Bytes one run may still write to spill files; thread-safe (its calls run at once)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.used = 0
        self.exhausted = False  # some output was not spilled for want of room
        self._lock = threading.Lock()

    def take(self, size: int) -> int:
        """How many of `size` bytes may be written now (all, some, or none)."""
        with self._lock:
            granted = min(size, self.limit - self.used)
            self.used += granted
            if granted < size:
                self.exhausted = True
            return granted

    def full(self) -> bool:
        """No room is left: a capture about to spill makes no (empty) file; that counts as dropped."""
        with self._lock:
            if self.used < self.limit:
                return False
            self.exhausted = True
            return True


_current: contextvars.ContextVar[SpillBudget | None] = contextvars.ContextVar("herald_spill_budget", default=None)


def charged_to(budget: SpillBudget | None) -> scoped[SpillBudget | None]:
    """Charge spill files made by this thread until the block ends to `budget` (None: as is)."""
    return scoped(_current, budget, keep_on_none=True)


def current_budget() -> SpillBudget | None:
    """The budget of the run whose work this thread is doing now, if any."""
    return _current.get()


def sweep(directory: Path, retention: float, now: float | None = None) -> int:
    """Remove the regular files in `directory` last modified more than `retention` seconds ago
    (0 keeps everything); the number removed. Never raises: a sweep must not stop a start."""
    if retention <= 0:
        return 0
    cutoff = (time.time() if now is None else now) - retention
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0  # no spill directory yet, or not ours to read
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except OSError as exc:  # gone already (another Runtime swept it), or not ours
            log.debug("could not remove spill file %s: %s", entry.path, exc)
    return removed
