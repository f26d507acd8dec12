"""Bounded capture of a stream: keep a head and a tail in memory, spill the whole text to a file.

The model only ever sees `limit` bytes (head 40 %, tail 60 %, a marker between them), but nothing is
lost: once the stream passes the limit, everything it produced is written to a spill file whose
path goes into the result. The spill file itself is bounded by `spill_limit`, and all the spill
files of one run together by its SpillBudget (spill.py), so a runaway script cannot fill the disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ._sandbox.toolcore.capping import HEAD_SHARE, cut_text
from .spill import SpillBudget, current_budget

__all__ = ["HEAD_SHARE", "CappedCapture"]


class CappedCapture:
    def __init__(
        self,
        limit: int,
        *,
        spill_dir: Path | None,
        spill_name: str,
        spill_limit: int = 256 * 1024 * 1024,
        tee: Callable[[bytes], None] | None = None,
        budget: SpillBudget | None = None,
    ) -> None:
        self.limit = max(0, limit)
        # Sees every byte as it arrives, before any cap: a live view (herald exec) shows it all.
        self.tee = tee
        self.head_size = int(self.limit * HEAD_SHARE)
        self.tail_size = self.limit - self.head_size
        self.total = 0
        self._buffer = bytearray()  # everything, until the limit is passed
        self._head = b""
        self._tail = bytearray()
        self._spill_dir = spill_dir
        self._spill_name = spill_name
        self._spill_limit = spill_limit
        # Without one given, the budget of the run this capture works for (a tool call's).
        self._budget = budget if budget is not None else current_budget()
        self._overflowing = False
        self._spill_fd: int | None = None
        self._spilled = 0
        self.spill_path: Path | None = None
        self.spill_truncated = False

    @property
    def overflowed(self) -> bool:
        return self.total > self.limit

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self.tee is not None:
            self.tee(data)
        self.total += len(data)
        if not self._overflowing:
            if self.total <= self.limit:
                self._buffer += data
                return
            everything = bytes(self._buffer) + data
            self._buffer = bytearray()
            self._overflowing = True
            self._head = everything[: self.head_size]
            self._open_spill()
            self._write_spill(everything)
            self._tail = bytearray(everything[self.head_size :])
        else:
            self._write_spill(data)
            self._tail += data
        if len(self._tail) > max(self.tail_size * 2, 65536):
            del self._tail[: len(self._tail) - self.tail_size]

    def skip(self, count: int) -> None:
        """`count` bytes went by that nobody kept (a backend-mode supervisor's shell keeps the first
        8 MiB of a command's output and its tail, past a cap of at most 4 MiB, so this capture is
        past its limit already): counted; the spill file ends before them; what is fed next is the tail."""
        if count <= 0:
            return
        self.total += count
        self.spill_truncated = True
        self._tail.clear()

    def _open_spill(self) -> None:
        if self._spill_dir is None:
            return
        if self._budget is not None and self._budget.full():
            self.spill_truncated = True
            return
        self._spill_dir.mkdir(parents=True, exist_ok=True)
        path = self._spill_dir / self._spill_name
        self._spill_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.spill_path = path

    def _write_spill(self, data: bytes) -> None:
        if self._spill_fd is None or self.spill_truncated:
            return
        room = self._spill_limit - self._spilled
        if len(data) > room:
            data = data[:room]
            self.spill_truncated = True
        if self._budget is not None and data:
            granted = self._budget.take(len(data))
            if granted < len(data):
                data = data[:granted]
                self.spill_truncated = True
        if data:
            os.write(self._spill_fd, data)
            self._spilled += len(data)

    def close(self) -> None:
        if self._spill_fd is not None:
            os.close(self._spill_fd)
            self._spill_fd = None

    def text(self, what: str = "output") -> str:
        """The capped text: everything if it fit, else head + marker + tail."""
        if not self.overflowed:
            return self._buffer.decode("utf-8", "replace")
        tail = bytes(self._tail[-self.tail_size :]) if self.tail_size else b""
        where = f"; full {what} in {self.spill_path}" if self.spill_path else ""
        if self.spill_truncated:
            where += (
                f" (spill file cut at {self._spilled:,} bytes)"
                if self.spill_path
                else "; not spilled: the run's spill cap is reached"
            )
        return cut_text(self._head, tail, self.total, self.head_size, self.tail_size, what, where)
