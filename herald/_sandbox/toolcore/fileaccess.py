"""File access by the operating system, and the rules every backend's reader applies.

Stdlib only, Python >= 3.8 (part of the sandbox package). Herald's local backend reads and
writes through `OsFiles`; in backend mode the supervisor runs the file tools with the same
`OsFiles` next to the script, so a file tool behaves the same either way. Other backends
(SFTP, a file shell) apply `check_regular` and `check_length` themselves.

Reading trusts nothing about the file: a script may point a tool at a FIFO (an open that blocks
for ever), a device (/dev/zero never ends, and reports size 0) or a file that grows while it is
read. So `read_bytes` reads regular files only, checked on the opened file, and never more than
its limit + 1 bytes.

Nor does it trust a path to lead tomorrow where it led when the policy looked: each operation
resolves its path once (an open that follows links, or for a write the parent directory's) and
acts on that descriptor, after checking where the kernel says it is against the call's
confinement (toolcore/callroots.py). A link swapped in between changes nothing: what was checked is
what is read, written or listed.
"""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import stat as st_mod
from typing import List, NamedTuple, Optional, Tuple

from .callroots import PROC_FD, Confinement, where


class NotRegularFileError(OSError):
    """The path is a device, FIFO or socket, not a regular file: reading it could block or never end."""


class FileTooLargeError(OSError):
    """The file holds more bytes than its reader accepts (`max_bytes`); `size` is what its stat
    said, when that was already too much (None: it held more than its stat said)."""

    size: Optional[int] = None


def check_regular(path: str, mode: int, size: int, max_bytes: int) -> None:
    """Refuse to read what `mode` and `size` (a stat of `path`) describe unless it is a regular
    file of at most `max_bytes`: the one rule every backend's `read_bytes` applies."""
    if st_mod.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if not st_mod.S_ISREG(mode):
        raise NotRegularFileError(errno.EINVAL, "not a regular file (%s)" % _kind(mode), path)
    if size > max_bytes:
        error = FileTooLargeError(
            errno.EFBIG, "the file is {:,} bytes, over the {:,}-byte limit".format(size, max_bytes), path
        )
        error.size = size
        raise error


def check_length(path: str, data: bytes, max_bytes: int) -> bytes:
    """`data` read with a limit of `max_bytes` + 1, refused when it ran past `max_bytes` (the file
    grew, or claimed a smaller size than it has)."""
    if len(data) > max_bytes:
        raise FileTooLargeError(errno.EFBIG, "the file holds over {:,} bytes".format(max_bytes), path)
    return data


def _kind(mode: int) -> str:
    for test, name in ((st_mod.S_ISFIFO, "a FIFO"), (st_mod.S_ISCHR, "a character device"),
                       (st_mod.S_ISBLK, "a block device"), (st_mod.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


@functools.lru_cache(maxsize=1024)
def resolve_path(cwd: str, path: str) -> str:
    """Absolute POSIX path for `path` relative to `cwd`, with `~` left to the backend's HOME."""
    if not path:
        raise ValueError("empty path")
    if path == "~" or path.startswith("~/"):
        return path  # the backend expands it
    if posixpath.isabs(path):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd, path))


class FileInfo(NamedTuple):
    """A file's stat as the file tools need it; the Backend protocol's FileStat is this type."""

    path: str
    size: int
    is_dir: bool
    is_file: bool
    mtime: float
    mode: int


class OsFiles:
    """read_bytes / write_bytes / stat / list_dir of absolute paths, by the operating system,
    each confined by `confinement` (None: anywhere) on the object it acts on (toolcore/callroots.py)."""

    def __init__(self, default_max_bytes: int, confinement: Optional[Confinement] = None) -> None:
        self.default_max_bytes = default_max_bytes
        self.confinement = confinement

    def read_bytes(self, target: str, max_bytes: Optional[int] = None) -> bytes:
        return read_bytes(target, self.default_max_bytes if max_bytes is None else max_bytes, self.confinement)

    def write_bytes(self, path: str, data: bytes) -> None:
        write_bytes(path, data, self.confinement)

    def stat(self, target: str) -> Optional[FileInfo]:
        return stat(target, self.confinement)


_PATH_FLAGS = getattr(os, "O_PATH", 0) | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = _PATH_FLAGS | os.O_DIRECTORY


def read_bytes(target: str, limit: int, confinement: Optional[Confinement]) -> bytes:
    """The regular file at `target` (links followed), at most `limit` bytes: opened once without
    reading (O_PATH: a FIFO does not block, a device's open has no effect), checked where the
    kernel says it is and what it is, then read through that descriptor."""
    held = os.open(target, _PATH_FLAGS)
    try:
        if confinement is not None:
            confinement.check(target, where(held, target), False)
        opened = os.fstat(held)
        check_regular(target, opened.st_mode, opened.st_size, limit)
        # O_NONBLOCK: should it be a FIFO after all, the open returns at once.
        fd = (
            os.open(PROC_FD % held, _READ_FLAGS)
            if confinement is not None or _HAVE_PROC
            else os.open(target, _READ_FLAGS)
        )
    finally:
        os.close(held)
    try:
        if confinement is None and not _HAVE_PROC:  # opened by name again: look at what it is now
            opened = os.fstat(fd)
            check_regular(target, opened.st_mode, opened.st_size, limit)
        chunks: List[bytes] = []
        got = 0
        left = limit + 1
        # The first read asks for what the file holds (and one byte more), not 1 MiB: a
        # large buffer costs an allocation the size of the request on every small read.
        want = min(left, max(opened.st_size + 1, 1 << 16))
        while left > 0:
            want = min(left, want)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            left -= len(chunk)
            # A short read past the size the file had when opened is its end: no read
            # only to see EOF.
            if len(chunk) < want and got >= opened.st_size:
                break
            want = 1 << 20
    finally:
        os.close(fd)
    return check_length(target, b"".join(chunks), limit)


def write_bytes(path: str, data: bytes, confinement: Optional[Confinement], _links: int = 0) -> None:
    """Atomically replace `path` (temp file + rename), creating parent directories. All of it
    happens inside the parent directory as opened once and checked (its place, and the file's
    there): the temp file is created and renamed relative to that descriptor. Through a final
    symlink, the file it points to is replaced (renaming over the link would make a separate
    copy), when that place passes the same check; the file keeps its mode, a new one gets what
    the umask allows."""
    parent, name = posixpath.split(posixpath.normpath(path))
    if not name:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    directory = _open_parent(parent, path, confinement)
    try:
        place = _place(directory, parent, confinement)
        if confinement is not None:
            confinement.check(path, posixpath.join(place, name), True)
        try:
            found: Optional[os.stat_result] = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            found = None
        if found is not None and st_mod.S_ISLNK(found.st_mode):
            if _links >= _MAX_LINKS:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links", path)
            leads = posixpath.join(place, os.readlink(name, dir_fd=directory))
            return write_bytes(posixpath.normpath(leads), data, confinement, _links + 1)
        if found is not None and st_mod.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        mode = found.st_mode & 0o7777 if found is not None else 0o666 & ~_UMASK
        temp = ".herald-%s.tmp" % os.urandom(6).hex()
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=directory)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=directory)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(directory)


def _open_parent(parent: str, path: str, confinement: Optional[Confinement]) -> int:
    """A descriptor of directory `parent` (links followed), its missing directories created one
    by one below the nearest existing one, each relative to the last and never through a link,
    once that one's place passes the check for what is created there."""
    try:
        return os.open(parent or "/", _DIR_FLAGS)
    except FileNotFoundError:
        pass
    missing: List[str] = []
    head = parent
    while True:
        head, tail = posixpath.split(head)
        missing.append(tail)
        try:
            directory = os.open(head or "/", _DIR_FLAGS)
            break
        except FileNotFoundError:
            if head in ("", "/"):
                raise
    try:
        if confinement is not None:
            confinement.check(path, posixpath.join(where(directory, head), *reversed(missing)), True)
        for name in reversed(missing):
            try:
                os.mkdir(name, 0o777, dir_fd=directory)
            except FileExistsError:
                pass
            below = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=directory)
            os.close(directory)
            directory = below
    except BaseException:
        os.close(directory)
        raise
    return directory


def _place(fd: int, path: str, confinement: Optional[Confinement]) -> str:
    """Where the descriptor `fd` of `path` is; without a confinement and /proc, `path` itself."""
    if confinement is None and not _HAVE_PROC:
        return path
    return where(fd, path)


def stat(target: str, confinement: Optional[Confinement]) -> Optional[FileInfo]:
    """The file at `target` (links followed), None when nothing is there; under a confinement,
    Refused when it lies out of reach for reading."""
    if confinement is None:
        try:
            st = os.stat(target)
        except (FileNotFoundError, NotADirectoryError):
            return None
    else:
        try:
            held = os.open(target, _PATH_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            confinement.check(target, where(held, target), False)
            st = os.fstat(held)
        finally:
            os.close(held)
    return FileInfo(target, st.st_size, st_mod.S_ISDIR(st.st_mode), st_mod.S_ISREG(st.st_mode),
                    st.st_mtime, st.st_mode)


def open_dir(path: str, confinement: Optional[Confinement]) -> Tuple[int, str]:
    """(a descriptor of the directory at `path`, links followed, and where it really is), its
    place checked for reading; the caller closes the descriptor."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        place = _place(fd, path, confinement)
        if confinement is not None:
            confinement.check(path, place, False)
    except BaseException:
        os.close(fd)
        raise
    return fd, place


_MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
_HAVE_PROC = os.path.isdir("/proc/self/fd")


# Reading the umask means setting it: once, at import, before threads exist.
_UMASK = os.umask(0)
os.umask(_UMASK)
