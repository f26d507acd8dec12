"""The supervisor's non-blocking plumbing (supervisor/loop.py): byte queues for the fds it writes to,
and the script's tool-call connections. Stdlib only, Python >= 3.8.

Why queues: the supervisor's one loop must never block on a write (to Herald, to a connection,
to the script's control pipe), or a kill frame could wait behind a full pipe.
"""

from __future__ import annotations

import collections
import os
import socket
from typing import Any, Deque

from ..wire.framing import MAX_CONTROL_FRAME_BYTES, FrameBuffer

JOIN_LIMIT = 1 << 16  # uncork joins what waits into one write up to this size


class Sink:
    """A non-blocking fd we write to: data queues here until the fd takes it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.chunks: Deque[Any] = collections.deque()
        self.size = 0
        self.broken = False
        self.corked = False  # frames that belong together wait, to be written as one

    def push(self, data: bytes) -> None:
        if not self.broken and data:
            self.chunks.append(memoryview(data))
            self.size += len(data)
            if len(self.chunks) == 1 and not self.corked:
                self.flush()  # written now if the fd takes it: not a loop turn (a poll) later

    def uncork(self) -> None:
        """Write what waited as one write (one packet for a remote link, not several)."""
        self.corked = False
        if len(self.chunks) > 1 and self.size <= JOIN_LIMIT:  # a backlog is written as it is: no copies
            joined = b"".join(self.chunks)
            self.chunks.clear()
            self.chunks.append(memoryview(joined))
        self.flush()

    def flush(self) -> None:
        while self.chunks:
            head = self.chunks[0]
            try:
                written = os.write(self.fd, head)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.broken = True
                self.chunks.clear()
                self.size = 0
                return
            self.size -= written
            if written < len(head):
                self.chunks[0] = head[written:]
                return
            self.chunks.popleft()


class Conn:
    """One hermes_tools connection from the script (or a process it forked)."""

    def __init__(self, sock: socket.socket, number: int) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.number = number
        self.frames = FrameBuffer(max_first_frame=MAX_CONTROL_FRAME_BYTES)  # the first is its auth frame
        self.out = Sink(self.fd)
        self.authenticated = False
