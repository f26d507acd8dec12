"""File access as commands in a shell of its own on the backend (POSIX sh and coreutils or busybox).

Used by the Docker backend for all file operations, and by the Modal backend for the atomic
replace after its SDK wrote the contents to a temp file (`replace_with`).

Why not Docker's archive API: it reads the container's image layers, not the mounts made inside the
container, so a file under the tmpfs /tmp would be invisible to it; and each call costs about as
much as starting a process (~20 ms here), where a command in a running shell costs ~1 ms. The file
shell is separate from the session's shell, so a long `terminal` command does not hold up file
tools, and file operations leave the session's directory and variables alone.

Contents travel base64-encoded (the shell's output is text). A write goes to a temp file next to
the target, renamed over it at the end, keeping the old file's mode and owner; large contents
are streamed raw into the temp file by a process of their own (`upload`) rather than put in a
command the shell has to parse.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat as st_mod
from collections.abc import Callable

from .base import (
    CommandResult,
    DirEntry,
    FileStat,
    NotRegularFileError,
    check_length,
    check_regular,
)
from .realpath import moved, resolve_links
from .shell import shell_quote

INLINE_WRITE = 256 * 1024  # larger contents are streamed to the temp file, not put in a command

RunCommand = Callable[[str], CommandResult]
Upload = Callable[[str, bytes], None]  # (temp file path, contents): write them there

# Regular files only (a FIFO would block the file shell, a device never end), and at most
# {limit} bytes whatever size the file claims. The redirection is on the group so that a failed
# open fails the command rather than feeding base64 nothing. A swap to a FIFO between the test
# and the open is left to the file shell's timeout.
# A file whose size is already over the limit is refused with its size, without sending it.
_READ = (
    'p={path}; if [ -d "$p" ]; then echo EISDIR; elif [ ! -e "$p" ]; then echo ENOENT; '
    'elif [ ! -f "$p" ]; then echo ENOTREG; elif [ ! -r "$p" ]; then echo EACCES; '
    'else s=$(stat -L -c %s -- "$p" 2>/dev/null) || s=0; if [ "$s" -gt {max_bytes} ]; then echo "EFBIG $s"; '
    'else {read}; fi; fi'
)
_READ_PLAIN = 'echo OK; {{ head -c {limit} | base64; }} < "$p" && echo END'
# A pinned path's file is opened once (fd 3), and read only if the kernel says that descriptor
# holds the pinned file (readlink of /proc/self/fd/3, in readlink's own process, which shares
# it): a link swapped after any check of the path changes nothing.
_READ_HELD = (
    '{{ w=$(readlink /proc/self/fd/3 2>/dev/null); if [ "$w" = {pinned} ]; then echo OK; '
    'head -c {limit} <&3 | base64 && echo END; else printf "MOVED %s" "$w"; fi; }} 3< "$p"'
)
_STAT = 'p={path}; if [ -e "$p" ]; then stat -L -c "%s %f %Y" -- "$p"; else echo NONE; fi'
_LIST = (
    'p={path}; if [ ! -e "$p" ]; then echo ENOENT; elif [ ! -d "$p" ]; then echo ENOTDIR; '
    'elif [ ! -r "$p" ] || [ ! -x "$p" ]; then echo EACCES; else echo OK; '
    'for f in "$p"/* "$p"/.[!.]* "$p"/..?*; do [ -e "$f" ] || [ -L "$f" ] || continue; '
    't=o; [ -f "$f" ] && t=f; [ -d "$f" ] && t=d; l=0; [ -L "$f" ] && l=1; '
    'printf "%s%s %s\\0" "$t" "$l" "${{f##*/}}"; done; fi'
)
# Through a symlink, the file it points to is replaced (renaming over the link would turn it
# into a separate copy). The temp file starts with mode 0600; it gets the old file's mode and
# owner, or for a new file what the umask allows. The three parts run as one command, or with
# the contents streamed to the temp file in between for large files.
_TARGET = 'p={path}; [ -L "$p" ] && p=$(readlink -f -- "$p"); '
# Where a path leads, as the kernel follows it; nothing printed when readlink cannot follow it
# to the end (a missing directory on the way): `resolve_links` then goes link by link.
_REALPATH = 'r=$(readlink -f -- {path} 2>/dev/null) && printf "%s" "$r"'
_READLINK = '[ -L {path} ] && printf "%s" "$(readlink -- {path})"'
# A command run only if its path still leads where it led when the call was checked: the
# check and the operation in one command (see `_guarded`).
_GUARD = (
    'r=$(readlink -f -- {path} 2>/dev/null); if [ "$r" = {pinned} ]; then {command}; else printf "MOVED %s" "$r"; fi'
)
_MOVED = "MOVED "
_WRITE_BEGIN = _TARGET + (
    'if [ -d "$p" ]; then echo EISDIR; false; else d=$(dirname -- "$p"); '
    'mkdir -p -- "$d" && t=$(mktemp "$d/.herald-XXXXXX"); fi'
)
_WRITE_DATA = '{{ printf "%s" {data} | base64 -d > "$t" || {{ rm -f -- "$t"; false; }}; }}'
_WRITE_COMMIT = (
    '{{ if [ -e "$p" ]; then chmod "$(stat -c %a -- "$p")" "$t" && '
    '{{ chown "$(stat -c %u:%g -- "$p")" "$t" 2>/dev/null; :; }}; '
    'else chmod "$(printf %o $(( 0666 & ~$(umask) )))" "$t"; fi && mv -f -- "$t" "$p" && echo OK; }}'
)


class ShellFiles:
    """read/write/stat/list over `run` (one command in the file shell -> its result)."""

    def __init__(self, run: RunCommand, upload: Upload) -> None:
        self._run = run
        self._upload = upload

    def realpath(self, path: str) -> str:
        """Where the absolute, normalised `path` leads, every symlink followed (a missing tail
        as written): one command, more only where `readlink -f` cannot follow it to the end."""
        return resolve_links(path, self._answer(_REALPATH), self._answer(_READLINK))

    def _answer(self, template: str) -> Callable[[str], str | None]:
        def ask(path: str) -> str | None:
            result = self._run(template.format(path=shell_quote(path)))
            return result.output if result.exit_code == 0 and result.output else None

        return ask

    def _guarded(self, command: str, path: str, pinned: str | None) -> CommandResult:
        """Run `command` (about `path`) only if `path` still leads to `pinned`, where it led when
        the call was allowed, checked by the same command; PermissionError when it leads
        elsewhere now. None: run it as it is."""
        if pinned is None:
            return self._run(command)
        result = self._run(_GUARD.format(path=shell_quote(path), pinned=shell_quote(pinned), command=command))
        if not result.output.startswith(_MOVED):
            return result
        now = result.output[len(_MOVED):] or self.realpath(path)
        if now != pinned:
            raise moved(path, now, pinned)
        # readlink could not follow it to the end (a directory a write makes): resolved step by
        # step, it still leads there.
        return self._run(command)

    def read_bytes(self, path: str, max_bytes: int, pinned: str | None = None) -> bytes:
        """The regular file at `path` (see Backend.read_bytes); `pinned`: see `_guarded`."""
        limit = max_bytes + 1
        read = (_READ_PLAIN.format(limit=limit) if pinned is None
                else _READ_HELD.format(limit=limit, pinned=shell_quote(pinned)))
        result = self._guarded(_READ.format(path=shell_quote(path), max_bytes=max_bytes, read=read), path, pinned)
        if result.output.startswith(_MOVED) and pinned is not None:  # the file opened is not the pinned one
            raise moved(path, result.output[len(_MOVED):] or "?", pinned)
        status, _, body = result.output.partition("\n")
        word, _, size = status.partition(" ")
        if word == "EFBIG" and size.isdigit():
            check_regular(path, st_mod.S_IFREG, int(size), max_bytes)  # raises FileTooLargeError, with the size
        if status == "ENOTREG":
            raise NotRegularFileError(errno.EINVAL, "not a regular file (a device, FIFO or socket)", path)
        if status != "OK":
            raise _error(status, result.output, path)
        if not body.rstrip().endswith("END"):
            raise _error("", body, path)
        try:
            data = base64.b64decode(body.rstrip()[: -len("END")])
        except (binascii.Error, ValueError):
            raise OSError(errno.EIO, "the file's contents came back damaged", path) from None
        return check_length(path, data, max_bytes)

    def stat(self, path: str) -> FileStat | None:
        result = self._run(_STAT.format(path=shell_quote(path)))
        fields = result.output.split()
        if result.output == "NONE":
            return None
        if len(fields) != 3 or result.exit_code != 0:
            raise _error("", result.output, path)
        mode = int(fields[1], 16)
        return FileStat(
            path=path,
            size=int(fields[0]),
            is_dir=st_mod.S_ISDIR(mode),
            is_file=st_mod.S_ISREG(mode),
            mtime=float(fields[2]),
            mode=mode,
        )

    def list_dir(self, path: str) -> list[DirEntry]:
        result = self._run(_LIST.format(path=shell_quote(path)))
        status, _, body = result.output.partition("\n")
        if status != "OK":
            raise _error(status, result.output, path)
        entries = []
        for record in body.split("\0"):
            kind, _, name = record.partition(" ")
            if len(kind) == 2 and name:
                entries.append(DirEntry(name, kind[0] == "d", kind[0] == "f", kind[1] == "1"))
        return entries

    def write_bytes(self, path: str, data: bytes, pinned: str | None = None) -> None:
        """Replace `path` atomically (see Backend.write_bytes); `pinned`: see `_guarded`. A
        pinned write goes to the pinned place itself: where the check said the path leads, even
        through a dangling link into a directory still to make (as the local backend writes)."""
        quoted = shell_quote(pinned or path)
        if len(data) <= INLINE_WRITE:  # the common case: one command
            encoded = shell_quote(base64.b64encode(data).decode("ascii"))
            script = " && ".join((_WRITE_BEGIN, _WRITE_DATA, _WRITE_COMMIT))
            result = self._guarded(script.format(path=quoted, data=encoded), path, pinned)
            if not result.output.endswith("OK"):
                raise _error(result.output.partition("\n")[0], result.output, path)
            return
        temp = self.temp_beside(path, pinned)
        try:
            self._upload(temp, data)
            self.replace_with(path, temp, pinned)
        except BaseException:
            self._run(f"rm -f -- {shell_quote(temp)}")
            raise

    def temp_beside(self, path: str, pinned: str | None = None) -> str:
        """A new empty temp file in the directory of `path` (made when missing) for `replace_with`."""
        begun = self._guarded(
            _WRITE_BEGIN.format(path=shell_quote(pinned or path)) + ' && printf "%s" "$t"', path, pinned
        )
        if begun.exit_code != 0 or not begun.output:
            raise _error(begun.output, begun.output, path)
        return begun.output

    def replace_with(self, path: str, temp: str, pinned: str | None = None) -> None:
        """Rename `temp` over `path` (atomically), with the old file's mode and owner."""
        commit = _TARGET + "t={temp} && " + _WRITE_COMMIT
        committed = self._guarded(commit.format(path=shell_quote(pinned or path), temp=shell_quote(temp)), path, pinned)
        if not committed.output.endswith("OK"):
            raise _error("", committed.output, path)


_CODES = {  # status word or message -> errno; the OSError subclass follows from the errno
    "ENOENT": errno.ENOENT,
    "EISDIR": errno.EISDIR,
    "ENOTDIR": errno.ENOTDIR,
    "EACCES": errno.EACCES,
    "Permission denied": errno.EACCES,
    "Operation not permitted": errno.EPERM,
    "No such file or directory": errno.ENOENT,
    "Not a directory": errno.ENOTDIR,
    "File exists": errno.EEXIST,
    "Is a directory": errno.EISDIR,
    "Read-only file system": errno.EROFS,
    "No space left on device": errno.ENOSPC,
}


def _error(status: str, output: str, path: str) -> OSError:
    """The OSError a local file operation would raise, from a status word or a tool's message."""
    code = _CODES.get(status) or next((c for text, c in _CODES.items() if " " in text and text in output), 0)
    if code:
        return OSError(code, os.strerror(code), path)  # OSError picks the subclass from the errno
    detail = output.strip().splitlines()[-1][:300] if output.strip() else "no output"
    return OSError(errno.EIO, f"the file operation failed: {detail}", path)
