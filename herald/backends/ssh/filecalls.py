"""The SSH backend's file calls: each on an SFTP session of its own, with what was just seen.

Paths here are absolute (the backend resolves `~` and the shell's cwd first). Every call runs on
an SFTP session of its own (concurrent calls overlap) at one or two round trips (files.py,
sftp.py); a connection that dropped is made again and the call repeated once. What calls saw of
paths a moment ago (seen.py) saves round trips until a command or a process may have changed
them; a path the workspace check allowed because of where it led (`pin`) is read or written only
while it still leads there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from ..base import BackendError, DirEntry, FileStat
from ..realpath import Pins
from . import files, writes
from .connection import SSHConnection
from .seen import Seen
from .sftp import SFTPCancelled, SFTPSession, SFTPTimeout
from .target import SSHTarget

T = TypeVar("T")


class FileCalls:
    """read/write/stat/list/realpath on `target` over the connection `connection()` returns
    (reconnecting when needed); `lock` is the backend's, `seen` its record of recent answers."""

    def __init__(self, target: SSHTarget, connection: Callable[[], SSHConnection], lock: threading.RLock,
                 seen: Seen) -> None:
        self._target = target
        self._connection = connection
        self._lock = lock
        self._seen = seen
        # Where the workspace check allowed paths to lead (`pin`): a read or write of such a
        # path verifies, in its own first flight, that it still leads there.
        self._pins = Pins()

    def _files(self, operation: Callable[[SSHConnection, SFTPSession], T]) -> T:
        """Run a file operation on an SFTP session of its own (concurrent calls overlap); if the
        connection dropped, reconnect and do it again (reads, stats and the temp-file-and-rename
        write can safely run twice). Every wait has a deadline (sftp.py); a run's cancel event
        stops it."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                with conn.sftp() as session:
                    return operation(conn, session)
            except SFTPCancelled:
                raise BackendError(f"the file operation on {self._target} was cancelled (the run ended)") from None
            except SFTPTimeout:
                raise
            except Exception as exc:
                if conn.abandoned:  # the host went silent: no second wait on the same dead link
                    raise BackendError(
                        f"{self._target} stopped answering ({conn.abandoned}); the next call reconnects"
                    ) from None
                if conn.alive():
                    if isinstance(exc, OSError | BackendError):
                        raise
                    raise BackendError(f"SFTP on {self._target} failed: {type(exc).__name__}: {exc}") from None
                if attempt == 2:
                    raise BackendError(f"the SSH connection to {self._target} dropped twice during a file operation") from None
        raise AssertionError("unreachable")

    def realpath(self, target: str) -> str:
        """Where `target` leads on the host, every symlink followed (a missing tail as written):
        the workspace check's resolution (policy/paths.py). One round trip that also stats the
        path for the tool's own stat right after; none when resolved a moment ago (seen.py) with no
        command run or process started since (a link changed by anything else is caught by the
        operation: see `pin`)."""
        with self._lock:
            hit, epoch = self._seen.leads(target), self._seen.epoch
        if hit is not None:
            return hit
        resolved, attrs = self._files(lambda _, s: files.realpath(s, target))
        self._seen.saw(target, attrs, epoch, looked=True)
        self._seen.saw_lead(target, resolved, epoch)
        return resolved

    def pin(self, target: str, resolved: str) -> None:
        """The workspace check allowed `target` because it leads to `resolved`: from now on it is
        read or written only while it still leads there (a REALPATH in the operation's first
        flight; PermissionError otherwise)."""
        with self._lock:
            self._pins.pin(target, resolved)

    def pinned(self, target: str) -> str | None:
        with self._lock:
            return self._pins.get(target)

    def read_bytes(self, target: str, limit: int) -> bytes:
        with self._lock:
            known, epoch, pinned = self._seen.regular(target), self._seen.epoch, self._pins.get(target)
        data, attrs = self._files(lambda _, s: files.read_bytes(s, target, limit, known, pinned))
        self._seen.saw(target, attrs, epoch)
        return data

    def write_bytes(self, target: str, data: bytes) -> None:
        with self._lock:
            pinned = self._pins.get(target)

        def write(conn: SSHConnection, s: SFTPSession) -> writes.Written:
            written = writes.write_bytes(s, target, data, conn.default_mode, pinned)
            conn.default_mode = written.default_mode
            return written

        epoch = self._seen.changed(target)
        written = self._files(write)
        for seen in {target, written.target}:  # the path as given, and the file it leads to
            self._seen.saw(seen, written.attrs, epoch)

    def stat(self, target: str) -> FileStat | None:
        with self._lock:
            (known, attrs), epoch = self._seen.recent(target), self._seen.epoch
        if not known:
            attrs = self._files(lambda _, s: files.stat(s, target))
            self._seen.saw(target, attrs, epoch, looked=True)
        return files.to_filestat(target, attrs) if attrs is not None else None

    def list_dir(self, target: str) -> list[DirEntry]:
        return self._files(lambda _, s: files.list_dir(s, target))
