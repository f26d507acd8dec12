"""Putting a snapshot back, acting only on directories opened without following a link.

Every operation names one component inside a directory descriptor that was itself reached from
the workspace root one O_NOFOLLOW|O_DIRECTORY open at a time, so a link planted anywhere in the
workspace (before or during the restore) is replaced or removed as a link, never entered. Files
are written to a temp file in their directory and renamed over the name.
"""

from __future__ import annotations

import errno
import os
from typing import Dict, List, Optional, Tuple

from .scan import DIR_FLAGS
from .store import DIR, FILE, LINK, Entries, Entry, Store

TEMP_PREFIX = ".herald-restore-"
_AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


class RestoreError(Exception):
    """A path could not be put back; the message names it and why."""


def remove_at(dir_fd: int, name: str) -> None:
    """Remove `name` in `dir_fd` whatever it is (a directory with everything below it), never
    following a link."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.EPERM):
            raise
    try:
        sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT,):
            return
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link or file meanwhile
            os.unlink(name, dir_fd=dir_fd)
            return
        raise
    try:
        with os.scandir(sub) as listing:
            names = [item.name for item in listing]
        for child in names:
            remove_at(sub, child)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dir_fd)


class Placer:
    """Opens the workspace's directories for a restore, one component at a time, making what
    the snapshot has as a directory one again when something else stands there."""

    def __init__(self, root_fd: int, target: Entries) -> None:
        self.root_fd = root_fd
        self.target = target
        self.fds: Dict[str, int] = {"": root_fd}

    def close(self) -> None:
        for rel, fd in self.fds.items():
            if rel:
                os.close(fd)
        self.fds = {"": self.root_fd}

    def parent(self, rel: str) -> Tuple[int, str]:
        """(descriptor of the directory holding `rel`, its last component)."""
        head, _, name = rel.rpartition("/")
        return self.directory(head), name

    def directory(self, rel: str) -> int:
        fd = self.fds.get(rel)
        if fd is not None:
            return fd
        parent_fd, name = self.parent(rel)
        for _ in range(4):
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
                break
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise RestoreError("%s: %s" % (rel, exc.strerror)) from None
            remove_at(parent_fd, name)  # a link, file or nothing where a directory belongs
            entry = self.target.get(rel)
            try:
                os.mkdir(name, 0o700 if entry is None else entry[1] | 0o700, dir_fd=parent_fd)
            except FileExistsError:
                pass
        else:
            raise RestoreError("%s: kept changing into something else while it was restored" % rel)
        self.fds[rel] = fd
        return fd


def write_file(placer: Placer, store: Store, rel: str, entry: Entry) -> None:
    data = store.get_object(entry[4])
    dir_fd, name = placer.parent(rel)
    temp = TEMP_PREFIX + os.urandom(6).hex()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        _own(fd, entry)
        os.fchmod(fd, entry[1])
    except BaseException:
        os.close(fd)
        os.unlink(temp, dir_fd=dir_fd)
        raise
    os.close(fd)
    _rename_over(dir_fd, temp, name)


def write_link(placer: Placer, rel: str, entry: Entry) -> None:
    dir_fd, name = placer.parent(rel)
    temp = TEMP_PREFIX + os.urandom(6).hex()
    os.symlink(entry[4], temp, dir_fd=dir_fd)
    if _AS_ROOT:
        try:
            os.chown(temp, entry[5], entry[6], dir_fd=dir_fd, follow_symlinks=False)
        except (OSError, IndexError):
            pass
    _rename_over(dir_fd, temp, name)


def _rename_over(dir_fd: int, temp: str, name: str) -> None:
    for _ in range(4):
        try:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                os.unlink(temp, dir_fd=dir_fd)
                raise
            remove_at(dir_fd, name)  # a directory stands where the file belongs
    os.unlink(temp, dir_fd=dir_fd)
    raise RestoreError("%s kept changing into a directory while it was restored" % name)


def _own(fd: int, entry: Entry) -> None:
    if _AS_ROOT:  # only root can give a file back to its owner
        try:
            os.fchown(fd, entry[5], entry[6])
        except (OSError, IndexError):
            pass


def set_dir_mode(placer: Placer, rel: str, entry: Entry) -> None:
    fd = placer.directory(rel)
    _own(fd, entry)
    os.fchmod(fd, entry[1])


def needs_removal(now: Optional[Entry], then: Optional[Entry]) -> bool:
    """Whether what stands at a path now must go before the snapshot's entry can be put back."""
    if now is None:
        return False
    if then is None:
        return True
    return now[0] != then[0] and then[0] in (FILE, LINK, DIR)


def differs(now: Optional[Entry], then: Entry) -> bool:
    if now is None or now[0] != then[0]:
        return True
    if then[0] == DIR:
        return bool(now[1] != then[1])
    return bool(now[4] != then[4] or (then[0] == FILE and now[1] != then[1]))


def depth_first(paths: List[str]) -> List[str]:
    return sorted(paths, key=lambda rel: (-rel.count("/"), rel))

