"""What the SSH backend saw of paths a moment ago, so that the next call need not look again.

The file tools stat, then read or write; the workspace check resolves the path first. So a
read -> patch -> verify asks the same questions about one path several times within
milliseconds. What a call saw (a stat, a read's fstat, the file a write made, where a path
leads) answers the same question for SEEN_SECONDS, as long as no command runs and no process
started on the backend still runs (they could change anything; what is seen while one does is
not kept, since it may change it after the look and end), and nothing changed since the call
that saw it began (`epoch`). Changes made on the host by anything else within that
second are not seen here; where that matters the operation checks again (a pinned path's
REALPATH, files.py).
"""

from __future__ import annotations

import stat as stat_mod
import threading
import time
from collections.abc import Callable

from .sftp import Attrs

SEEN_SECONDS = 1.0
LIMIT = 1024


class Seen:
    """Attributes and resolutions per path; `busy()` tells when commands may be changing things.
    Shares the backend's lock (which `busy` takes too)."""

    def __init__(self, lock: threading.RLock, busy: Callable[[], bool]) -> None:
        self._lock = lock
        self._busy = busy
        self.epoch = 0  # counts changes that make what was seen stale
        self._attrs: dict[str, tuple[float, Attrs | None]] = {}  # None: a look found nothing there
        self._leads: dict[str, tuple[float, str]] = {}  # where paths lead (`realpath`)

    def changed(self, path: str | None) -> int:
        """Something may change `path` (None: anything): forget what was seen there, and what
        calls already under way will see (they started before the change). A write changes a
        file, never where a path leads: only None forgets resolutions."""
        with self._lock:
            self.epoch += 1
            if path is None:
                self._attrs.clear()
                self._leads.clear()
            else:
                self._attrs.pop(path, None)
            return self.epoch

    def saw(self, path: str, attrs: Attrs | None, epoch: int, *, looked: bool = False) -> None:
        """Remember `attrs` at `path`, unless something changed since the call began (`epoch`);
        None forgets the path, or with `looked` remembers that nothing is there."""
        with self._lock:
            if epoch != self.epoch:
                return
            # While a process started here runs it may change the path right after the look,
            # and once it has ended nothing says so: what is seen meanwhile is not kept.
            if (attrs is None and not looked) or self._busy():
                self._attrs.pop(path, None)
                return
            if len(self._attrs) > LIMIT:
                self._attrs.clear()
            self._attrs[path] = (time.monotonic(), attrs)

    def recent(self, path: str) -> tuple[bool, Attrs | None]:
        """(known, attributes) seen at `path` just now; attributes None: nothing was there."""
        with self._lock:
            seen = self._attrs.get(path)
            if seen is None or time.monotonic() - seen[0] > SEEN_SECONDS or self._busy():
                return False, None
            return True, seen[1]

    def regular(self, path: str) -> Attrs | None:
        """A regular file's attributes seen at `path` just now, else None."""
        attrs = self.recent(path)[1]
        return attrs if attrs is not None and stat_mod.S_ISREG(attrs.st_mode) else None

    def leads(self, path: str) -> str | None:
        """Where `path` was seen to lead just now, else None."""
        with self._lock:
            hit = self._leads.get(path)
            if hit is None or time.monotonic() - hit[0] > SEEN_SECONDS or self._busy():
                return None
            return hit[1]

    def saw_lead(self, path: str, resolved: str, epoch: int) -> None:
        with self._lock:
            if epoch != self.epoch or self._busy():  # something could have moved a link since the call began
                return
            if len(self._leads) > LIMIT:
                self._leads.clear()
            self._leads[path] = (time.monotonic(), resolved)
