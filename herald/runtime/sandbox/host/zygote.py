"""Herald's side of the fork server (_sandbox/child/zygote.py): start it, ask it for children, learn
how they exit.

Policy: one zygote per (interpreter, environment, isolation), shared by every Runtime of this
process that asks for the same and closed when the last of them lets go. An isolated zygote runs
in its own PID namespace (isolation.py): it names its children by their pid there, by which
Herald asks after them and lets them go, and which Herald translates to this machine's pid
(`NSpid` in /proc) to signal them. The fork request, its answer and the child's handle are
procs/forking.py's and procs/child.py's, shared with the supervisor of an in-backend run.
A fork costs a fraction of a
millisecond where starting an interpreter costs ~35 ms. If the zygote cannot start or dies, the
caller falls back to spawning an interpreter (host/child.py), and the next request starts a new
zygote; a run never fails because the fork server did.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
from collections.abc import Mapping

from .... import spawner
from ...._sandbox.procs.forking import LOST_STATUS, MAX_MESSAGE, ForkError, ZygoteLink, forked_pid, send_fork, send_reap
from ...._sandbox.procs.trees import alive, host_pid
from ...._sandbox.wire import frames
from ...._sandbox.wire import guards as wire
from ....tools.stubgen import RUNTIME_PACKAGE
from ..isolation import Isolation, shared_root
from ..sandboxdir import shared_runtime_package

LOADER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    f"from {RUNTIME_PACKAGE}.child.zygote import main; main()"
)
READY_TIMEOUT = 30.0
REPLY_TIMEOUT = 10.0
log = logging.getLogger(__name__)


class ForkServerError(ForkError):
    """The fork server could not give a child; spawn an interpreter instead."""


class ForkServer(ZygoteLink):
    """The zygote's process and its one socket, shared by every child it forks for us: a thread
    reads the socket; children are named by the zygote's pid for them (ZygoteLink)."""

    def __init__(self, python: str, env: Mapping[str, str], isolation: Isolation | None = None) -> None:
        self.python = python
        self.isolation = isolation or Isolation("none")
        self._dir = str(shared_runtime_package(shared_root()).parent)  # visible inside the isolation
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = spawner.popen(
                self.isolation.command([python, "-I", "-B", "-c", LOADER, self._dir, str(theirs.fileno())]),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True, env=dict(env), cwd=self._dir,
            )
        except OSError as exc:
            self._sock.close()
            raise ForkServerError(f"could not start the fork server with {python}: {exc}") from None
        finally:
            theirs.close()
        self._request = threading.Lock()  # one fork request in flight at a time
        self._cond = threading.Condition()
        self._replies: list[frames.ForkedOp | frames.ErrorOp] = []
        self._statuses: dict[int, int] = {}  # by the zygote's pid for the child
        self._ready = False
        self._zygote: int | None = None  # this machine's pid of the zygote, once it is ready
        self.dead: str | None = None
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="herald-forkserver", daemon=True)
        self._reader.start()

    # -- the zygote's messages -------------------------------------------------------------

    def _read_loop(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except OSError as exc:
                data, why = b"", f"its socket failed: {exc}"
            else:
                why = "it exited"
            if not data:
                with self._cond:
                    self.dead = self.dead or why
                    self._cond.notify_all()
                return
            try:
                message = wire.from_zygote(data)
            except wire.FrameError:
                continue
            zygote = self._zygote_pid(message) if message["op"] == frames.READY else None
            with self._cond:
                if message["op"] == frames.EXIT:
                    self._statuses[message["pid"]] = message["status"]
                elif message["op"] == frames.READY:
                    self._zygote, self._ready = zygote, True
                else:
                    self._replies.append(message)
                self._cond.notify_all()

    def _zygote_pid(self, ready: frames.ZygoteReadyOp) -> int | None:
        """This machine's pid of the zygote, from the pid its READY names (None if unknown)."""
        pid = ready["pid"]
        return host_pid(self.proc.pid, pid) if self.isolation.mode == "bwrap" else pid

    # -- the link a forked child's handle uses (procs/forking.py) ---------------------------

    def gone(self) -> bool:
        """The zygote has died, whether or not its socket has told the reader thread yet."""
        return self.dead is not None or (self._zygote is not None and not alive(self._zygote))

    @property
    def alive(self) -> bool:
        return not self.gone() and self.proc.poll() is None

    def fork(self, sandbox_dir: str, fds: tuple[int, int, int, int]) -> int:
        with self._request:
            with self._cond:
                if not self._cond.wait_for(lambda: self._ready or self.dead is not None, READY_TIMEOUT):
                    raise ForkServerError(f"the fork server did not start within {READY_TIMEOUT:.0f} s")
                if self.dead is not None:
                    raise ForkServerError(f"the fork server is gone ({self.dead})")
            send_fork(self._sock, sandbox_dir, fds)
            with self._cond:
                if not self._cond.wait_for(lambda: bool(self._replies) or self.dead is not None, REPLY_TIMEOUT):
                    raise ForkServerError("the fork server did not answer")
                if not self._replies:
                    raise ForkServerError(f"the fork server is gone ({self.dead})")
                reply = self._replies.pop(0)
        return forked_pid(reply)

    def our_pid(self, ns_pid: int) -> int | None:
        return host_pid(self.proc.pid, ns_pid) if self.isolation.mode == "bwrap" else ns_pid

    def status(self, ns_pid: int) -> int | None:
        with self._cond:
            if ns_pid in self._statuses:
                return self._statuses[ns_pid]
            # A forked child dies with its zygote (child/bootstrap.py: die_with_parent; under bwrap
            # its PID namespace goes too), a moment after it on a loaded machine: one still
            # running then is lost all the same (a run handed to it would be killed), so a
            # waiting one is replaced, not used.
            return LOST_STATUS if self.gone() else None

    def wait(self, ns_pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: ns_pid in self._statuses or self.dead is not None, timeout)
        return self.status(ns_pid)

    def release(self, ns_pid: int) -> None:
        with self._cond:
            self._statuses.pop(ns_pid, None)
        send_reap(self._sock, ns_pid)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


# -- the pool: one zygote per (interpreter, environment) ---------------------------------------

Key = tuple[str, tuple[tuple[str, str], ...], Isolation]
_servers: dict[Key, ForkServer] = {}
_users: dict[Key, int] = {}
_failed: set[Key] = set()
_pool_lock = threading.Lock()


class Lease:
    """A Runtime's claim on the shared fork server for its interpreter and environment. The
    zygote starts on first use, is replaced when it has died, and closes with its last lease."""

    def __init__(self, python: str, env: Mapping[str, str], isolation: Isolation | None = None) -> None:
        self.python = python
        self.env = dict(env)
        self.isolation = isolation or Isolation("none")
        self._key: Key = (python, tuple(sorted(self.env.items())), self.isolation)
        self._closed = False
        with _pool_lock:
            _users[self._key] = _users.get(self._key, 0) + 1

    def server(self) -> ForkServer | None:
        """The live fork server, or None when none can be started here (then spawn)."""
        with _pool_lock:
            if self._closed or self._key in _failed:
                return None
            server = _servers.get(self._key)
            if server is not None and server.alive:
                return server
            if server is not None:  # died: replace it, and let the old one go in the background
                threading.Thread(target=server.close, name="herald-forkserver-close", daemon=True).start()
            try:
                server = _servers[self._key] = ForkServer(self.python, self.env, self.isolation)
            except ForkServerError:
                _servers.pop(self._key, None)
                _failed.add(self._key)
                log.warning("no fork server for %s: sandbox children will be spawned", self.python, exc_info=True)
                return None
            return server

    def close(self) -> None:
        with _pool_lock:
            if self._closed:
                return
            self._closed = True
            _users[self._key] -= 1
            if _users[self._key] > 0:
                return
            del _users[self._key]
            server = _servers.pop(self._key, None)
        if server is not None:
            server.close()
