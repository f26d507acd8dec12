"""File access by the operating system, and the rules every backend's reader applies.

Stdlib only, Python >= 3.8 (part of the sandbox package). Herald's local backend reads and
writes through `OsFiles`; in backend mode the supervisor runs the file tools with the same
`OsFiles` next to the script, so a file tool behaves the same either way. Other backends
(SFTP, a file shell) apply `check_regular` and `check_length` themselves.

Reading trusts nothing about the file: a script may point a tool at a FIFO (an open that blocks
for ever), a device (/dev/zero never ends, and reports size 0) or a file that grows while it is
read. So `read_bytes` reads regular files only, checked on the opened file, and never more than
its limit + 1 bytes.
"""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import stat as st_mod
import tempfile
from typing import List, NamedTuple, Optional


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
    """read_bytes / write_bytes / stat of absolute paths, by the operating system."""

    def __init__(self, default_max_bytes: int) -> None:
        self.default_max_bytes = default_max_bytes

    def read_bytes(self, target: str, max_bytes: Optional[int] = None) -> bytes:
        limit = self.default_max_bytes if max_bytes is None else max_bytes
        # Looked at before opening too: opening some devices has effects of its own.
        before = os.stat(target)
        check_regular(target, before.st_mode, before.st_size, limit)
        # O_NONBLOCK: should the path have become a FIFO since, the open returns at once and
        # the fstat of what was opened refuses it.
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
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
                # only to see EOF (one system call of a small read's five).
                if len(chunk) < want and got >= opened.st_size:
                    break
                want = 1 << 20
        finally:
            os.close(fd)
        return check_length(target, b"".join(chunks), limit)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Atomically replace `path` (temp file + rename), creating parent directories. Through
        a symlink, the file it points to is replaced (renaming over the link would turn it into
        a separate copy); the file keeps its mode, a new one gets what the umask allows."""
        target = os.path.realpath(path)
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_UMASK
        fd, tmp = tempfile.mkstemp(prefix=".herald-", suffix=".tmp", dir=parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def stat(self, target: str) -> Optional[FileInfo]:
        try:
            st = os.stat(target)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return FileInfo(target, st.st_size, st_mod.S_ISDIR(st.st_mode), st_mod.S_ISREG(st.st_mode),
                        st.st_mtime, st.st_mode)


# Reading the umask means setting it: once, at import, before threads exist.
_UMASK = os.umask(0)
os.umask(_UMASK)
