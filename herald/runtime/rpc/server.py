"""The parent's RPC endpoint: a Unix socket in a private directory, one-time tokens, concurrent calls.

Serving policy: one thread per connection reads a call, runs it and writes the reply, so a call
costs two wake-ups (the call's arrival, the reply's) and no hand-off between threads. A script's
threads that call at once use connections of their own (see _sandbox/client.py); the run's cap
on concurrent calls (`max_concurrency`) is a semaphore shared by every connection of the same
session, and a session may hold at most `max_connections` connections (a script that opens more,
by hand or by forking, has the extra ones closed). Anything malformed closes that one connection
(the server keeps running), as does sending no auth frame within `auth_timeout` seconds of
connecting. `serve_call` is how a call becomes a reply frame, here and for in-backend runs alike.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..._sandbox import frames
from ..._sandbox.client import at_unix_path
from ..._sandbox.protocol import FrameReader, ProtocolError, reply_frame

log = logging.getLogger(__name__)

ACCEPT_RETRY_SECONDS = 0.05
_TRANSIENT_ACCEPT_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED, errno.EINTR}

S = TypeVar("S")
# A handler serves one call: (session, request, keys to echo) -> the encoded reply frame. It
# encodes the reply itself so that what it records (the reply's size) is what was sent.
Handler = Callable[[S, dict[str, Any], tuple[str, ...]], bytes]


def serve_call(handle: Handler[S], session: S, message: dict[str, Any], *, echo: tuple[str, ...] = ("id",)) -> bytes:
    """Run one call and return its reply frame. Never raises: a handler bug becomes an error reply."""
    try:
        return handle(session, message, echo)
    except Exception as exc:  # the handler promises a frame, but never let a bug kill the link
        log.exception("RPC handler failed")
        failed = {"error": {"type": "InternalError", "message": f"Herald failed to run the call: {exc}"}}
        return reply_frame(message, failed, echo=echo)


class _RunLimit:
    """What the connections of one session share: its cap on calls at once, its connection count."""

    def __init__(self, session: object, max_concurrency: int) -> None:
        self.session = session  # held so its id() is not reused while the entry lives
        self.calls = threading.BoundedSemaphore(max_concurrency)
        self.connections = 0


class RpcServer(Generic[S]):
    """Listens on `<private dir>/rpc.sock`; `authenticate(token)` binds a connection to a session."""

    def __init__(
        self,
        authenticate: Callable[[str], S | None],
        handle: Handler[S],
        *,
        max_concurrency: int = 16,
        max_connections: int = 64,
        auth_timeout: float = 10.0,
        parent_dir: str | None = None,
    ) -> None:
        self._authenticate = authenticate
        self._auth_timeout = auth_timeout
        self._handle = handle
        self._max_concurrency = max(1, max_concurrency)
        self._max_connections = max(1, max_connections)
        self.directory = tempfile.mkdtemp(prefix="herald-rpc-", dir=parent_dir)  # parent: where sandboxes see it
        os.chmod(self.directory, 0o700)
        self.path = os.path.join(self.directory, "rpc.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        at_unix_path(self.path, self._listener.bind)
        os.chmod(self.path, 0o600)
        self._listener.listen(64)
        self._closed = False
        self._lock = threading.Lock()
        self._connections: set[_Connection[S]] = set()
        self._runs: dict[int, _RunLimit] = {}
        self._acceptor = threading.Thread(target=self._accept_loop, name="herald-rpc-accept", daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError as exc:
                if self._closed or exc.errno not in _TRANSIENT_ACCEPT_ERRORS:
                    return
                # Out of descriptors or memory for a moment (a script opening sockets in a
                # loop): the connection waits in the backlog; serving resumes when they free up.
                time.sleep(ACCEPT_RETRY_SECONDS)
                continue
            conn = _Connection(self, sock)
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                self._connections.add(conn)
            threading.Thread(target=conn.serve, name="herald-rpc-conn", daemon=True).start()

    def _admit(self, session: S) -> _RunLimit | None:
        """Count a new connection of `session`; None if it already holds its maximum."""
        with self._lock:
            limit = self._runs.get(id(session))
            if limit is None:
                limit = self._runs[id(session)] = _RunLimit(session, self._max_concurrency)
            if limit.connections >= self._max_connections:
                return None
            limit.connections += 1
            return limit

    def _forget(self, conn: _Connection[S]) -> None:
        with self._lock:
            self._connections.discard(conn)
            limit = conn.limit
            if limit is not None:
                conn.limit = None
                limit.connections -= 1
                if limit.connections == 0:
                    del self._runs[id(limit.session)]

    def close_sessions(self, session: S) -> None:
        """Close every connection bound to `session` (its run is over)."""
        with self._lock:
            doomed = [c for c in self._connections if c.session is session]
        for conn in doomed:
            conn.close()

    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns = list(self._connections)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for conn in conns:
            conn.close()
        self._acceptor.join(timeout=2)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RpcServer[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Connection(Generic[S]):
    def __init__(self, server: RpcServer[S], sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.session: S | None = None
        self.limit: _RunLimit | None = None
        self._frames = FrameReader(sock)
        self._state_lock = threading.Lock()
        self._closed = False

    def serve(self) -> None:
        """Serve this connection until it closes (the calling thread's whole job meanwhile)."""
        # A peer that never authenticates must not hold a thread and a descriptor forever.
        try:
            self.sock.settimeout(self.server._auth_timeout)
            message = self._read()
            if message is None or not self._authenticate(message):
                return
            assert self.session is not None and self.limit is not None
            handle, session, calls = self.server._handle, self.session, self.limit.calls
            while True:
                message = self._read()
                if message is None:
                    return
                with calls:
                    frame = serve_call(handle, session, message)
                self.sock.sendall(frame)
        except OSError:
            return
        except Exception:  # never let one connection take its thread (shared by later ones) down
            log.exception("RPC connection failed; closing it")
        finally:
            self.close()
            self.server._forget(self)  # again: a close() from elsewhere may have come before _admit

    def _read(self) -> dict[str, Any] | None:
        try:
            return self._frames.read()
        except ProtocolError as exc:
            log.warning("closing RPC connection after a malformed frame: %s", exc)
            return None
        except OSError:
            return None

    def _authenticate(self, message: dict[str, Any]) -> bool:
        token = message.get("token")
        if message.get("type") != frames.AUTH or not isinstance(token, str):
            log.warning("closing RPC connection: first frame was not an auth frame")
            return False
        session = self.server._authenticate(token)
        if session is None:
            log.warning("closing RPC connection: unknown or expired token")
            return False
        limit = self.server._admit(session)
        if limit is None:
            log.warning("closing RPC connection: its run already holds %d connections", self.server._max_connections)
            return False
        self.sock.settimeout(None)
        self.session, self.limit = session, limit
        return True

    def close(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.server._forget(self)
