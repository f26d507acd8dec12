"""The snapshot operations on one workspace, as plain data in and out (so the same calls work
in-process and over serve.py's pipe)."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set

from .apply import Placer, RestoreError, differs, needs_removal, remove_at, set_dir_mode, write_file, write_link
from .scan import Limits, Scan, TooManyFiles
from .store import DIR, FILE, GC_AFTER, LINK, UNCOVERED, Entries, Store, default_store_dir, new_snapshot_id
from .textdiff import unified

Reply = Dict[str, Any]


class SnapshotFailure(Exception):
    """An operation could not be done; the message is for the reader."""

    kind = ""  # what the caller may act on, carried over the pipe


class TooLarge(SnapshotFailure):
    """The workspace holds more files than the limit: it is not snapshotted."""

    kind = "too_large"


def compare(then: Entries, now: Entries) -> Reply:
    """What changed from `then` to `now`: sorted lists added, modified, removed, not_covered."""
    added, modified, removed, uncovered = [], [], [], []
    for rel in sorted(set(then) | set(now)):
        old, new = then.get(rel), now.get(rel)
        if (old is not None and old[0] == UNCOVERED) or (new is not None and new[0] == UNCOVERED):
            uncovered.append(rel)
        elif old is None:
            added.append(rel)
        elif new is None:
            removed.append(rel)
        elif differs(new, old):
            modified.append(rel)
    return {"added": added, "modified": modified, "removed": removed, "not_covered": uncovered}


def _under(rel: str, paths: Set[str]) -> bool:
    """`rel` is one of `paths` or lies below one."""
    probe = rel
    while True:
        if probe in paths:
            return True
        if "/" not in probe:
            return False
        probe = probe.rpartition("/")[0]


def _holders(paths: Set[str]) -> Set[str]:
    """Every directory above one of `paths`."""
    found: Set[str] = set()
    for path in paths:
        while "/" in path:
            path = path.rpartition("/")[0]
            found.add(path)
    return found


class Engine:
    """The snapshots of the workspace at `root`, kept in `store_dir` (None: the default place)."""

    def __init__(self, root: str, store_dir: Optional[str], limits: Limits) -> None:
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise SnapshotFailure("the workspace %s is not a directory" % self.root)
        self.store = Store(store_dir or default_store_dir(self.root))
        self.limits = limits
        self.store_bytes = 0  # the objects' size as the last take found it
        self._recent: Dict[str, Dict[str, Any]] = {}  # manifests read or written lately (they never change)

    def _scan(self, keep_objects: bool) -> Scan:
        self.store_bytes = self.store.read_meta()["bytes"] if keep_objects else 0
        scan = Scan(self.store, self.limits, keep_objects, max(0, self.limits.max_store_bytes - self.store_bytes))
        try:
            scan.run(self.root)
        except TooManyFiles:
            raise TooLarge(
                "the workspace %s holds more than %d files (checkpoints.max_files): it is not snapshotted; "
                "raise checkpoints.max_files or work in a smaller directory" % (self.root, self.limits.max_files)
            ) from None
        return scan

    def _manifest(self, snapshot: str) -> Dict[str, Any]:
        """The manifest of `snapshot` (KeyError: none), from the last few kept in memory."""
        found = self._recent.get(snapshot)
        if found is None or not self.store.has_manifest(snapshot):
            found = self._remember(snapshot, self.store.read_manifest(snapshot))
        return found

    def _remember(self, snapshot: str, manifest: Dict[str, Any]) -> Dict[str, Any]:
        if len(self._recent) >= 4:
            self._recent.pop(next(iter(self._recent)))
        self._recent[snapshot] = manifest
        return manifest

    def _entries(self, snapshot: Optional[str]) -> Entries:
        if snapshot is None:
            return self._scan(False).entries
        try:
            return self._manifest(snapshot)["entries"]  # type: ignore[no-any-return]
        except KeyError:
            raise SnapshotFailure(
                "no snapshot %s of %s (released, or removed by retention)" % (snapshot, self.root)) from None

    def take(self, label: str = "", since: Optional[str] = None, reuse: bool = False) -> Reply:
        """A snapshot of the workspace now; with `since`, what changed from that snapshot too, and
        with `reuse`, `since` itself when nothing did (no new manifest: a run that changed nothing)."""
        with self.store.locked():
            meta = self.store.read_meta()
            if meta["garbage"] and meta["bytes"] > self.limits.max_store_bytes:
                self.store.gc()  # full: what released snapshots held goes first
            before = self._entries(since) if since is not None else None
            scan = self._scan(True)
            if before is not None and since is not None:
                changes = compare(before, scan.entries)
                if reuse and not any(changes.values()):
                    return {"id": since, "not_covered": [], "files": scan.files, "changes": changes,
                            "store_bytes": self.store.read_meta()["bytes"]}
            snapshot = new_snapshot_id()
            manifest = {"label": label, "created": time.time(), "root": self.root, "entries": scan.entries,
                        "added_bytes": scan.added_bytes}
            written = self.store.write_manifest(snapshot, manifest)
            self._remember(snapshot, manifest)
            meta = self.store.add_meta(added=scan.added_bytes + written)
            uncovered = sorted(rel for rel, entry in scan.entries.items() if entry[0] == UNCOVERED)
            reply: Reply = {"id": snapshot, "not_covered": uncovered, "files": scan.files,
                            "store_bytes": meta["bytes"], "store_full": scan.store_full}
            if before is not None:
                reply["changes"] = changes
            return reply

    def changes(self, since: str, until: Optional[str] = None) -> Reply:
        with self.store.locked():
            return compare(self._entries(since), self._entries(until))

    def diff(self, since: str, until: Optional[str] = None, max_bytes: int = 200_000) -> Reply:
        with self.store.locked():
            then, now = self._entries(since), self._entries(until)
            found = compare(then, now)
            text = unified(found, then, now, self.store, self.root, max_bytes)
            return {"diff": text}

    def release(self, snapshot: str, collect: bool = False) -> Reply:
        """Forget `snapshot`; its objects no other snapshot holds are freed now with `collect`,
        else once enough is released (store.GC_AFTER) to be worth a walk of the store."""
        with self.store.locked():
            try:
                added = int(self._manifest(snapshot).get("added_bytes", 0))
            except KeyError:
                return {"released": False, "freed": 0}
            self.store.delete_manifest(snapshot)
            self._recent.pop(snapshot, None)
            meta = self.store.add_meta(garbage=max(added, 1))
            collect = collect or meta["garbage"] >= min(GC_AFTER, self.limits.max_store_bytes // 20)
            return {"released": True, "freed": self.store.gc() if collect else 0}

    def snapshots(self) -> Reply:
        """Every snapshot kept, oldest first, with its label and time; and the store's size."""
        with self.store.locked():
            found = []
            for snapshot in self.store.snapshot_ids():
                try:
                    manifest = self.store.read_manifest(snapshot)
                except KeyError:
                    continue
                found.append({"id": snapshot, "label": manifest.get("label", ""), "created": manifest.get("created", 0),
                              "added_bytes": manifest.get("added_bytes", 0)})
            return {"snapshots": found, "store_bytes": self.store.read_meta()["bytes"]}

    def restore(self, snapshot: str, keep: Iterable[str] = ()) -> Reply:
        with self.store.locked():
            then = self._entries(snapshot)
            now = self._scan(False).entries
            try:
                return self._restore(then, now, set(keep))
            except (OSError, RestoreError) as exc:
                raise SnapshotFailure("the restore of %s stopped part way: %s" % (self.root, exc)) from None

    def _restore(self, then: Entries, now: Entries, keep: Set[str]) -> Reply:
        protected = {rel for rel, entry in then.items() if entry[0] == UNCOVERED} | keep
        done: Dict[str, List[str]] = {"added": [], "modified": [], "removed": [], "not_covered": []}
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        placer = Placer(root_fd, then)
        try:
            removed: Set[str] = set()
            holders = _holders(protected)  # a directory holding a kept path stays
            for rel in sorted(now):
                if _under(rel, removed) or _under(rel, protected) or rel in holders:
                    continue
                if needs_removal(now[rel], then.get(rel)):
                    dir_fd, name = placer.parent(rel)
                    remove_at(dir_fd, name)
                    removed.add(rel)
            done["removed"] = [rel for rel in now if rel not in then and _under(rel, removed)]
            self._put_back(placer, then, now, protected, done)
        finally:
            placer.close()
            os.close(root_fd)
        done["not_covered"] = sorted(rel for rel in protected - keep)
        return {key: sorted(value) for key, value in done.items()}

    def _put_back(self, placer: Placer, then: Entries, now: Entries, protected: Set[str],
                  done: Dict[str, List[str]]) -> None:
        dirs: List[str] = []
        for rel in sorted(then):  # parents before children
            entry = then[rel]
            if entry[0] not in (FILE, LINK, DIR) or _under(rel, protected):
                continue
            current = now.get(rel)
            if not differs(current, entry):
                continue
            if entry[0] == DIR:
                placer.directory(rel)
                dirs.append(rel)
            elif entry[0] == FILE:
                write_file(placer, self.store, rel, entry)
            else:
                write_link(placer, rel, entry)
            done["added" if current is None else "modified"].append(rel)
        for rel in sorted(dirs, key=lambda path: -path.count("/")):  # a read-only parent last
            set_dir_mode(placer, rel, then[rel])


OPERATIONS = ("take", "changes", "diff", "release", "restore", "snapshots")


def handle(engine: Engine, request: Dict[str, Any]) -> Reply:
    """One request {"op": name, ...arguments} answered as {"ok": reply} or {"error": message}."""
    op = request.get("op")
    if op not in OPERATIONS:
        return {"error": "unknown operation %r" % (op,)}
    args = {key: value for key, value in request.items() if key != "op"}
    try:
        return {"ok": getattr(engine, str(op))(**args)}
    except SnapshotFailure as exc:
        return {"error": str(exc), "kind": exc.kind}
    except (OSError, ValueError, TypeError) as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}


def make_engine(root: str, store_dir: Optional[str], max_file_bytes: int, max_files: int,
                max_store_bytes: int, skip: Sequence[str] = ()) -> Engine:
    return Engine(root, store_dir, Limits(max_file_bytes, max_files, max_store_bytes, skip))


__all__ = ["DIR", "Engine", "SnapshotFailure", "TooLarge", "compare", "handle", "make_engine"]
