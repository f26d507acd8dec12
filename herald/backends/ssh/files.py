"""File access over SFTP, with the local backend's semantics and its standard OSError types.

Round trips (each a batch of pipelined requests, sftp.py), once the session predicts handles:
- read: OPEN + FSTAT + READs of the whole expected size (one more byte shows the end) -> 1;
  a STAT before it (a FIFO's OPEN would block the server) unless the caller just saw a
  regular file there -> 2 at most. The CLOSE is not awaited.
- write (filewrite.py): REALPATH + LSTAT + OPEN of a private temp file + WRITEs + CLOSE -> 1; SETSTAT (the
  target's mode) + rename over the target -> 1. The rename waits for the writes' answers, so a
  failed write never replaces the target.
- where a path leads (the workspace check): REALPATH + STAT -> 1, the STAT answering the
  tool's own stat right after. A read or write of a path so checked carries a REALPATH in its
  first flight (no extra round trip) and goes no further unless the path still leads there.

SFTP servers report many failures as a bare "Failure" without an errno (reading a directory,
listing a file); where that matters the path is looked at to raise the error a local call would.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as st_mod

from ..base import DirEntry, FileStat, check_length, check_regular
from ..realpath import moved, resolve_links
from .sftp import (
    CHUNK,
    FLAG_READ,
    FSTAT,
    READLINK,
    REALPATH,
    STAT,
    Attrs,
    Reply,
    SFTPSession,
    handle_field,
)

MAX_IN_FLIGHT = 64  # READ/WRITE requests per batch (2 MiB)
PROC_FD = "/proc/self/fd"  # in the SFTP server: its own descriptors, an open handle among them
FDS_LOOKED = (3, 4, 5)  # where its first free one is (0-2 are its pipes to sshd; a log socket may hold 3)


def path_error(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)  # OSError picks the subclass from the errno


def with_path(exc: OSError, path: str) -> OSError:
    """An SFTP error without the file name (or without an errno) as a local call's error."""
    if exc.errno is not None:
        return path_error(exc.errno, path)
    return OSError(errno.EIO, f"{exc.args[0] if exc.args else 'SFTP failure'}", path)


def _stat(s: SFTPSession, path: str, follow: bool = True) -> Attrs | None:
    try:
        return s.stat(path, follow=follow)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise with_path(exc, path) from None


def to_filestat(path: str, attrs: Attrs) -> FileStat:
    mode = attrs.st_mode
    return FileStat(path=path, size=attrs.st_size, is_dir=st_mod.S_ISDIR(mode), is_file=st_mod.S_ISREG(mode),
                    mtime=float(attrs.mtime or 0), mode=mode)


def stat(s: SFTPSession, path: str) -> Attrs | None:
    return _stat(s, path)


# -- where a path leads -----------------------------------------------------------------------


def _answer(s: SFTPSession, kind: int, path: str) -> str | None:
    reply = s.wait(s.send_path(kind, path))[0]
    return reply.names[0][0] if reply.error() is None and reply.names else None


def leads_to(s: SFTPSession, path: str, answer: Reply) -> str:
    """Where `path` leads, from the answer to a REALPATH of it sent earlier; where the server
    could not resolve it (OpenSSH resolves a missing last component, not a missing directory or
    a dangling link into one), link by link (`resolve_links`, extra round trips)."""
    if answer.error() is None and answer.names:
        return answer.names[0][0]
    return resolve_links(path, lambda p: _answer(s, REALPATH, p), lambda p: _answer(s, READLINK, p))


def realpath(s: SFTPSession, path: str) -> tuple[str, Attrs | None]:
    """Where `path` leads, and what a stat of it sees (None: nothing there), in one round trip."""
    answer, looked = s.wait(s.send_path(REALPATH, path), s.send_path(STAT, path))
    return leads_to(s, path, answer), (looked.attrs or Attrs()) if looked.error() is None else None


def send_fd_looks(s: SFTPSession) -> list[int]:
    """READLINKs of the SFTP server's own descriptors FDS_LOOKED (/proc/self/fd/N): sent right
    before an OPEN they tell the descriptor it gets (the lowest free one: the server is one
    thread, this session holds no handle); right after it, the object that descriptor holds."""
    return [s.send_path(READLINK, f"{PROC_FD}/{fd}") for fd in FDS_LOOKED]


def held_at(s: SFTPSession, path: str, before: list[int], after: list[int]) -> str | None:
    """Where the handle just opened for `path` is, as the server's kernel says (its real path; a
    removed file's ends in " (deleted)"), from the looks sent before and after its OPEN in the
    same flight (send_fd_looks): the descriptor free before is the one the OPEN got. None when
    the answer says nothing; PermissionError when the server cannot tell (no /proc)."""
    was = s.wait(*before)
    now = s.wait(*after)
    free = [i for i, reply in enumerate(was) if isinstance(reply.error(), FileNotFoundError)]
    if not free:
        raise PermissionError(
            errno.EACCES, f"{path}: this SFTP server cannot show what it opened (no /proc, or no descriptor "
            "free where looked), so the file could not be checked to be the one the call was allowed; nothing "
            "was read or written. Use the terminal for this file", path)
    held = now[free[0]]
    return held.names[0][0] if held.error() is None and held.names else None


def check_opened(path: str, where: str | None, expected: str) -> None:
    """PermissionError unless the handle opened for `path` is at `expected` (`where`: held_at)."""
    if where == expected:
        return
    if where is not None and where.startswith("/"):
        raise moved(path, where, expected)
    raise PermissionError(
        errno.EACCES, f"{path}: could not tell which file the SFTP server opened, so nothing was read or written; "
        "try again", path)


def check_pin(path: str, now: str | None, pinned: str | None) -> None:
    if pinned is not None and now != pinned:
        raise moved(path, now or "?", pinned)


# -- reading ----------------------------------------------------------------------------------


def _plan(start: int, want: int, limit: int) -> list[tuple[int, int]]:
    """READs (offset, length) covering [start, start + want) but not past `limit`."""
    end = min(limit, start + max(want, 1))
    return [(at, min(CHUNK, end - at)) for at in range(start, end, CHUNK)][:MAX_IN_FLIGHT]


def _send_reads(s: SFTPSession, handle: bytes, plan: list[tuple[int, int]], with_fstat: bool) -> list[int]:
    ids = [s.request(FSTAT, handle_field(handle))] if with_fstat else []
    return ids + [s.send_read(handle, at, size) for at, size in plan]




def read_bytes(s: SFTPSession, path: str, max_bytes: int, known: Attrs | None = None,
               pinned: str | None = None) -> tuple[bytes, Attrs]:
    """The regular file at `path`, at most `max_bytes` (see Backend.read_bytes), and its attributes.

    SFTP has no non-blocking open, and the server's open of a FIFO waits for a writer (holding
    the channel): the path is looked at before opening, unless `known` is a fresh look that saw
    a regular file there; the opened handle is checked again (FSTAT), which leaves only a swap
    between the look and the open unguarded.

    `pinned`: where the path led when the call was allowed. A REALPATH goes in the same flight
    as the OPEN (the server answers them in order, with nothing in between but its own work),
    and no byte is returned unless it still leads there.
    """
    try:
        info = known
        if info is None:
            info = _stat(s, path)
            if info is None:
                raise path_error(errno.ENOENT, path)
        check_regular(path, info.st_mode, info.st_size, max_bytes)
        limit = max_bytes + 1  # one byte past the limit tells a file that grew since the stat
        plan = _plan(0, info.st_size + 1, limit)
        predicted = s.predicted_handle()
        where_id = s.send_path(REALPATH, path) if pinned is not None else None
        before = send_fd_looks(s) if pinned is not None else []
        open_id = s.send_open(path, FLAG_READ)
        after = send_fd_looks(s) if pinned is not None else []
        early = _send_reads(s, predicted, plan, True) if predicted is not None else []
        opened = s.wait(open_id)[0]
        now = leads_to(s, path, s.wait(where_id)[0]) if where_id is not None else None  # it came first
        if opened.error() is not None:
            s.wait(*early)  # they failed on a handle that is not open
            s.wait(*before, *after)
            check_pin(path, now, pinned)
            opened.check()
        handle = opened.handle
        s.opened(handle, predicted)
        try:
            if early and handle == predicted:
                ids = early
            else:
                s.wait(*early)
                ids = _send_reads(s, handle, plan, True)
            fstat, *chunks = s.wait(*ids)
            check_pin(path, now, pinned)  # before a byte of it is used
            if pinned is not None:  # and the handle holds that file, whatever the path did meanwhile
                check_opened(path, held_at(s, path, before, after), pinned)
            attrs = fstat.check().attrs or Attrs()
            check_regular(path, attrs.st_mode, attrs.st_size, max_bytes)
            data = _collect(s, handle, plan, chunks, attrs.st_size, limit)
        finally:
            if not s.broken:
                s.close_handle(handle)
        return check_length(path, data, max_bytes), attrs
    except OSError as exc:
        if exc.filename == path:
            raise
        found = None if exc.errno is not None else _stat(s, path)
        raise (
            path_error(errno.EISDIR, path) if found and st_mod.S_ISDIR(found.st_mode) else with_path(exc, path)
        ) from None


def _collect(
    s: SFTPSession, handle: bytes, plan: list[tuple[int, int]], chunks: list[Reply], size: int, limit: int
) -> bytes:
    """The file's bytes from the answers to `plan`, asking for more while the end is not seen."""
    out = bytearray()
    while True:
        more = True
        for (at, length), reply in zip(plan, chunks, strict=True):
            if at != len(out):
                break  # after a short read in the middle: ask again from where it stopped
            if reply.eof:
                more = False
                break
            out += reply.check().data
            if len(reply.data) < length:
                more = len(out) < size  # short at or past the size: the end (no READ just for EOF)
                break
        if not more or len(out) >= limit:
            return bytes(out[:limit])
        plan = _plan(len(out), max(size + 1 - len(out), CHUNK), limit)
        chunks = s.wait(*[s.send_read(handle, at, length) for at, length in plan])


# -- listing ----------------------------------------------------------------------------------


def list_dir(s: SFTPSession, path: str) -> list[DirEntry]:
    try:
        listing = s.listdir(path)
    except OSError as exc:
        info = _stat(s, path)
        if info is None:
            raise path_error(errno.ENOENT, path) from None
        if not st_mod.S_ISDIR(info.st_mode):
            raise path_error(errno.ENOTDIR, path) from None
        raise with_path(exc, path) from None
    # Listings describe a link itself; say what it points to, as scandir does (one batch).
    links = {
        name: s.send_path(STAT, posixpath.join(path, name)) for name, attrs in listing if st_mod.S_ISLNK(attrs.st_mode)
    }
    targets = dict(zip(links, s.wait(*links.values()), strict=True))
    entries = []
    for name, attrs in listing:
        mode = attrs.st_mode
        is_link = name in targets
        if is_link:
            target = targets[name]
            mode = (target.attrs or Attrs()).st_mode if target.error() is None else 0
        entries.append(DirEntry(name, st_mod.S_ISDIR(mode), st_mod.S_ISREG(mode), is_link))
    return entries


# -- writing ----------------------------------------------------------------------------------
