"""The fork server's clients' side (child/zygote.py is the server): ask it for a child, read its
answer, learn how the child exits, let the child's pid go. Stdlib only, Python >= 3.8.

One protocol, two ways to be linked to a zygote (ZygoteLink):
- Herald in host mode (runtime/sandbox/host/zygote.py): one socket shared by every child of the
  Runtime's zygote, read by a thread of Herald's;
- the supervisor of an in-backend run (ZygoteConnection): a connection of its own to the
  backend's listening zygote, for its one child, read by the supervisor's poll loop.
The messages are wire/frames.py's ("Fork server socket"), encoded and guarded by wire/guards.py.
"""

from __future__ import annotations

import array
import select
import signal
import socket
import sys
import time
from typing import Dict, Optional, Tuple

from ..wire import frames
from ..wire import guards as wire
from .trees import host_pid

FORK_REPLY_TIMEOUT = 5.0  # a listening zygote that does not answer this fast is treated as gone
LOST_STATUS = -signal.SIGKILL  # an exit nobody could report: the zygote died first
MAX_MESSAGE = 65536


class ForkError(OSError):
    """The fork server could not give a child: spawn an interpreter instead."""


class ZygoteLink:
    """A client's link to a fork server, as a forked child's handle (procs/child.py) uses it.
    A child is named by the zygote's pid for it (`ns_pid`: its pid in the zygote's PID
    namespace under bwrap; `our_pid` is ours)."""

    watch: Optional[int] = None  # an fd the owner's loop polls and hands to `readable`, if any

    def fork(self, sandbox_dir: str, fds: Tuple[int, int, int, int]) -> int:
        """A new child running the sandbox bootstrap in `sandbox_dir` on `fds` (stdout, stderr,
        control read, control write); the zygote's pid for it. ForkError if it cannot."""
        raise NotImplementedError

    def our_pid(self, ns_pid: int) -> Optional[int]:
        """Our pid of the zygote's child `ns_pid` (None: not visible from here)."""
        return ns_pid

    def status(self, ns_pid: int) -> Optional[int]:
        """Its exit status once reported (as Popen.returncode), else None."""
        raise NotImplementedError

    def wait(self, ns_pid: int, timeout: Optional[float]) -> Optional[int]:
        """Its status once reported within `timeout` seconds, else None."""
        raise NotImplementedError

    def gone(self) -> bool:
        """The zygote can no longer report anything."""
        raise NotImplementedError

    def release(self, ns_pid: int) -> None:
        """The client is done with the child: the zygote may reap it (its pid is reused after)."""
        raise NotImplementedError

    def readable(self) -> None:
        """`watch` has something to read."""

    def leave(self) -> None:
        """The child's handle is done with this link."""


def send_fork(sock: socket.socket, sandbox_dir: str, fds: Tuple[int, int, int, int]) -> None:
    """The fork request, with the child's four fds; ForkError if it could not be sent."""
    request = wire.encode_op({"op": frames.FORK, "sandbox_dir": sandbox_dir})
    try:
        sock.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    except OSError as exc:
        raise ForkError("could not reach the fork server: %s" % exc) from None


def forked_pid(reply: frames.FromZygote) -> int:
    """The zygote's pid for the child its answer names; ForkError if it refused."""
    if reply["op"] == frames.ERROR:
        raise ForkError("the fork server refused: %s" % reply["message"])
    if reply["op"] != frames.FORKED:
        raise ForkError("the fork server refused: it sent %s" % reply["op"])
    return reply["pid"]


def send_reap(sock: socket.socket, ns_pid: int) -> None:
    """Let the zygote reap `ns_pid`; a zygote that is gone has let it go already."""
    try:
        sock.send(wire.encode_op({"op": frames.REAP, "pid": ns_pid}))
    except OSError:
        pass


class ZygoteConnection(ZygoteLink):
    """A connection of its own to a listening zygote (child/zygote_inbackend.py), for one child:
    the zygote reports that child's exit on it, and kills and reaps whatever of it is left when
    the connection ends. `namespaced`: the zygote runs in a PID namespace of its own (bwrap) and
    names the child by its pid there; ours is found below the process that listened."""

    def __init__(self, sock: socket.socket, namespaced: bool = False) -> None:
        self.sock: Optional[socket.socket] = sock
        self.namespaced = namespaced
        self.statuses: Dict[int, int] = {}

    def fork(self, sandbox_dir: str, fds: Tuple[int, int, int, int]) -> int:
        sock = self._connected()
        sock.settimeout(FORK_REPLY_TIMEOUT)
        send_fork(sock, sandbox_dir, fds)
        try:
            data = sock.recv(MAX_MESSAGE)
            if not data:
                raise ForkError("the fork server refused: it went away")
            ns_pid = forked_pid(wire.from_zygote(data))
        except (OSError, ValueError) as exc:  # a timeout, or an answer that is not one (FrameError)
            raise ForkError(str(exc) or type(exc).__name__) from None
        sock.setblocking(False)
        self.watch = sock.fileno()
        return ns_pid

    def our_pid(self, ns_pid: int) -> Optional[int]:
        if not self.namespaced:
            return ns_pid
        # The socket's peer is the process that listened: bwrap's, exec'd from the zygote that
        # bound it (child/zygote_inbackend.py); the child is below it.
        try:
            creds = self._connected().getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERCRED"), 12)  # noqa: B009
        except OSError:
            return None
        return host_pid(int.from_bytes(creds[0:4], sys.byteorder), ns_pid)

    def status(self, ns_pid: int) -> Optional[int]:
        return self.statuses.get(ns_pid)

    def wait(self, ns_pid: int, timeout: Optional[float]) -> Optional[int]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while ns_pid not in self.statuses and self.sock is not None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            if select.select([self.sock], [], [], remaining)[0]:
                self.readable()
        return self.statuses.get(ns_pid)

    def gone(self) -> bool:
        return self.sock is None

    def readable(self) -> None:
        if self.sock is None:
            return
        try:
            data = self.sock.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the zygote died: its orphan is init's now, and its exit is unknown to us
            self.leave()
            return
        try:
            message = wire.from_zygote(data)
        except wire.FrameError:
            return
        if message["op"] == frames.EXIT:
            self.statuses[message["pid"]] = message["status"]

    def release(self, ns_pid: int) -> None:
        if self.sock is not None:
            send_reap(self.sock, ns_pid)
        self.leave()

    def leave(self) -> None:
        # Our connection ending tells the zygote to kill and reap whatever of ours is left.
        if self.sock is not None:
            self.sock.close()
            self.sock, self.watch = None, None

    def _connected(self) -> socket.socket:
        if self.sock is None:
            raise ForkError("the fork server's connection is closed")
        return self.sock
