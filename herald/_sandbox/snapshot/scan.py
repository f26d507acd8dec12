"""The workspace as a manifest, walked on directory descriptors: no link is ever followed.

A regular file whose stat matches the index (dev, ino, size, mtime_ns, ctime_ns) keeps its
sha256 without a read; one changed in the last seconds is not indexed (a write in the same
timestamp tick would leave its stat unchanged), so it is read again next time.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat as st_mod
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .store import DIR, FILE, LINK, UNCOVERED, Entries, Store

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
RACY_NS = 2_000_000_000  # files changed this recently are read again next time


class TooManyFiles(Exception):
    """The workspace holds more than the limit of files: it is not snapshotted at all."""


class Limits:
    def __init__(self, max_file_bytes: int, max_files: int, max_store_bytes: int,
                 skip: Sequence[str] = ()) -> None:
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self.max_store_bytes = max_store_bytes
        self.skip = tuple(skip)  # directories never snapshotted nor restored (Herald's own data)


def read_regular(dir_fd: int, name: str, expect: Optional[os.stat_result], limit: int) -> Optional[bytes]:
    """The bytes of the regular file `name` in `dir_fd`, opened without following a link and
    checked on the descriptor; None when it is not (any more) that regular file or grew past `limit`."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not st_mod.S_ISREG(info.st_mode):
            return None
        if expect is not None and (info.st_dev, info.st_ino) != (expect.st_dev, expect.st_ino):
            return None
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return None if len(data) > limit else data
    finally:
        os.close(fd)


class Scan:
    """One walk of the workspace. With `store`, the bytes of new files are kept there (a take);
    without, they are only hashed (the workspace now, for changes and restore)."""

    def __init__(self, store: Store, limits: Limits, keep_objects: bool, budget: int) -> None:
        self.store = store
        self.limits = limits
        self.keep_objects = keep_objects
        self.budget = budget  # bytes the store may still grow by
        self.index = store.read_index()
        self.new_index: Dict[str, List[Any]] = {}
        self.entries: Entries = {}
        self.files = 0
        self.added_bytes = 0
        self.store_full = False  # a file was left out for the store's size
        self.started_ns = time.time_ns()
        # Never walked, never restored: every store (this one's parent holds the others, which a
        # restore of a workspace around them must not delete) and what the caller names.
        self.skip: Set[Tuple[int, int]] = set()
        for path in (store.path, os.path.dirname(store.path), *limits.skip):
            try:
                info = os.stat(path)
                self.skip.add((info.st_dev, info.st_ino))
            except OSError:
                pass

    def run(self, root: str) -> Entries:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._walk(fd, "")
        finally:
            os.close(fd)
        if self.new_index != self.index:
            self.store.write_index(self.new_index)
        return self.entries

    def _walk(self, dir_fd: int, prefix: str) -> None:
        with os.scandir(dir_fd) as listing:
            items = sorted(listing, key=lambda item: item.name)
        for item in items:
            rel = prefix + item.name
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if (info.st_dev, info.st_ino) in self.skip:
                continue
            self.files += 1
            if self.files > self.limits.max_files:
                raise TooManyFiles(self.limits.max_files)
            mode = info.st_mode
            base = [st_mod.S_IMODE(mode), info.st_size, info.st_mtime_ns]
            owner = [info.st_uid, info.st_gid]
            if st_mod.S_ISDIR(mode):
                self.entries[rel] = [DIR, *base, "", *owner]
                self._enter(dir_fd, item.name, rel)
            elif st_mod.S_ISLNK(mode):
                try:
                    target = os.readlink(item.name, dir_fd=dir_fd)
                except OSError:
                    continue
                self.entries[rel] = [LINK, *base, target, *owner]
            elif st_mod.S_ISREG(mode):
                sha = self._file(dir_fd, item.name, rel, info)
                self.entries[rel] = ([FILE] if sha else [UNCOVERED]) + base + [sha or ""] + owner
            else:
                self.entries[rel] = [UNCOVERED, *base, "", *owner]  # a FIFO, socket or device

    def _enter(self, dir_fd: int, name: str, rel: str) -> None:
        try:
            sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                return  # replaced meanwhile: what it became is not this walk's
            self.entries[rel][0] = UNCOVERED  # unreadable: its contents are unknown
            return
        try:
            self._walk(sub, rel + "/")
        except PermissionError:
            self.entries[rel][0] = UNCOVERED
        finally:
            os.close(sub)

    def _file(self, dir_fd: int, name: str, rel: str, info: os.stat_result) -> str:
        """The file's sha256, or "" when a limit leaves it out."""
        if info.st_size > self.limits.max_file_bytes:
            return ""
        key = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
        known = self.index.get(rel)
        if known is not None and len(known) == 7 and known[:5] == key and (known[6] or not self.keep_objects):
            self.new_index[rel] = known
            return str(known[5])
        data = read_regular(dir_fd, name, info, self.limits.max_file_bytes)
        if data is None:
            return ""
        sha = hashlib.sha256(data).hexdigest()
        if self.keep_objects and not self.store.has_object(sha):
            if len(data) > self.budget - self.added_bytes:
                self.store_full = True
                return ""  # the store is full: this file is not covered
            self.added_bytes += self.store.put_object(sha, data)
        if len(data) == info.st_size and max(info.st_mtime_ns, info.st_ctime_ns) < self.started_ns - RACY_NS:
            stored = 1 if self.keep_objects or (known is not None and len(known) == 7 and known[5] == sha
                                                and known[6]) else 0
            self.new_index[rel] = [*key, sha, stored]
        return sha

