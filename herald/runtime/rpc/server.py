"""The parent's RPC endpoint: a Unix socket in a private directory, one-time tokens, concurrent calls.

Serving policy: one thread per connection reads a call, runs it and writes the reply, so a call
costs two wake-ups (the call's arrival, the reply's) and no hand-off between threads; the
threads outlive their connections for a while and serve the next ones (workers.py). A script's
threads that call at once use connections of their own (see _sandbox/child/client.py). Calls sent
one after another without waiting for replies (parallel() of tool stubs: `RpcClient.call_many`)
are handed to those threads, one per call, while a call of the connection is running or more
frames are already read; their replies go out as each ends (in any order: the ids say which).
The run's cap on concurrent calls (`max_concurrency`) is a semaphore shared by every connection
of the same session (a connection whose calls would pass it is not read until one ends), and
a session may hold at most `max_connections` connections (a script that opens more, by hand or
by forking, has the extra ones closed). Anything malformed closes that one connection
(the server keeps running). Before it authenticates, a connection is a stranger's: its first
frame may announce at most MAX_CONTROL_FRAME_BYTES and must be whole within `auth_timeout`
seconds of connecting, and at most `max_pending` such connections are served at once (more are
closed as soon as they are accepted), so strangers hold a bounded amount of memory and threads.
`serve_call` is how a call becomes a reply frame, here and for in-backend runs alike (the Runtime's
handler: replies.py `script_reply`, a ToolCall for the Dispatcher, its outcome as the frame).

Memory: with `inflight` (the session's InflightBytes, herald/inflight.py), a large call frame is
admitted when its length is read, before its body is, and counted until its reply is sent; a
large reply while it is sent (charges.py). A frame that does not fit is read and dropped as it
comes, never held, and its call gets an `InflightLimit` error saying what to do.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ... import fastjson
from ..._sandbox.child.client import at_unix_path
from ..._sandbox.wire import guards as wire
from ..._sandbox.wire.framing import MAX_CONTROL_FRAME_BYTES, FrameReader, ProtocolError, RefusedFrame, reply_frame
from ...inflight import FREE_BYTES, InflightBytes
from ...tempdirs import owned_tempdir
from ..calls import error
from . import charges
from .workers import ConnectionThreads

log = logging.getLogger(__name__)
fastjson.install()  # orjson for this process's frames when it is installed (herald/fastjson.py)

ACCEPT_RETRY_SECONDS = 0.01  # first pause after a transient accept error; doubles up to the max
ACCEPT_RETRY_MAX_SECONDS = 1.0
# Connections a script refuses to use properly are logged up to this many per server, then
# counted only: a hostile script opening bad connections in a loop must not flood stderr.
MAX_CONNECTION_WARNINGS = 5
# How long a connection looks for the next call before it sleeps (FrameReader._poll).
CALL_POLL_SECONDS = 0.0001
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
        return reply_frame(message, error("InternalError", f"Herald failed to run the call: {exc}"), echo=echo)


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
        max_pending: int | None = None,
        auth_timeout: float = 5.0,
        parent_dir: str | None = None,
        inflight: Callable[[S], InflightBytes | None] | None = None,
    ) -> None:
        self._authenticate = authenticate
        self._inflight = inflight  # a session's cap on bytes held for its calls in flight
        self._auth_timeout = auth_timeout
        self._handle = handle
        self._max_concurrency = max(1, max_concurrency)
        self._max_connections = max(1, max_connections)
        # By default as many as one run may hold: a script whose processes all connect at once
        # (a pool's workers, each with its own client) must not lose any to this cap.
        self._max_pending = max(1, max_pending if max_pending is not None else max_connections)
        self._pending = 0  # accepted connections that have not authenticated yet
        self.directory = owned_tempdir("rpc", dir=parent_dir)  # parent: where sandboxes see it
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
        self._threads = ConnectionThreads()
        self.refused_connections = 0  # closed for a bad frame, a bad token or over a cap
        self._acceptor = threading.Thread(target=self._accept_loop, name="herald-rpc-accept", daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        pause = ACCEPT_RETRY_SECONDS
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                if exc.errno not in _TRANSIENT_ACCEPT_ERRORS:
                    log.error("RPC server stopped accepting connections: %s", exc)
                    return
                # Out of descriptors or memory for a moment (a script opening sockets in a
                # loop): the connection waits in the backlog; serving resumes when they free up.
                if pause == ACCEPT_RETRY_SECONDS:
                    log.warning("RPC server cannot accept a connection (%s); retrying", exc)
                time.sleep(pause)
                pause = min(pause * 2, ACCEPT_RETRY_MAX_SECONDS)
                continue
            pause = ACCEPT_RETRY_SECONDS
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                conn = None
                if self._pending < self._max_pending:
                    conn = _Connection(self, sock)
                    self._pending += 1
                    self._connections.add(conn)
            if conn is None:
                log.debug(
                    "closing an RPC connection: %d connections are already waiting to authenticate", self._max_pending
                )
                sock.close()
                continue
            self._threads.submit(conn.serve)

    def warn_refused(self, message: str, *args: object) -> None:
        """Log why a connection was closed, for the first few only (then once that the rest are
        only counted in `refused_connections`)."""
        with self._lock:
            self.refused_connections += 1
            count = self.refused_connections
        if count <= MAX_CONNECTION_WARNINGS:
            log.warning(message, *args)
        if count == MAX_CONNECTION_WARNINGS:
            log.warning("further refused RPC connections to this Runtime are counted, not logged")

    def _settle(self, conn: _Connection[S]) -> None:
        """`conn` no longer counts as waiting to authenticate. Call with the lock held."""
        if conn.pending:
            conn.pending = False
            self._pending -= 1

    def _admit(self, conn: _Connection[S], session: S) -> _RunLimit | None:
        """Count `conn` as a connection of `session`; None if it already holds its maximum."""
        with self._lock:
            self._settle(conn)
            limit = self._runs.get(id(session))
            if limit is None:
                limit = self._runs[id(session)] = _RunLimit(session, self._max_concurrency)
            if limit.connections >= self._max_connections:
                return None
            limit.connections += 1
            return limit

    def _forget(self, conn: _Connection[S]) -> None:
        with self._lock:
            self._settle(conn)
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
        self._threads.close()
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
        self.pending = True  # counted among the server's connections waiting to authenticate
        self._frames = FrameReader(sock, max_first_frame=MAX_CONTROL_FRAME_BYTES,
                                   track_sizes=server._inflight is not None)
        self._charges: deque[charges.Charge] = deque()  # frames admitted, not yet read whole (reader thread only)
        self._state_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._running = 0  # its calls running on other threads (_serve_beside)
        self._closed = False

    def serve(self) -> None:
        """Serve this connection until it closes (the calling thread's whole job meanwhile)."""
        # A peer that never authenticates must not hold a thread and a descriptor forever, nor
        # keep them by trickling its auth frame a byte at a time: one deadline for the frame.
        try:
            message = self._read(time.monotonic() + self.server._auth_timeout)
            if message is None or not self._authenticate(message):
                return
            assert self.session is not None and self.limit is not None
            handle, session, calls = self.server._handle, self.session, self.limit.calls
            limit = self.limit
            if self.server._inflight is not None:
                self._frames.buffer.admit_over = FREE_BYTES
                self._frames.buffer.admit = self._admit_frame
            while True:
                # A run's only connection looks for the script's next call a while before
                # sleeping: in a loop of small calls it comes sooner than a wake-up would.
                message = self._read(poll=CALL_POLL_SECONDS if limit.connections == 1 else 0.0)
                if message is None:
                    return
                charge = self._charges.popleft() if self._frames.last_size else None
                if isinstance(message, RefusedFrame):
                    if not self._refuse_frame(message):
                        return
                    continue
                if self._frames.waiting or self._running:  # calls sent together: run them together
                    calls.acquire()
                    with self._state_lock:
                        self._running += 1
                    self.server._threads.submit(
                        functools.partial(self._serve_beside, handle, session, calls, message, charge))
                    message = None  # (as below)
                    continue
                try:
                    with calls:
                        frame = serve_call(handle, session, message)
                    self._send_reply(message, frame)
                finally:
                    charges.give_back(charge)
                # Not kept while the next call is read: its arguments may be large.
                message = frame = None  # type: ignore[assignment]
        except OSError:
            return
        except Exception:  # never let one connection take its thread (shared by later ones) down
            log.exception("RPC connection failed; closing it")
        finally:
            while self._charges:  # admitted frames whose bodies never came whole
                charges.give_back(self._charges.popleft())
            self.close()
            self.server._forget(self)  # again: a close() from elsewhere may have come before _admit

    def _serve_beside(self, handle: Handler[S], session: S, calls: threading.BoundedSemaphore,
                      message: dict[str, Any], charge: charges.Charge | None) -> None:
        """One of several calls the connection sent together, on a thread of its own (the run's
        cap, `calls`, was taken for it by the reader)."""
        try:
            self._send_reply(message, serve_call(handle, session, message))
        except OSError:  # the connection closed meanwhile: nobody waits for this reply
            pass
        finally:
            charges.give_back(charge)
            calls.release()
            with self._state_lock:
                self._running -= 1

    def _admit_frame(self, size: int) -> bool:
        """FrameBuffer.admit: whether a call frame of `size` bytes may be read (charges.py)."""
        charge = charges.admit(self._budget(), size)
        if charge is None:
            return False
        self._charges.append(charge)
        return True

    def _budget(self) -> InflightBytes | None:
        inflight, session = self.server._inflight, self.session
        return inflight(session) if inflight is not None and session is not None else None

    def _refuse_frame(self, refused: RefusedFrame) -> bool:
        """Answer a frame that was dropped unread; False (close the connection) when its call id
        could not be told, so no reply could say which call it was."""
        self._send(reply_frame(refused, charges.refused_call(self._budget(), refused["size"])))
        return refused["id"] is not None

    def _send_reply(self, message: dict[str, Any], frame: bytes) -> None:
        """Send `frame`, the reply to `message`, counted against the run's cap while it is sent."""
        frame, taken = charges.reply_to_send(self._budget() if len(frame) > FREE_BYTES else None, message, frame)
        try:
            self._send(frame)
        finally:
            if taken:
                charges.give_back((self._budget(), taken))

    def _send(self, frame: bytes) -> None:
        with self._write_lock:  # replies of calls run beside each other must not interleave
            self.sock.sendall(frame)

    def _read(self, deadline: float | None = None, poll: float = 0.0) -> dict[str, Any] | None:
        try:
            return self._frames.read(deadline, poll)
        except ProtocolError as exc:
            self.server.warn_refused("closing RPC connection after a malformed frame: %s", exc)
            return None
        except OSError:
            return None

    def _authenticate(self, message: dict[str, Any]) -> bool:
        try:
            token = wire.auth(message)["token"]
        except wire.FrameError:
            self.server.warn_refused("closing RPC connection: first frame was not an auth frame")
            return False
        session = self.server._authenticate(token)
        if session is None:
            self.server.warn_refused("closing RPC connection: unknown or expired token")
            return False
        limit = self.server._admit(self, session)
        if limit is None:
            self.server.warn_refused(
                "closing RPC connection: its run already holds %d connections", self.server._max_connections
            )
            return False
        self.sock.settimeout(None)
        self.session, self.limit = session, limit
        return True

    def close(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        # Uncounted before the peer can see the close, so a peer that reconnects at once is
        # never refused for the connection it just lost.
        self.server._forget(self)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

