"""A process on the SSH host seen as a Channel: its stdin, and its stdout+stderr merged.

Every process starts through a small POSIX sh wrapper that prints a marker with its own pid and
then `exec`s the command, which keeps that pid. Closing the channel alone would not stop the
process: without a terminal, sshd only closes its pipes, and a command's background jobs (the
persistent shell gives every command its own process group) would run on. So `close()` opens a
second exec channel that walks the host's process table from that pid and stops the whole tree
(SIGTERM, a short grace, SIGKILL), as the local backend does on this machine.

`recv` waits on the channel's readiness, never on paramiko's channel timeout: that timeout is
the one `send` runs under (the connection's timeout, set once), and a reader setting it (0 for
a poll) while another thread sends a large reply would make that send give up half-way.

Unlike Docker's and Modal's exec APIs, sshd runs the command through the user's login shell,
whose rc files may print first: so the pid comes behind a marker, and anything before it is
dropped.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import select
import time

import paramiko

from ..base import BackendError, Channel
from ..remote import kill_tree_argv
from ..shell import shell_quote
from .connection import HOUSEKEEPING_SECONDS, PROBE_AFTER_SECONDS, SSHConnection, request_exec

log = logging.getLogger(__name__)


def launch_command(argv: list[str], cwd: str | None, nonce: str) -> str:
    """The exec request: whatever the login shell is, /bin/sh prints the pid marker and execs."""
    script = f"printf '%s%s %s\\n' __HERALD_PID_ {nonce} \"$$\"; "
    if cwd:
        script += f"cd -- {shell_quote(cwd)} 2>/dev/null; "
    script += "exec " + " ".join(shell_quote(arg) for arg in argv)
    return "exec /bin/sh -c " + shell_quote(script)


def kill_tree(conn: SSHConnection, pid: int, grace: float, then: str = "") -> None:
    """Stop `pid` and its descendants on the host, with the script the exec-API backends use;
    then run the shell command `then`, if any, in the same exec."""
    argv = kill_tree_argv(pid, grace)
    command = " ".join(shell_quote(arg) for arg in argv) + (f"; {then}" if then else "")
    conn.exec(command, timeout=grace + HOUSEKEEPING_SECONDS, answer=HOUSEKEEPING_SECONDS)


class SSHChannel(Channel):
    """A process started on the host over an exec channel of `conn`."""

    def __init__(self, conn: SSHConnection, argv: list[str], *, cwd: str | None, grace: float) -> None:
        if not argv:
            raise ValueError("argv is empty: name the program to run")
        self._conn = conn
        self._grace = grace
        nonce = secrets.token_hex(6)
        self._marker = f"__HERALD_PID_{nonce} ".encode()
        self._head = b""  # output before the pid marker has been seen whole
        self.pid = 0  # the process's pid on the host once its marker came; -1: it never did
        self._undelivered = False  # a send found the connection already gone: nothing reached the host
        self._closed = False
        self._heard = time.monotonic()  # when output last came
        self._chan = conn.session()
        try:
            self._chan.set_combine_stderr(True)
            request_exec(self._chan, launch_command(argv, cwd, nonce))  # its pid marker says it started
            self._chan.settimeout(conn.timeout)  # a send waiting for the peer's window gives up then
        except (paramiko.SSHException, EOFError, OSError, BackendError) as exc:
            self._chan.close()
            raise BackendError(f"could not start {argv[0]!r} on {conn.target}: {exc or type(exc).__name__}") from None

    def send(self, data: bytes) -> None:
        # E.g. a kill, or a warm child's run, after a long silence: is anyone there? Asked after
        # the data, which then leaves first (starting the probe's thread takes a while), unless
        # the send may have to wait for the host (its window is too small for the data).
        silent = time.monotonic() - self._heard > PROBE_AFTER_SECONDS
        if silent and len(data) > self._chan.out_window_size:
            self._conn.probe()
        if self._chan.closed or not self._conn.alive():
            self._undelivered = True
            return  # the next recv reports the end
        try:
            self._chan.sendall(data)
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the process or the connection is gone; the next recv reports it
        if silent:
            self._conn.probe()  # (no second probe if the first one is under way)

    def _raw_recv(self, timeout: float) -> bytes | None:
        try:
            ready = self._ready(timeout)
            data: bytes = self._chan.recv(1 << 16) if ready else b""
        except TimeoutError:
            ready = False
        except (OSError, EOFError, paramiko.SSHException):
            return b""
        if not ready:
            if time.monotonic() - self._heard > PROBE_AFTER_SECONDS:
                self._conn.probe()
            return None
        self._heard = time.monotonic()
        self._conn.last_heard = self._heard
        return data

    def _ready(self, timeout: float) -> bool:
        """Output (or its end) is there to read, within `timeout` seconds."""
        chan = self._chan
        if chan.recv_ready() or chan.eof_received or chan.closed:
            return True
        if timeout <= 0:
            return False
        poller = select.poll()  # not select(): a busy process may hold fds past FD_SETSIZE
        poller.register(chan.fileno(), select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def _fill_until_pid(self, deadline: float) -> bool:
        """Read into the head buffer until the wrapper's pid marker is parsed; False on timeout.

        Output after the marker stays buffered for recv, and nothing is read past it, so
        waiting for the pid (as close() does) never waits for the process to say more.
        """
        while not self.pid:
            at = self._head.find(self._marker)
            end = self._head.find(b"\n", at) if at >= 0 else -1
            if end >= 0:
                field = self._head[at + len(self._marker) : end]
                self.pid = int(field) if field.isdigit() else -1
                self._head = self._head[end + 1 :]
                break
            chunk = self._raw_recv(deadline - time.monotonic())
            if chunk is None:
                return False
            if chunk == b"":  # ended before its marker (the wrapper failed): recv shows why
                self.pid = -1
                break
            self._head += chunk
        return True

    def recv(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        if not self.pid and not self._fill_until_pid(deadline):
            return None
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._raw_recv(deadline - time.monotonic())

    @property
    def undelivered(self) -> bool:
        return self._undelivered

    @property
    def returncode(self) -> int | None:
        if self._chan.eof_received and not self._chan.status_event.is_set():
            self._chan.status_event.wait(1.0)  # the status arrives just after the end of output
        return self._chan.exit_status if self._chan.status_event.is_set() else None

    def _await_pid(self, timeout: float) -> int:
        self._fill_until_pid(time.monotonic() + timeout)
        return self.pid

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self.close_with("")

    def close_with(self, then: str) -> bool:
        """Stop the process tree unless it is known to be over. A process that has just ended
        sends its end of output, then its exit status: seeing the first without the second
        yet is a race, not a sign of life, so the status is waited for briefly rather than a
        kill command sent. Every wait here has a deadline (HOUSEKEEPING_SECONDS on a silent
        host, after which the connection is given up): closing never hangs on a dead link.

        `then`: a shell command to run on the host after the kill, in the kill's own exec (the
        owner's housekeeping, one exec instead of two). True when it ran there; False when no
        kill was needed (or possible): the caller runs it itself if it still wants to."""
        if self._closed:
            return False
        self._closed = True
        try:
            chan = self._chan
            if not chan.status_event.is_set() and chan.eof_received:
                chan.status_event.wait(HOUSEKEEPING_SECONDS)
            if not chan.status_event.is_set() and self._conn.alive():
                pid = self._await_pid(min(HOUSEKEEPING_SECONDS, self._conn.timeout))
                if pid > 0:
                    kill_tree(self._conn, pid, self._grace, then)
                    return bool(then)
                if not self.pid:  # no pid within the deadline: the host is silent
                    self._conn.abandon("a process did not report its pid")
        except BackendError as exc:
            log.warning("could not stop process %s on %s: %s", self.pid, self._conn.target, exc)
        finally:
            with contextlib.suppress(Exception):
                self._chan.close()
        return False
