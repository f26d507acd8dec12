"""A process in a container seen as a Channel: one `exec` with its stdin, stdout and stderr on the
attached (hijacked) socket of the Docker API.

Without a TTY, Docker frames what it sends back: an 8-byte header (stream type, three zero bytes,
payload size as a big-endian uint32) before every payload. The wrapper from `..remote` already
merges stderr into stdout inside the container, so payloads are simply concatenated in order.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from ..base import BackendError, Channel
from ..remote import GO, kill_tree_argv, launch_argv, read_pid

HEADER = struct.Struct(">BxxxL")
START_TIMEOUT = 15.0


class ExecChannel(Channel):
    """`argv` running in `container` through the wrapper that reports its process id."""

    def __init__(
        self,
        api: Any,
        container: str,
        argv: list[str],
        *,
        cwd: str | None,
        environment: dict[str, str],
        user: str,
        grace: float,
        on_eof: Callable[[ExecChannel], None] | None = None,
    ) -> None:
        self._api = api
        self._container = container
        self._grace = grace
        self._on_eof = on_eof
        self._raw = b""  # bytes read from the socket, not yet de-framed
        self._frame_left = 0  # payload bytes of the current frame still to come
        self._pending = b""  # payload bytes read ahead of the process id line
        self._eof = False
        self._closed = False
        self._lock = threading.Lock()
        self._code: int | None = None
        self.exec_id = ""
        self.pid = 0
        try:
            created = api.exec_create(
                container,
                launch_argv(argv, cwd),
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                environment=environment or None,
                user=user or "",
            )
            self.exec_id = created["Id"]
            attached = api.exec_start(self.exec_id, socket=True)
        except Exception as exc:
            raise BackendError(f"could not start {argv[0]!r} in the container: {_short(exc)}") from None
        # For a Unix socket docker-py returns the socket's SocketIO; send/recv want the socket.
        self._sock: Any = getattr(attached, "_sock", attached)
        self._sock.setblocking(True)
        self._start(argv)

    def _start(self, argv: list[str]) -> None:
        self.send(GO)
        try:
            self.pid, self._pending = read_pid(self._read_payload, START_TIMEOUT)
        except ValueError as exc:
            self._abandon()
            raise BackendError(f"could not start {argv[0]!r} in the container: {exc}") from None

    # -- Channel ---------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError:
            pass  # the process is gone; the next recv reports it

    def recv(self, timeout: float) -> bytes | None:
        if self._pending:
            pending, self._pending = self._pending, b""
            return pending
        data = self._read_payload(timeout)
        if data == b"" and self._on_eof is not None:
            callback, self._on_eof = self._on_eof, None
            callback(self)
        return data

    @property
    def returncode(self) -> int | None:
        """The process's exit status once its output has ended, from the exec's record."""
        if self._code is None and self._eof and self.exec_id:
            try:
                info = self._api.exec_inspect(self.exec_id)
            except Exception:
                return None
            if not info.get("Running") and info.get("ExitCode") is not None:
                code = int(info["ExitCode"])
                # Docker reports death by signal N as 128 + N; a Channel, like Popen, says -N.
                self._code = 128 - code if 128 < code < 160 else code
        return self._code

    def close(self) -> None:
        """Stop the process tree (unless it already ended), then drop the connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self._eof and self.pid:
            self.kill_tree()
        self._abandon()

    def kill_tree(self) -> None:
        try:
            killer = self._api.exec_create(self._container, kill_tree_argv(self.pid, self._grace), user="")
            self._api.exec_start(killer["Id"])
        except Exception:
            pass  # the container is gone, and the processes with it

    # -- framing ---------------------------------------------------------------------------

    def _abandon(self) -> None:
        self._eof = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def _read_payload(self, timeout: float) -> bytes | None:
        """Payload bytes (b"" at end of stream), or None if none arrived within `timeout`."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            payload = self._deframe()
            if payload:
                return payload
            if self._eof:
                return b""
            remaining = deadline - time.monotonic()
            try:
                ready, _, _ = select.select([self._sock], [], [], max(0.0, remaining))
            except (OSError, ValueError):
                ready = [self._sock]  # closed under us: the recv below says so
            if not ready:
                return None
            try:
                chunk = self._sock.recv(1 << 16)
            except (OSError, ValueError):
                chunk = b""
            if not chunk:
                self._eof = True
                continue
            self._raw += chunk

    def _deframe(self) -> bytes:
        out = bytearray()
        raw = self._raw
        at = 0
        while at < len(raw):
            if self._frame_left == 0:
                if len(raw) - at < HEADER.size:
                    break
                _stream, self._frame_left = HEADER.unpack_from(raw, at)
                at += HEADER.size
                continue
            take = min(self._frame_left, len(raw) - at)
            out += raw[at : at + take]
            at += take
            self._frame_left -= take
        self._raw = raw[at:]
        return bytes(out)


def _short(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return str(text).strip().splitlines()[0][:300] if text else type(exc).__name__
