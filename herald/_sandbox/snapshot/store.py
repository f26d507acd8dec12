"""Where snapshots live: objects by sha256, manifests, the stat index; one lock per store.

Layout under the store directory (outside the workspace, or skipped by the scan when inside):
    objects/ab/cdef...   a file's bytes, named by their sha256 (written to tmp/, then renamed)
    snapshots/ID.json    one manifest: {"label", "created", "entries": {relpath: entry}}
    index.json           the stat index: {relpath: [dev, ino, size, mtime_ns, ctime_ns, sha, stored]}
                         (stored: 1 when the object is in objects/; gc clears it)
    meta.json            {"bytes": the objects' size, "garbage": what released snapshots may free}
    lock                 flock'ed around every operation (Herald processes may share a store)

Objects are collected lazily: a release deletes its manifest at once, and gc() runs once the
bytes it may free pass GC_AFTER (or when asked, or when the store is full), so a run that
changed nothing does not walk the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Set

# A manifest entry: [kind, mode, size, mtime_ns, sha | link target | "", uid, gid]
# kinds: "f" regular file, "l" symlink, "d" directory, "x" present but not covered by a limit
Entry = List[Any]
Entries = Dict[str, Entry]

FILE, LINK, DIR, UNCOVERED = "f", "l", "d", "x"
GC_AFTER = 32 << 20


def default_store_dir(root: str) -> str:
    """The store of the workspace `root` on this machine: under the user's data directory, or
    under /tmp when there is no home to write to (a container's user may have none)."""
    name = hashlib.sha256(os.path.abspath(root).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    for parent in (os.path.join(base, "herald", "snapshots"), "/tmp/herald-snapshots-%d" % os.getuid()):
        try:
            os.makedirs(parent, mode=0o700, exist_ok=True)
            if os.access(parent, os.W_OK | os.X_OK):
                return os.path.join(parent, name)
        except OSError:
            continue
    raise OSError("no writable place for snapshots (tried %s and /tmp)" % base)


def write_atomic(path: str, data: bytes) -> None:
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), time.monotonic_ns())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


class Store:
    """One workspace's snapshots. Not thread-safe by itself: callers hold `locked()`."""

    def __init__(self, path: str) -> None:
        self.path = path
        for sub in ("objects", "snapshots", "tmp"):
            os.makedirs(os.path.join(path, sub), mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.path, "lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    # objects

    def _object_path(self, sha: str) -> str:
        return os.path.join(self.path, "objects", sha[:2], sha[2:])

    def has_object(self, sha: str) -> bool:
        return os.path.exists(self._object_path(sha))

    def put_object(self, sha: str, data: bytes) -> int:
        """Keep `data` (whose sha256 is `sha`); the bytes added to the store (0: it had them).
        The caller adds them to meta's "bytes" (add_bytes) once its scan is done."""
        path = self._object_path(sha)
        if os.path.exists(path):
            return 0
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_atomic(path, data)
        return len(data)

    def read_meta(self) -> Dict[str, int]:
        try:
            with open(os.path.join(self.path, "meta.json"), "rb") as handle:
                meta = json.loads(handle.read().decode())
            return {"bytes": int(meta["bytes"]), "garbage": int(meta["garbage"])}
        except (OSError, ValueError, KeyError, TypeError):
            meta = {"bytes": self.objects_size(), "garbage": 0}
            self.write_meta(meta)
            return meta

    def write_meta(self, meta: Dict[str, int]) -> None:
        write_atomic(os.path.join(self.path, "meta.json"), json.dumps(meta).encode())

    def add_meta(self, added: int = 0, garbage: int = 0) -> Dict[str, int]:
        meta = self.read_meta()
        meta["bytes"] += added
        meta["garbage"] += garbage
        self.write_meta(meta)
        return meta

    def get_object(self, sha: str) -> bytes:
        with open(self._object_path(sha), "rb") as handle:
            data = handle.read()
        if hashlib.sha256(data).hexdigest() != sha:
            raise OSError("the snapshot store is damaged: object %s does not match its name" % sha[:12])
        return data

    def objects_size(self) -> int:
        """What the store holds: objects and manifests (a manifest of a big tree is not small)."""
        total = 0
        top = os.path.join(self.path, "objects")
        for sub in os.scandir(top):
            if sub.is_dir(follow_symlinks=False):
                for item in os.scandir(sub.path):
                    total += item.stat(follow_symlinks=False).st_size
        for item in os.scandir(os.path.join(self.path, "snapshots")):
            total += item.stat(follow_symlinks=False).st_size
        return total

    # manifests

    def _manifest_path(self, snapshot: str) -> str:
        if not snapshot or "/" in snapshot or snapshot.startswith("."):
            raise KeyError(snapshot)
        return os.path.join(self.path, "snapshots", snapshot + ".json")

    def write_manifest(self, snapshot: str, manifest: Dict[str, Any]) -> int:
        """Keep `manifest`; its size in bytes."""
        data = json.dumps(manifest, separators=(",", ":")).encode()
        write_atomic(self._manifest_path(snapshot), data)
        return len(data)

    def read_manifest(self, snapshot: str) -> Dict[str, Any]:
        try:
            with open(self._manifest_path(snapshot), "rb") as handle:
                return json.loads(handle.read().decode())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            raise KeyError(snapshot) from None

    def has_manifest(self, snapshot: str) -> bool:
        """Whether `snapshot` is still kept (another process may have released it)."""
        try:
            return os.path.exists(self._manifest_path(snapshot))
        except KeyError:
            return False

    def delete_manifest(self, snapshot: str) -> bool:
        try:
            os.unlink(self._manifest_path(snapshot))
            return True
        except (OSError, KeyError):
            return False

    def snapshot_ids(self) -> List[str]:
        """Every snapshot kept, oldest first (ids sort by time)."""
        names = os.listdir(os.path.join(self.path, "snapshots"))
        return sorted(name[:-5] for name in names if name.endswith(".json") and not name.startswith("."))

    # the stat index

    def read_index(self) -> Dict[str, List[Any]]:
        try:
            with open(os.path.join(self.path, "index.json"), "rb") as handle:
                index = json.loads(handle.read().decode())
            return index if isinstance(index, dict) else {}
        except (OSError, ValueError):
            return {}

    def write_index(self, index: Dict[str, List[Any]]) -> None:
        write_atomic(os.path.join(self.path, "index.json"), json.dumps(index, separators=(",", ":")).encode())

    # collection

    def gc(self) -> int:
        """Delete the objects no manifest refers to; the bytes freed since meta last counted
        (released manifests included). The index forgets that it stored them."""
        counted = self.read_meta()["bytes"]
        live: Set[str] = set()
        for snapshot in self.snapshot_ids():
            try:
                entries = self.read_manifest(snapshot)["entries"]
            except KeyError:
                continue
            live.update(entry[4] for entry in entries.values() if entry[0] == FILE)
        freed = 0
        top = os.path.join(self.path, "objects")
        for sub in os.scandir(top):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for item in os.scandir(sub.path):
                if sub.name + item.name not in live:
                    freed += item.stat(follow_symlinks=False).st_size
                    os.unlink(item.path)
        for item in os.scandir(os.path.join(self.path, "tmp")):
            with contextlib.suppress(OSError):
                os.unlink(item.path)
        if freed:
            index = self.read_index()
            for entry in index.values():
                if len(entry) > 6 and entry[5] not in live:
                    entry[6] = 0
            self.write_index(index)
        total = self.objects_size()
        self.write_meta({"bytes": total, "garbage": 0})
        return max(freed, counted - total)


def new_snapshot_id() -> str:
    """Sortable by time, unique: 20261127T221530.123456-3fa9."""
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return "%s.%06d-%s" % (stamp, int((now % 1) * 1e6), os.urandom(2).hex())


def option(value: Optional[int], default: int) -> int:
    return default if value is None else int(value)
