"""A pipelined SFTP v3 client on one paramiko channel, with a deadline on every answer.

paramiko's SFTPClient sends one request and waits for its answer before the next, and waits
without a time limit. Here a file operation sends its requests in batches (`request` each, then
`wait` for their answers together), so it costs round trips only where a request needs an earlier answer:
the server answers in order on a channel, so a CLOSE can be sent and forgotten (its answer is
read, and checked, with a later batch).

Handles: OpenSSH's server hands out the handle it freed last (its free list is a stack). A
session that has seen a closed handle come back from the next OPEN predicts it, and sends the
requests that need the handle in the same batch as the OPEN. Each answer to such a request is
used only if the OPEN really returned the predicted handle; otherwise they failed on a handle
that was not open (the prediction covers only handles this session closed) and are sent again
with the real one, and prediction stops for this session. Nothing is ever written through a
predicted handle except a private temp file's data, which is checked before the file is used.

Errors are paramiko's: OSError(ENOENT | EACCES, text) for those two statuses, OSError(text)
without errno for the rest (the callers in files.py map them as a local call would).
"""

from __future__ import annotations

import errno
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paramiko

from ..base import BackendError
from ..shell import CANCEL_POLL_SECONDS, current_cancel

log = logging.getLogger(__name__)

INIT, VERSION, OPEN, CLOSE, READ, WRITE, LSTAT, FSTAT, SETSTAT, FSETSTAT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
OPENDIR, READDIR, REMOVE, MKDIR, RMDIR, REALPATH, STAT, RENAME, READLINK = 11, 12, 13, 14, 15, 16, 17, 18, 19
EXTENDED = 200
STATUS, HANDLE, DATA, NAME, ATTRS, EXTENDED_REPLY = 101, 102, 103, 104, 105, 201
OK, EOF, NO_SUCH_FILE, PERMISSION_DENIED = 0, 1, 2, 3
FLAG_READ, FLAG_WRITE, FLAG_CREAT, FLAG_TRUNC, FLAG_EXCL = 0x1, 0x2, 0x8, 0x10, 0x20
A_SIZE, A_UIDGID, A_PERMISSIONS, A_ACMODTIME, A_EXTENDED = 0x1, 0x2, 0x4, 0x8, 0x80000000
CHUNK = 32768  # bytes per READ/WRITE: what every server accepts
POSIX_RENAME = "posix-rename@openssh.com"


class SFTPTimeout(BackendError):
    """The server did not answer within the deadline: the link is presumed dead."""


class SFTPCancelled(BackendError):
    """The caller's cancel event was set while waiting (a run's timeout or interrupt)."""


@dataclass
class Attrs:
    size: int | None = None
    mode: int | None = None
    mtime: int | None = None

    @property
    def st_mode(self) -> int:
        return self.mode or 0

    @property
    def st_size(self) -> int:
        return self.size or 0


@dataclass
class Reply:
    kind: int
    status: int = OK
    message: str = ""
    handle: bytes = b""
    data: bytes = b""
    attrs: Attrs | None = None
    names: list[tuple[str, Attrs]] = field(default_factory=list)

    def error(self) -> OSError | None:
        """The request's failure as paramiko words it; None when it succeeded."""
        if self.kind != STATUS or self.status in (OK, EOF):
            return None
        if self.status == NO_SUCH_FILE:
            return OSError(errno.ENOENT, self.message)
        if self.status == PERMISSION_DENIED:
            return OSError(errno.EACCES, self.message)
        return OSError(self.message or f"SFTP status {self.status}")

    def check(self) -> Reply:
        exc = self.error()
        if exc is not None:
            raise exc
        return self

    @property
    def eof(self) -> bool:
        return self.kind == STATUS and self.status == EOF


def _string(data: bytes | str) -> bytes:
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return struct.pack(">I", len(raw)) + raw


def handle_field(handle: bytes) -> bytes:
    return _string(handle)


def encode_attrs(mode: int | None = None) -> bytes:
    if mode is None:
        return struct.pack(">I", 0)
    return struct.pack(">II", A_PERMISSIONS, mode)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def u32(self) -> int:
        value: int = struct.unpack_from(">I", self.data, self.at)[0]
        self.at += 4
        return value

    def u64(self) -> int:
        value: int = struct.unpack_from(">Q", self.data, self.at)[0]
        self.at += 8
        return value

    def string(self) -> bytes:
        size = self.u32()
        value = self.data[self.at : self.at + size]
        self.at += size
        return value

    def attrs(self) -> Attrs:
        flags = self.u32()
        attrs = Attrs()
        if flags & A_SIZE:
            attrs.size = self.u64()
        if flags & A_UIDGID:
            self.at += 8
        if flags & A_PERMISSIONS:
            attrs.mode = self.u32()
        if flags & A_ACMODTIME:
            self.u32()
            attrs.mtime = self.u32()
        if flags & A_EXTENDED:
            for _ in range(self.u32()):
                self.string()
                self.string()
        return attrs


def _parse(kind: int, body: _Reader) -> Reply:
    if kind == STATUS:
        code = body.u32()
        message = body.string().decode("utf-8", "replace") if body.at < len(body.data) else ""
        return Reply(kind, status=code, message=message)
    if kind == HANDLE:
        return Reply(kind, handle=body.string())
    if kind == DATA:
        return Reply(kind, data=body.string())
    if kind == ATTRS:
        return Reply(kind, attrs=body.attrs())
    if kind == NAME:
        names = []
        for _ in range(body.u32()):
            name = body.string().decode("utf-8", "surrogateescape")
            body.string()  # the long name (ls -l style) is not used
            names.append((name, body.attrs()))
        return Reply(kind, names=names)
    return Reply(kind)


class SFTPSession:
    """One SFTP channel. Not thread-safe: a caller borrows it whole (SSHConnection.sftp())."""

    def __init__(self, channel: paramiko.Channel, *, timeout: float, where: str, heard: Callable[[], None]) -> None:
        self._chan = channel
        self._heard = heard  # tells the connection that data came (see SSHConnection.probe)
        self.timeout = timeout  # how long the server may stay silent while answers are due
        self._where = where
        self._next_id = 1
        self._buffer = bytearray()
        self._replies: dict[int, Reply] = {}
        self._forgotten: set[int] = set()  # requests sent whose answers nobody waits for
        self._closed_handles: list[bytes] = []  # handles this session closed, last on top
        self._predicting: bool | None = None  # None: not learned yet
        self.broken = False
        self.extensions: dict[str, bytes] = {}
        self.requests = 0  # requests sent, for diagnostics and tests
        self.round_trips = 0  # batches of requests whose answers were awaited
        self._sent_since_wait = False
        self._send(struct.pack(">BI", INIT, 3))
        kind, body = self._packet(time.monotonic() + timeout)
        if kind != VERSION:
            raise BackendError(f"the SFTP server on {where} did not start its protocol (got message {kind})")
        body.u32()
        while body.at < len(body.data):
            name = body.string().decode("ascii", "replace")
            self.extensions[name] = body.string()

    # -- the wire -----------------------------------------------------------------------------

    def _send(self, payload: bytes) -> None:
        try:
            self._chan.sendall(struct.pack(">I", len(payload)) + payload)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self.broken = True
            raise BackendError(f"SFTP on {self._where}: the channel is gone ({exc or type(exc).__name__})") from None

    def _fill(self, deadline: float) -> None:
        cancel = current_cancel()
        while True:
            remaining = deadline - time.monotonic()
            if cancel is not None:
                if cancel.is_set():
                    self.broken = True
                    raise SFTPCancelled("the file operation was cancelled")
                remaining = min(remaining, CANCEL_POLL_SECONDS)
            if deadline - time.monotonic() <= 0:
                self.broken = True
                raise SFTPTimeout(
                    f"{self._where} did not answer an SFTP request within {self.timeout:g} s "
                    "(setting ssh.connect_timeout): the link or the host is down; the next call reconnects"
                )
            self._chan.settimeout(max(0.001, remaining))
            try:
                chunk = self._chan.recv(1 << 18)
            except TimeoutError:
                continue
            except (OSError, EOFError, paramiko.SSHException):
                chunk = b""
            if not chunk:
                self.broken = True
                raise BackendError(f"SFTP on {self._where}: the server closed the channel")
            self._buffer += chunk
            self._heard()
            return

    def _packet(self, deadline: float) -> tuple[int, _Reader]:
        while True:
            if len(self._buffer) >= 5:
                size = struct.unpack_from(">I", self._buffer)[0]
                if len(self._buffer) >= 4 + size:
                    body = bytes(self._buffer[4 : 4 + size])
                    del self._buffer[: 4 + size]
                    return body[0], _Reader(body[1:])
            self._fill(deadline)

    def request(self, kind: int, payload: bytes = b"") -> int:
        """Send one request now; its id (read its answer with `wait`, or `forget` it)."""
        if self.broken:
            raise BackendError(f"SFTP on {self._where}: the session was abandoned")
        rid = self._next_id
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF or 1
        self._send(struct.pack(">BI", kind, rid) + payload)
        self.requests += 1
        self._sent_since_wait = True
        return rid

    def wait(self, *ids: int) -> list[Reply]:
        """The answers to `ids`, reading whatever comes first (answers to forgotten requests too)."""
        if self._sent_since_wait and any(rid not in self._replies for rid in ids):
            self.round_trips += 1
            self._sent_since_wait = False
        deadline = time.monotonic() + self.timeout
        while any(rid not in self._replies for rid in ids):
            kind, body = self._packet(deadline)
            deadline = time.monotonic() + self.timeout  # progress: the server is there
            rid = body.u32()
            reply = _parse(kind, body)
            if rid in self._forgotten:
                self._forgotten.discard(rid)
                if reply.error() is not None:
                    log.debug("SFTP on %s: a request nobody waited for failed: %s", self._where, reply.message)
                continue
            self._replies[rid] = reply
        return [self._replies.pop(rid) for rid in ids]

    def forget(self, rid: int) -> None:
        self._forgotten.add(rid)

    def close(self) -> None:
        try:
            self._chan.close()
        except Exception:
            pass

    # -- handles ------------------------------------------------------------------------------

    def predicted_handle(self) -> bytes | None:
        """The handle the next OPEN should return, when this server has shown it reuses them."""
        if self._predicting and self._closed_handles:
            return self._closed_handles[-1]
        return None

    def opened(self, handle: bytes, predicted: bytes | None) -> None:
        """Learn from an OPEN's answer (`predicted`: what was expected, if anything)."""
        top = self._closed_handles[-1] if self._closed_handles else None
        if top is not None:
            if handle == top:
                self._closed_handles.pop()
                if self._predicting is None:
                    self._predicting = True
            else:
                self._predicting = False
                self._closed_handles.clear()
        if predicted is not None and handle != predicted:
            self._predicting = False

    def send_close(self, handle: bytes) -> int:
        rid = self.request(CLOSE, _string(handle))
        if self._predicting is not False:
            self._closed_handles.append(handle)
            del self._closed_handles[:-16]
        return rid

    def close_handle(self, handle: bytes, *, wait: bool = False) -> Reply | None:
        """CLOSE `handle`; awaited only with `wait` (a write's close can report lost data)."""
        rid = self.send_close(handle)
        if wait:
            return self.wait(rid)[0]
        self.forget(rid)
        return None

    # -- requests -----------------------------------------------------------------------------

    def send_path(self, kind: int, path: str, extra: bytes = b"") -> int:
        return self.request(kind, _string(path) + extra)

    def send_open(self, path: str, flags: int, mode: int | None = None) -> int:
        return self.request(OPEN, _string(path) + struct.pack(">I", flags) + encode_attrs(mode))

    def send_read(self, handle: bytes, offset: int, size: int) -> int:
        return self.request(READ, _string(handle) + struct.pack(">QI", offset, size))

    def send_write(self, handle: bytes, offset: int, data: bytes) -> int:
        return self.request(WRITE, _string(handle) + struct.pack(">Q", offset) + _string(data))

    def send_rename(self, source: str, target: str) -> int:
        if POSIX_RENAME in self.extensions:
            return self.request(EXTENDED, _string(POSIX_RENAME) + _string(source) + _string(target))
        return self.request(RENAME, _string(source) + _string(target))

    def call(self, kind: int, path: str, extra: bytes = b"") -> Reply:
        """One request on a path, awaited, failure raised."""
        return self.wait(self.send_path(kind, path, extra))[0].check()

    def stat(self, path: str, *, follow: bool = True) -> Attrs:
        reply = self.call(STAT if follow else LSTAT, path)
        return reply.attrs or Attrs()

    def listdir(self, path: str) -> list[tuple[str, Attrs]]:
        handle = self.call(OPENDIR, path).handle
        self.opened(handle, None)
        entries: list[tuple[str, Attrs]] = []
        try:
            while True:
                reply = self.wait(self.request(READDIR, _string(handle)))[0]
                if reply.eof:
                    break
                entries += [(name, attrs) for name, attrs in reply.check().names if name not in (".", "..")]
        finally:
            if not self.broken:
                self.close_handle(handle)
        return entries

    def describe(self) -> dict[str, Any]:
        return {"requests": self.requests, "round_trips": self.round_trips, "predicting": bool(self._predicting)}
