"""Snapshots of one workspace, taken where the workspace is.

The engine (herald/_sandbox/snapshot/) runs in this process for the local backend, and as a
python3 process on the backend for SSH, Docker and Modal (engineproc.py), one per workspace, kept
for the session: a snapshot is taken before every run, and copying the workspace's bytes to this
machine would be slow.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .._sandbox.snapshot.engine import Engine, SnapshotFailure, TooLarge, make_engine
from .._sandbox.snapshot.scan import Limits
from ..backends.base import Backend, BackendError
from ..backends.local import LocalBackend
from ..config import Settings
from .engineproc import EngineProcess, NoEngine

__all__ = ["Changes", "SnapshotError", "SnapshotInfo", "Snapshots", "Taken", "WorkspaceTooLarge", "snapshots_for"]

OPERATION_TIMEOUT = 900.0  # one operation on a remote workspace (a first take reads every file)


@dataclass(frozen=True)
class Changes:
    """What differs between two states of a workspace (paths relative to its root, sorted)."""

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    not_covered: tuple[str, ...] = ()  # left out by a limit (too big, too many, a special file): unknown

    def paths(self) -> tuple[str, ...]:
        """Every changed path: added, modified and removed, sorted."""
        return tuple(sorted(self.added + self.modified + self.removed))

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.removed)

    def counts(self) -> str:
        """"3 added, 1 modified, 0 removed" (and what was not covered, when anything)."""
        text = f"{len(self.added)} added, {len(self.modified)} modified, {len(self.removed)} removed"
        return text + (f", {len(self.not_covered)} not covered" if self.not_covered else "")

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Changes:
        return cls(*(tuple(str(path) for path in reply.get(key, ())) for key in
                     ("added", "modified", "removed", "not_covered")))


@dataclass(frozen=True)
class SnapshotInfo:
    id: str
    label: str
    created: float  # seconds since the epoch
    added_bytes: int  # what it added to the store


@dataclass(frozen=True)
class Taken:
    id: str
    files: int  # entries the workspace holds (files, links, directories)
    not_covered: tuple[str, ...]
    store_bytes: int  # the store's objects after the take
    changes: Changes | None = None  # from `since`, when asked
    store_full: bool = False  # files were left out (not covered) for the store's size limit


class SnapshotError(Exception):
    """A snapshot operation failed; the message says what to do (for the model or a person)."""


class WorkspaceTooLarge(SnapshotError):
    """The workspace holds more files than checkpoints.max_files: it is not snapshotted."""


def _error(message: str, kind: str) -> SnapshotError:
    return WorkspaceTooLarge(message) if kind == TooLarge.kind else SnapshotError(message)


class Snapshots:
    """The snapshots of the workspace `root` on `backend`. Thread-safe: calls are serialised."""

    def __init__(self, backend: Backend, root: str, settings: Settings) -> None:
        self.backend = backend
        self.root = root
        self._settings = settings
        self._lock = threading.Lock()
        self._local: Engine | None = None
        self._remote: EngineProcess | None = None
        self._opened: dict[str, int] = {}  # the limits the remote engine was opened with
        self.where = "local machine" if isinstance(backend, LocalBackend) else f"backend {backend.name}"

    def use_settings(self, settings: Settings) -> None:
        """Apply these settings' limits from the next call on (snapshots_for with other settings)."""
        with self._lock:
            self._settings = settings

    def _limits(self) -> dict[str, int]:
        limits = self._settings.checkpoints
        return {"max_file_bytes": limits.max_file_mb << 20, "max_files": limits.max_files,
                "max_store_bytes": limits.max_store_mb << 20}

    def _ask(self, op: str, **args: Any) -> dict[str, Any]:
        with self._lock:
            if isinstance(self.backend, LocalBackend):
                return self._ask_here(op, args)
            return self._ask_there(op, args)

    def _ask_here(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            if self._local is None:
                digest = hashlib.sha256(self.root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
                store = self._settings.data_dir / "snapshots" / digest
                self._local = make_engine(self.root, str(store), **self._limits(), skip=[str(self._settings.data_dir)])
            # Herald's own data (sessions, spill files, the stores) is never part of a workspace's snapshot.
            self._local.limits = Limits(**self._limits(), skip=[str(self._settings.data_dir)])
            reply: dict[str, Any] = getattr(self._local, op)(**args)
            return reply
        except SnapshotFailure as exc:
            raise _error(str(exc), exc.kind) from None
        except OSError as exc:
            raise SnapshotError(f"snapshot of {self.root} failed: {exc}") from None

    def _ask_there(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "restore":  # it writes the workspace: a process of its own, which the backend knows may
            return self._restore_there(args)  # change files (the persistent one only reads there)
        for attempt in range(2):  # a process lost with its container is started again once
            try:
                if self._remote is None:
                    self._remote = EngineProcess(self.backend, self._settings.sandbox.remote_python, self.where)
                if self._opened != self._limits():  # first, or the settings of a later snapshots_for
                    opened = self._remote.ask(self._open_request(), OPERATION_TIMEOUT)
                    if "error" in opened:
                        self._drop()
                        raise SnapshotError(str(opened["error"]))
                    self._opened = self._limits()
                answer = self._remote.ask({"op": op, **args}, OPERATION_TIMEOUT)
            except BackendError as exc:
                self._drop()
                if attempt or isinstance(exc, NoEngine):
                    raise SnapshotError(str(exc)) from None
                continue
            return _ok(answer)
        raise AssertionError("unreachable")

    def _restore_there(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            writer = EngineProcess(self.backend, self._settings.sandbox.remote_python, self.where, changes_files=True)
        except BackendError as exc:
            raise SnapshotError(str(exc)) from None
        try:
            opened = writer.ask(self._open_request(), OPERATION_TIMEOUT)
            answer = opened if "error" in opened else writer.ask({"op": "restore", **args}, OPERATION_TIMEOUT)
        except BackendError as exc:
            raise SnapshotError(str(exc)) from None
        finally:
            writer.close()
        return _ok(answer)

    def _open_request(self) -> dict[str, Any]:
        """What an engine process is told first: the workspace and the limits now in force."""
        return {"op": "open", "root": self.root, **self._limits()}

    def _drop(self) -> None:
        self._opened = {}
        if self._remote is not None:
            self._remote.close()
            self._remote = None

    def take(self, label: str = "") -> str:
        """Snapshot the workspace now; its id. What a limit left out is in `changes(...).not_covered`."""
        return str(self._ask("take", label=label)["id"])

    def take_counted(self, label: str = "", *, since: str | None = None, reuse: bool = False) -> Taken:
        """take(), with what it found: the workspace's entries, what a limit left out, the store's
        size, and with `since` what changed from that snapshot (one call, one walk); with `reuse`,
        the id is `since` itself when nothing changed (nothing new is kept)."""
        reply = self._ask("take", label=label, since=since, reuse=reuse)
        changes = Changes.from_reply(reply["changes"]) if "changes" in reply else None
        return Taken(str(reply["id"]), int(reply["files"]), tuple(reply["not_covered"]), int(reply["store_bytes"]),
                     changes, bool(reply.get("store_full")))

    def changes(self, since: str, until: str | None = None) -> Changes:
        """What changed from snapshot `since` to `until` (None: the workspace now)."""
        return Changes.from_reply(self._ask("changes", since=since, until=until))

    def restore(self, snapshot: str, *, keep: Collection[str] = ()) -> Changes:
        """Put the workspace back as it was at `snapshot`, except the relative paths in `keep`
        (and what lies below them). Returns what the restore did: `added` were recreated,
        `modified` rewritten, `removed` deleted; `not_covered` were left as they are."""
        return Changes.from_reply(self._ask("restore", snapshot=snapshot, keep=sorted(keep)))

    def diff(self, since: str, until: str | None = None, *, max_bytes: int = 200_000) -> str:
        """A unified diff from `since` to `until` (None: the workspace now), cut at `max_bytes`."""
        return str(self._ask("diff", since=since, until=until, max_bytes=max_bytes)["diff"])

    def release(self, snapshot: str) -> None:
        """`snapshot` is not needed any more: it is forgotten, and the objects no other snapshot uses
        are freed with the next collection (once enough is released to be worth a walk of the store)."""
        self._ask("release", snapshot=snapshot)

    def free(self, snapshot: str) -> int:
        """release(), its objects collected now; the bytes it gave back to the store."""
        return int(self._ask("release", snapshot=snapshot, collect=True)["freed"])

    def kept(self) -> tuple[list[SnapshotInfo], int]:
        """Every snapshot kept of this workspace (oldest first), and the store's size in bytes."""
        reply = self._ask("snapshots")
        found = [SnapshotInfo(str(item["id"]), str(item["label"]), float(item["created"]), int(item["added_bytes"]))
                 for item in reply["snapshots"]]
        return found, int(reply["store_bytes"])

    def engine_pid(self) -> int | None:
        """The engine's process id on the backend while one runs; None on this machine (in-process)."""
        with self._lock:
            return None if self._remote is None else self._remote.pid

    def close(self) -> None:
        with self._lock:
            self._drop()


_CACHE: weakref.WeakKeyDictionary[Backend, dict[str, Snapshots]] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def snapshots_for(backend: Backend, root: str, settings: Settings) -> Snapshots:
    """The one Snapshots of `root` on `backend` (made on first use, kept while the backend lives)."""
    with _CACHE_LOCK:
        per_root = _CACHE.setdefault(backend, {})
        found = per_root.get(root)
        if found is None:
            found = per_root[root] = Snapshots(backend, root, settings)
        found.use_settings(settings)
        return found


def _ok(answer: dict[str, Any]) -> dict[str, Any]:
    """An engine process's answer: what it found, or its error raised as a SnapshotError."""
    if "error" in answer:
        raise _error(str(answer["error"]), str(answer.get("kind") or ""))
    reply: dict[str, Any] = answer["ok"]
    return reply
