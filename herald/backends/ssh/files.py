"""File access over SFTP, with the local backend's semantics and its standard OSError types.

SFTP servers report many failures as a bare "Failure" without an errno (reading a directory,
listing a file); where that matters the path is looked at to raise the error a local call would.
Callers hold the connection's SFTP lock.
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat as st_mod

import paramiko

from ..base import DirEntry, FileStat, check_length, check_regular

MAX_SYMLINK_HOPS = 40
PREFETCH_FROM = 64 * 1024


def _error(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)  # OSError picks the subclass from the errno


def _with_path(exc: OSError, path: str) -> OSError:
    """paramiko's IOError without the file name (or without an errno) as a local call's error."""
    if exc.errno is not None:
        return _error(exc.errno, path)
    return OSError(errno.EIO, f"{exc.args[0] if exc.args else 'SFTP failure'}", path)


def _stat(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPAttributes | None:
    try:
        return sftp.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise _with_path(exc, path) from None


def stat(sftp: paramiko.SFTPClient, path: str) -> FileStat | None:
    attrs = _stat(sftp, path)
    if attrs is None:
        return None
    mode = attrs.st_mode or 0
    return FileStat(
        path=path,
        size=attrs.st_size or 0,
        is_dir=st_mod.S_ISDIR(mode),
        is_file=st_mod.S_ISREG(mode),
        mtime=float(attrs.st_mtime or 0),
        mode=mode,
    )


def read_bytes(sftp: paramiko.SFTPClient, path: str, max_bytes: int) -> bytes:
    """The regular file at `path`, at most `max_bytes` (see Backend.read_bytes).

    SFTP has no non-blocking open, and the server's open of a FIFO waits for a writer (holding
    the connection's SFTP channel): the path is looked at before opening, and the opened
    handle again (the server fstats it), which leaves only a swap between the two unguarded.
    """
    try:
        info = _stat(sftp, path)
        if info is None:
            raise _error(errno.ENOENT, path)
        check_regular(path, info.st_mode or 0, info.st_size or 0, max_bytes)
        with sftp.open(path, "rb") as fh:
            attrs = fh.stat()
            size = attrs.st_size or 0
            check_regular(path, attrs.st_mode or 0, size, max_bytes)
            if size > PREFETCH_FROM:  # pipelined reads (on a thread): not one round trip per 32 KB
                fh.prefetch(size)
            # One byte past the limit tells a file that grew since the stat.
            data: bytes = fh.read(max_bytes + 1)
            return check_length(path, data, max_bytes)
    except OSError as exc:
        if exc.filename == path:
            raise
        info = None if exc.errno is not None else _stat(sftp, path)
        raise (_error(errno.EISDIR, path) if info and st_mod.S_ISDIR(info.st_mode or 0) else _with_path(exc, path)) from None


def list_dir(sftp: paramiko.SFTPClient, path: str) -> list[DirEntry]:
    try:
        listing = sftp.listdir_attr(path)
    except OSError as exc:
        info = _stat(sftp, path)
        if info is None:
            raise _error(errno.ENOENT, path) from None
        if not st_mod.S_ISDIR(info.st_mode or 0):
            raise _error(errno.ENOTDIR, path) from None
        raise _with_path(exc, path) from None
    entries = []
    for attrs in listing:
        mode = attrs.st_mode or 0
        is_link = st_mod.S_ISLNK(mode)
        if is_link:  # listings describe the link itself; say what it points to, as scandir does
            target = _stat(sftp, posixpath.join(path, attrs.filename))
            mode = (target.st_mode or 0) if target is not None else 0
        entries.append(DirEntry(attrs.filename, st_mod.S_ISDIR(mode), st_mod.S_ISREG(mode), is_link))
    return entries


def _resolve_links(sftp: paramiko.SFTPClient, path: str) -> tuple[str, paramiko.SFTPAttributes | None]:
    """The file a write to `path` must replace: `path`, or where its symlinks lead (a dangling
    link's target too), with that file's attributes (None when it does not exist yet)."""
    for _ in range(MAX_SYMLINK_HOPS):
        try:
            attrs = sftp.lstat(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return path, None
            raise _with_path(exc, path) from None
        if not st_mod.S_ISLNK(attrs.st_mode or 0):
            return path, attrs
        link = sftp.readlink(path)
        if link is None:
            return path, attrs
        path = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
    raise _error(errno.ELOOP, path)


def _make_parents(sftp: paramiko.SFTPClient, directory: str) -> None:
    missing = []
    while directory not in ("/", ""):
        info = _stat(sftp, directory)
        if info is not None:
            if not st_mod.S_ISDIR(info.st_mode or 0):
                raise _error(errno.ENOTDIR, directory)
            break
        missing.append(directory)
        directory = posixpath.dirname(directory)
    for path in reversed(missing):
        try:
            sftp.mkdir(path)
        except OSError as exc:
            if _stat(sftp, path) is None:  # not a lost race with someone else's mkdir
                raise _with_path(exc, path) from None


def write_bytes(sftp: paramiko.SFTPClient, path: str, data: bytes) -> None:
    """Write a temp file next to the target, give it the target's mode, rename it over the target.

    Through a symlink the file it points to is replaced (renaming over the link would turn it
    into a separate copy); missing parent directories are created (looked for only when the
    temp file cannot be made: the common case costs no extra round trips).
    """
    target, existing = _resolve_links(sftp, path)
    if existing is not None and st_mod.S_ISDIR(existing.st_mode or 0):
        raise _error(errno.EISDIR, target)
    parent = posixpath.dirname(target)
    temp = posixpath.join(parent, f".herald-{secrets.token_hex(6)}.tmp")
    try:
        try:
            handle = sftp.open(temp, "wb")
        except FileNotFoundError:  # also what SFTP says when a parent is a file
            _make_parents(sftp, parent)
            handle = sftp.open(temp, "wb")
        with handle as fh:
            if existing is not None:  # before the data, so a private file's text is never exposed
                fh.chmod((existing.st_mode or 0) & 0o7777)
            fh.set_pipelined(True)  # acks are collected at close, not awaited per 32 KB
            fh.write(data)
        sftp.posix_rename(temp, target)
    except OSError as exc:
        try:
            sftp.remove(temp)
        except OSError:
            pass
        raise _with_path(exc, target) from None
