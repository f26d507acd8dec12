"""The parent's RPC endpoint: a Unix socket in a private directory, one-time tokens, concurrent calls.

Serving policy: each connection is served by a small set of threads in leader/follower style. One
thread at a time reads a frame; before it starts on the call it makes sure another thread is ready
to read the next frame, so calls from several script threads run concurrently (up to
`max_concurrency` per connection) while a lone call is handled by the thread that read it, with no
hand-off. Anything malformed closes that one connection (the server keeps running), as does sending
no auth frame within `auth_timeout` seconds of connecting. `serve_call` is how a call becomes a
reply frame, here and for in-backend runs alike.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from ..._sandbox import frames
from ..._sandbox.protocol import FrameReader, ProtocolError, encode_frame

log = logging.getLogger(__name__)

S = TypeVar("S")
Handler = Callable[[S, dict[str, Any]], dict[str, Any]]


def serve_call(handle: Handler[S], session: S, message: dict[str, Any], *, echo: Iterable[str] = ("id",)) -> bytes:
    """Run one call and encode its reply, copying the `echo` keys (the call id, ...) from the
    request. Never raises: a handler bug or an unencodable result becomes an error reply."""
    try:
        reply = handle(session, message)
    except Exception as exc:  # the handler promises data, but never let a bug kill the link
        log.exception("RPC handler failed")
        reply = {"error": {"type": "InternalError", "message": f"Herald failed to run the call: {exc}"}}
    return reply_frame(message, reply, echo=echo)


def reply_frame(message: dict[str, Any], reply: dict[str, Any], *, echo: Iterable[str] = ("id",)) -> bytes:
    """`reply` to `message` as a frame; a result too large (or not JSON) becomes an error reply."""
    ids = {key: message.get(key) for key in echo}
    try:
        return encode_frame({**reply, **ids})
    except (ProtocolError, TypeError, ValueError) as exc:
        return encode_frame({**ids, "error": {"type": "ResultTooLarge", "message": str(exc)}})


class RpcServer(Generic[S]):
    """Listens on `<private dir>/rpc.sock`; `authenticate(token)` binds a connection to a session."""

    def __init__(
        self,
        authenticate: Callable[[str], S | None],
        handle: Handler[S],
        *,
        max_concurrency: int = 16,
        auth_timeout: float = 10.0,
    ) -> None:
        self._authenticate = authenticate
        self._auth_timeout = auth_timeout
        self._handle = handle
        self._max_concurrency = max(1, max_concurrency)
        self.directory = tempfile.mkdtemp(prefix="herald-rpc-")
        os.chmod(self.directory, 0o700)
        self.path = os.path.join(self.directory, "rpc.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o600)
        self._listener.listen(64)
        self._closed = False
        self._lock = threading.Lock()
        self._connections: set[_Connection[S]] = set()
        self._acceptor = threading.Thread(target=self._accept_loop, name="herald-rpc-accept", daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            conn = _Connection(self, sock)
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                self._connections.add(conn)
            conn.start()

    def _forget(self, conn: _Connection[S]) -> None:
        with self._lock:
            self._connections.discard(conn)

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
        self._read_lock = threading.Lock()  # the one thread reading frames holds it
        self._frames = FrameReader(sock)
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._threads = 0
        self._waiting = 0
        self._closed = False

    def start(self) -> None:
        # A peer that never authenticates must not hold a thread and a descriptor forever.
        self.sock.settimeout(self.server._auth_timeout)
        self._spawn()

    def _spawn(self) -> None:
        # Called with _state_lock held or before any thread exists.
        self._threads += 1
        threading.Thread(target=self._worker, name="herald-rpc-conn", daemon=True).start()

    def _worker(self) -> None:
        try:
            while True:
                with self._state_lock:
                    self._waiting += 1
                with self._read_lock:
                    with self._state_lock:
                        self._waiting -= 1
                    if self._closed:
                        return
                    message = self._read()
                    if message is None:
                        self.close()
                        return
                    if self.session is None:
                        if not self._authenticate(message):
                            self.close()
                            return
                        continue
                    with self._state_lock:
                        if self._waiting == 0 and self._threads < self.server._max_concurrency:
                            self._spawn()
                self._serve(message)
        finally:
            with self._state_lock:
                self._threads -= 1

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
        self.sock.settimeout(None)
        self.session = session
        return True

    def _serve(self, message: dict[str, Any]) -> None:
        assert self.session is not None
        frame = serve_call(self.server._handle, self.session, message)
        try:
            with self._send_lock:
                self.sock.sendall(frame)
        except OSError:
            self.close()

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
