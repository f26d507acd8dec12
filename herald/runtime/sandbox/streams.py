"""A child's output on its way to the run's captures: the kernel sentinel that ends a cell's
output is cut out without holding back live output, and pipes are drained without blocking."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...capture import CappedCapture


@dataclass
class OutputStream:
    """One output stream of a child, fed to its capture; with a sentinel (kernel runs), the
    capture ends where the sentinel appears."""

    fd: int
    capture: CappedCapture
    sentinel: bytes | None = None
    seen: bool = False
    open: bool = True
    pending: bytes = field(default=b"")

    def feed(self, data: bytes) -> None:
        if self.sentinel is None or self.seen:
            if not self.seen:
                self.capture.feed(data)
            return
        buf = self.pending + data
        at = buf.find(self.sentinel)
        if at >= 0:
            self.capture.feed(buf[:at])
            self.seen = True
            self.pending = b""
            return
        # Hold back only a tail that could be the start of the sentinel, so live output of a
        # kernel cell is not delayed until the cell ends.
        keep = _sentinel_prefix_at_end(buf, self.sentinel)
        if len(buf) > keep:
            self.capture.feed(buf[: len(buf) - keep])
            buf = buf[len(buf) - keep :]
        self.pending = buf

    def finish(self) -> None:
        """The stream ended before its sentinel (the kernel died): what was held back is output."""
        if self.pending:
            self.capture.feed(self.pending)
            self.pending = b""


def _sentinel_prefix_at_end(buf: bytes, sentinel: bytes) -> int:
    """Length of the longest end of `buf` that is a proper prefix of `sentinel`."""
    if sentinel[:1] not in buf[-(len(sentinel) - 1) :]:
        return 0  # the usual case: no byte that could start the sentinel
    for size in range(min(len(buf), len(sentinel) - 1), 0, -1):
        if sentinel.startswith(buf[-size:]):
            return size
    return 0


def interrupted(fd: int) -> bool:
    """Whether the interrupt pipe `fd` was written to (then emptied), without waiting."""
    try:
        if not os.read(fd, 64):
            return False
    except (BlockingIOError, OSError):
        return False
    drain_fd(fd)
    return True


def drain_fd(fd: int) -> None:
    """Read a non-blocking fd until it is empty."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
