"""Writing a file over SFTP: a private temp file next to the target, renamed over it (files.py
describes the round trips)."""

from __future__ import annotations

import errno
import posixpath
import secrets
import stat as st_mod
from dataclasses import dataclass

from .files import _stat, check_opened, check_pin, held_at, leads_to, path_error, send_fd_looks, with_path
from .sftp import (
    CHUNK,
    FLAG_CREAT,
    FLAG_EXCL,
    FLAG_WRITE,
    FSETSTAT,
    FSTAT,
    LSTAT,
    MKDIR,
    REALPATH,
    REMOVE,
    SETSTAT,
    Attrs,
    Reply,
    SFTPSession,
    encode_attrs,
    handle_field,
)

PRIVATE = 0o600  # the temp file's mode until the target's is set


def _make_parents(s: SFTPSession, directory: str) -> None:
    missing = []
    while directory not in ("/", ""):
        info = _stat(s, directory)
        if info is not None:
            if not st_mod.S_ISDIR(info.st_mode):
                raise path_error(errno.ENOTDIR, directory)
            break
        missing.append(directory)
        directory = posixpath.dirname(directory)
    for path in reversed(missing):
        try:
            s.call(MKDIR, path, encode_attrs())
        except OSError as exc:
            if _stat(s, path) is None:  # not a lost race with someone else's mkdir
                raise with_path(exc, path) from None


def _send_writes(s: SFTPSession, handle: bytes, data: bytes) -> list[int]:
    ids = [s.send_write(handle, at, data[at : at + CHUNK]) for at in range(0, len(data), CHUNK)]
    return [*ids, s.send_close(handle)]  # awaited: a close can report lost data


class _Retry(Exception):
    def __init__(self, target: str, resolved: bool = True) -> None:
        self.target = target
        self.resolved = resolved


@dataclass
class Written:
    default_mode: int  # the mode SFTP gives new files here (learned on the first write)
    target: str  # the file replaced (where the path's symlinks lead)
    attrs: Attrs | None  # its attributes right after the rename (None: the look failed)


def write_bytes(s: SFTPSession, path: str, data: bytes, default_mode: int | None,
                pinned: str | None = None) -> Written:
    """Write a private temp file next to the target, give it the target's mode, rename it over
    the target (`default_mode` None: a first write, which learns the mode new files get).

    Through a symlink the file it points to is replaced (renaming over the link would turn it
    into a separate copy): where the server resolves it, `..` in the link followed physically;
    missing parent directories are created (looked for only when the temp file cannot be made:
    the common case costs no extra round trips). `pinned`: where the path led when the call
    was allowed. Then that place is written (its temp file made in its directory, never in
    one a swapped link leads to), a REALPATH of `path` in the first flight tells where `path`
    leads now, and nothing is replaced unless that is the same place.
    """
    target, resolved = (pinned, True) if pinned is not None else (path, False)
    for _ in range(3):
        try:
            return _write(s, target, data, default_mode, resolved, pinned, path)
        except _Retry as retry:
            target, resolved = retry.target, retry.resolved
    raise path_error(errno.ELOOP, path)


@dataclass
class _FirstFlight:
    """A write's first round trip: where the checked path leads, what is at the target, the
    temp file's OPEN, and (pinned) which directory the server's descriptors say it was made in."""

    temp: str
    checked: str  # the path whose resolution decides
    answer: Reply  # REALPATH of `checked`
    looked: Reply  # LSTAT of the target
    opened: Reply  # OPEN of the temp file
    before: list[int]
    after: list[int]


def _write(s: SFTPSession, target: str, data: bytes, default_mode: int | None, resolved: bool,
           pinned: str | None, path: str) -> Written:
    temp = posixpath.join(posixpath.dirname(target), f".herald-{secrets.token_hex(6)}.tmp")
    learning = default_mode is None
    checked = path if pinned is not None else target
    where_id = s.send_path(REALPATH, checked)
    lstat_id = s.send_path(LSTAT, target)
    predicted = None if learning else s.predicted_handle()
    # A pinned write's temp file must be made in the pinned file's directory itself, not in
    # one a link swapped into its path leads to: the server's descriptors tell (check_opened).
    before = send_fd_looks(s) if pinned is not None else []
    open_id = s.send_open(temp, FLAG_WRITE | FLAG_CREAT | FLAG_EXCL, None if learning else PRIVATE)
    after = send_fd_looks(s) if pinned is not None else []
    early = _send_writes(s, predicted, data) if predicted is not None else []
    answer, looked, opened = s.wait(where_id, lstat_id, open_id)
    first = _FirstFlight(temp, checked, answer, looked, opened, before, after)
    handle = opened.handle if opened.error() is None else None
    if handle is not None:
        s.opened(handle, predicted)
    if pinned is not None and handle is None:
        s.wait(*before, *after)
    if early and handle != predicted:
        s.wait(*early)  # they failed on a handle that was not open: done with them
        early = []
    done = False
    try:
        existing = _check_target(s, first, handle, path, target, pinned, resolved)
        assert handle is not None  # _check_target raised otherwise
        mode = (existing.st_mode & 0o7777) if existing is not None else default_mode
        replies = s.wait(*(early or _send_data(s, handle, data, mode, learning, existing)))
        handle = None  # its CLOSE was among them
        for reply in replies:
            reply.check()
        if learning:
            default_mode = (replies[0].attrs or Attrs()).st_mode & 0o777
        final = [s.send_path(SETSTAT, temp, encode_attrs(mode))] if not learning and mode != PRIVATE else []
        final.append(s.send_rename(temp, target))
        final.append(s.send_path(LSTAT, target))  # what was written, for the next stat (no extra round trip)
        *changed, written = s.wait(*final)
        for reply in changed:
            reply.check()
        done = True
        assert default_mode is not None
        return Written(default_mode, target, written.attrs if written.error() is None else None)
    except OSError as exc:
        raise (exc if exc.filename is not None else with_path(exc, target)) from None
    finally:
        if not done and not s.broken:
            _abandon(s, first, handle, early)


def _check_target(s: SFTPSession, first: _FirstFlight, handle: bytes | None, path: str, target: str,
                  pinned: str | None, resolved: bool) -> Attrs | None:
    """The file at the target (None: none yet), once the first flight's answers allow the write;
    else an OSError, or _Retry to write elsewhere (a link to follow, missing parents made)."""
    made: str | None = first.temp
    if pinned is not None and handle is not None:  # first: whatever else fails, the temp file goes
        made = held_at(s, path, first.before, first.after)
        if made != first.temp and made is not None and made.startswith("/"):
            s.wait(s.send_path(REMOVE, made))  # made where a swapped link led: gone before we answer
    lstat_error = first.looked.error()
    if lstat_error is not None and lstat_error.errno not in (errno.ENOENT, errno.ENOTDIR):
        raise with_path(lstat_error, target)
    now = target
    if pinned is not None or (lstat_error is None and st_mod.S_ISLNK((first.looked.attrs or Attrs()).st_mode)):
        now = leads_to(s, first.checked, first.answer)
        check_pin(path, now, pinned)
    if made != first.temp:  # the path still leads there, but the temp file was made elsewhere
        landed = posixpath.join(posixpath.dirname(made), posixpath.basename(target)) if made else None
        check_opened(path, landed if landed and landed.startswith("/") else None, target)
    existing = None
    if lstat_error is None:
        existing = first.looked.attrs or Attrs()
        if st_mod.S_ISLNK(existing.st_mode) and not resolved:
            raise _Retry(now)
        if st_mod.S_ISDIR(existing.st_mode):
            raise path_error(errno.EISDIR, target)
    if handle is None:
        exc = first.opened.error()
        assert exc is not None
        if exc.errno != errno.ENOENT:  # ENOENT: also what SFTP says when a parent is a file
            raise with_path(exc, target)
        _make_parents(s, posixpath.dirname(target))
        raise _Retry(target, resolved)  # a path whose parent was missing is no link
    return existing


def _send_data(s: SFTPSession, handle: bytes, data: bytes, mode: int | None, learning: bool,
               existing: Attrs | None) -> list[int]:
    """The writes and CLOSE of a handle that was not predicted (a first write learns the mode)."""
    ids = []
    if learning:
        ids.append(s.request(FSTAT, handle_field(handle)))
        if existing is not None:  # before the data, so a private file's text is never exposed
            ids.append(s.request(FSETSTAT, handle_field(handle) + encode_attrs(mode)))
    return ids + _send_writes(s, handle, data)


def _abandon(s: SFTPSession, first: _FirstFlight, handle: bytes | None, early: list[int]) -> None:
    """A write that failed: its answers not awaited, its handle closed, its temp file removed."""
    for rid in early if handle is not None else ():  # their CLOSE is among them
        s.forget(rid)
    if handle is not None and not early:
        s.close_handle(handle)
    if first.opened.error() is None:
        s.forget(s.send_path(REMOVE, first.temp))
