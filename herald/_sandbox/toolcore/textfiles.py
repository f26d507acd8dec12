"""The core of `read_file`, `write_file` and `patch`: one implementation for both places a
tool runs. Stdlib only, Python >= 3.8 (the sandbox package).

Herald's tools (herald/tools/files.py) call these functions with the session's Backend; in
backend mode the supervisor calls them next to the script with `OsFiles` (toolcore/fileaccess.py). Both
offer what `Files` lists. A missing file raises `FileMissing`: Herald's tool turns it into an
error with "did you mean" candidates (a walk of the backend), and the supervisor hands such a
call to Herald instead of walking itself.
"""

from __future__ import annotations

import difflib
from typing import Any, Dict, List, Mapping, Optional, Protocol, Tuple

from ..wire.grant import FileLimits
from .base import ToolError
from .callroots import Refused
from .fileaccess import FileTooLargeError, NotRegularFileError, resolve_path
from .fuzzy import find_matches, reindent


class Files(Protocol):
    """What the tools need of a file system: a Backend, or OsFiles (absolute paths)."""

    def stat(self, path: str) -> Any: ...

    def read_bytes(self, path: str, max_bytes: Optional[int] = None) -> bytes: ...

    def write_bytes(self, path: str, data: bytes) -> None: ...


BINARY_SNIFF_BYTES = 8192
MAX_DIFF_CHARS = 20000
REFUSED = "PolicyRefused"  # the error type of a path out of the call's reach, as the policy's refusals


class FileMissing(Exception):
    """Nothing exists at `absolute` (the tool's `path` argument)."""

    def __init__(self, prefix: str, path: str, absolute: str) -> None:
        super().__init__(absolute)
        self.prefix, self.path, self.absolute = prefix, path, absolute


def display_path(cwd: str, absolute: str) -> str:
    """Paths under the session's cwd are shown relative to it; others stay absolute."""
    prefix = cwd.rstrip("/") + "/"
    return absolute[len(prefix):] if absolute.startswith(prefix) else absolute


def absolute_path(cwd: str, path: Any) -> str:
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path is empty: pass a file path, relative to the current directory or absolute.")
    return resolve_path(cwd, path)


def looks_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def decode(data: bytes) -> Tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def split_lines(text: str) -> List[str]:
    """Lines as ripgrep, grep and editors number them: split at LF only, dropping a CR before it.

    (str.splitlines also splits at form feeds and other separators, which shifts line numbers.)
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" not in text:
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def load(files: Files, limits: FileLimits, prefix: str, path: str, absolute: str) -> bytes:
    """The bytes of the file a tool reads; each refusal says what to do instead. `prefix` starts
    the messages ("patch: "). No stat of its own first: every backend's reader looks before it
    opens and says what it found in a standard error (the conformance suite holds them to it),
    so a small read costs one look, not two (a system call here, a command or round trip there)."""
    limit = limits["read_max_bytes"]
    try:
        # The reader refuses what is not a regular file, by the opened file: a FIFO or a device
        # reached through a symlink, or swapped in after its look.
        return files.read_bytes(absolute, limit)
    except (FileNotFoundError, NotADirectoryError):
        raise FileMissing(prefix, path, absolute) from None
    except Refused as exc:
        raise refused(prefix or "read_file: ", exc) from None
    except IsADirectoryError:
        raise ToolError(
            "%s%s is a directory, not a file. List it with terminal('ls %s') or "
            "search_files('*', target='files', path='%s')." % (prefix, path, path, path)
        ) from None
    except NotRegularFileError as exc:
        raise ToolError(
            "%s%s is %s: reading it could block or never end, so it is refused. See what it is "
            "with terminal('ls -lL %s'); read a bounded part with terminal, e.g. "
            "terminal('head -c 4096 %s | xxd', timeout=10)." % (prefix, path, exc.strerror, path, path),
            "NotRegularFile",
        ) from None
    except FileTooLargeError as exc:
        size = "is {:,} bytes".format(exc.size) if exc.size is not None else "holds over {:,} bytes".format(limit)
        raise ToolError(
            "{}{} {}, over read_file's {:,}-byte limit. Read parts of it with terminal "
            "(head, tail, sed -n '100,200p'), or grep it with search_files.".format(prefix, path, size, limit)
        ) from None


def refused(prefix: str, exc: Refused, more: str = "") -> ToolError:
    """A path that led out of the call's reach when the tool opened it (a link swapped after the
    policy's check, a mask): refused in the policy's words."""
    return ToolError("%s%s%s" % (prefix, exc.message, more), REFUSED)


def read_file(files: Files, cwd: str, limits: FileLimits, args: Mapping[str, Any]) -> Dict[str, Any]:
    path, offset, limit = args["path"], args["offset"], args["limit"]
    absolute = absolute_path(cwd, path)
    data = load(files, limits, "", path, absolute)
    if looks_binary(data):
        raise ToolError(
            "{} is a binary file ({:,} bytes); read_file shows text only. Inspect it with terminal, "
            "e.g. 'file {}' or 'xxd {} | head'.".format(path, len(data), path, path),
            "BinaryFile",
        )
    text, replaced = decode(data)
    lines = split_lines(text)
    total = len(lines)
    if total and offset > total:
        raise ToolError(
            "%s has %d lines; offset %d is past the end. Use an offset from 1 to %d." % (path, total, offset, total)
        )
    content, end, cut_lines = _numbered(lines, offset, min(total, offset - 1 + limit),
                                        limits["read_max_line_chars"], limits["read_max_chars"])
    result: Dict[str, Any] = {
        "path": display_path(cwd, absolute),
        "content": content,
        "total_lines": total,
        "start_line": offset if total else 0,
        "end_line": end,
    }
    notes = []
    if end < total:
        result["next_offset"] = end + 1
        notes.append(
            "Showing lines %d-%d of %d; call read_file('%s', offset=%d) for more." % (offset, end, total, path, end + 1)
        )
    if cut_lines:
        notes.append("%d long line(s) were cut; use terminal to see them whole." % cut_lines)
    if replaced:
        notes.append("The file is not valid UTF-8; undecodable bytes are shown as U+FFFD.")
    if not total:
        notes.append("The file is empty.")
    if notes:
        result["hint"] = " ".join(notes)
    return result


# The "<number>|" prefixes of the first lines, made once (formatting them per line was a third
# of a small read's time); replaced whole, never changed in place, so threads may share it.
NUMBERS_KEPT = 5000
_NUMBERS: List[str] = []


def _numbers(last: int) -> List[str]:
    """At least the first `last` (at most NUMBERS_KEPT) line-number prefixes."""
    global _NUMBERS
    known = _NUMBERS
    if len(known) < last:
        known = known + ["%6d|" % n for n in range(len(known) + 1, max(last, 500) + 1)]
        _NUMBERS = known
    return known


def _numbered(lines: List[str], first: int, last: int, max_line: int, max_chars: int) -> Tuple[str, int, int]:
    """Lines `first`..`last` (1-based) as "<number>|<line>", each cut at `max_line` chars, as
    many as fit in `max_chars` (at least one): (text, number of the last line shown, lines cut)."""
    if last < first:
        return "", first - 1, 0
    wanted = lines[first - 1:last]
    if max(map(len, wanted)) <= max_line:  # the usual case, without a Python step per line
        if last <= NUMBERS_KEPT:
            text = "\n".join(map(str.__add__, _numbers(last)[first - 1:last], wanted))
        else:
            text = "\n".join(["%6d|%s" % pair for pair in enumerate(wanted, first)])
        if len(text) < max_chars:
            return text, last, 0
    out: List[str] = []
    used = 0
    end = first - 1
    cut_lines = 0
    for number, line in enumerate(wanted, first):
        if len(line) > max_line:
            line = line[:max_line] + "… [line cut at %d chars]" % max_line
            cut_lines += 1
        rendered = "%6d|%s" % (number, line)
        if out and used + len(rendered) + 1 > max_chars:
            break
        out.append(rendered)
        used += len(rendered) + 1
        end = number
    return "\n".join(out), end, cut_lines


def write_file(files: Files, cwd: str, limits: FileLimits, args: Mapping[str, Any]) -> Dict[str, Any]:
    path, content = args["path"], args["content"]
    absolute = absolute_path(cwd, path)
    try:
        info = files.stat(absolute)
    except Refused as exc:
        raise refused("write_file: ", exc) from None
    if info is not None and info.is_dir:
        raise ToolError("%s is a directory; pass a file path to write_file." % path)
    if info is not None and not info.is_file:  # replacing a device or FIFO is never what was meant
        raise ToolError(
            "%s is not a regular file (mode %o: a device, FIFO or socket); write_file only replaces "
            "regular files. Check it with terminal('ls -l %s'), or write elsewhere." % (path, info.mode, path)
        )
    data = content.encode("utf-8", "surrogateescape")
    try:
        files.write_bytes(absolute, data)
    except Refused as exc:
        raise refused("write_file: ", exc) from None
    except TimeoutError:  # the run's deadline (a TimeoutError) is the caller's to report, as a timeout
        raise
    except OSError as exc:
        raise ToolError("Could not write %s: %s." % (path, exc.strerror or exc)) from None
    return {"path": display_path(cwd, absolute), "bytes_written": len(data), "created": info is None}


def patch(files: Files, cwd: str, limits: FileLimits, args: Mapping[str, Any]) -> Dict[str, Any]:
    path, old, new, replace_all = args["path"], args["old_string"], args["new_string"], args["replace_all"]
    if old == "":
        raise ToolError("patch: old_string is empty. To create or overwrite a whole file use write_file.")
    if old == new:
        raise ToolError("patch: old_string and new_string are identical; nothing would change.")
    absolute = absolute_path(cwd, path)
    data = load(files, limits, "patch: ", path, absolute)
    if looks_binary(data):
        raise ToolError("patch: %s is a binary file; patch edits text files only." % path, "BinaryFile")
    text, replaced = decode(data)
    if replaced:
        raise ToolError("patch: %s is not valid UTF-8; edit it with terminal (e.g. sed) instead." % path)
    newline = "\r\n" if "\r\n" in text else "\n"
    if newline != "\n":
        old, new = old.replace("\r\n", "\n").replace("\n", newline), new.replace("\r\n", "\n").replace("\n", newline)
    matches, strategy = find_matches(text, old)
    if not matches:
        applied = _applied_at(text, new)
        if applied:
            raise ToolError(
                "patch: old_string was not found in %s, but new_string is there (line %d): the edit looks "
                "applied already (by an earlier call or run), so nothing was changed. Go on with the next "
                "step; read_file the region if in doubt." % (path, applied),
                "AlreadyApplied",
            )
        raise ToolError(
            "patch: old_string was not found in %s, even ignoring differences in whitespace and "
            "indentation. read_file the region you want to change and copy the text exactly." % path,
            "NoMatch",
        )
    if len(matches) > 1 and not replace_all:
        where = ", ".join(str(text.count("\n", 0, start) + 1) for start, _ in matches[:10])
        raise ToolError(
            "patch: old_string occurs %d times in %s (at lines %s). Include more surrounding lines "
            "to make it unique, or pass replace_all=True to change every one." % (len(matches), path, where),
            "AmbiguousMatch",
        )
    pieces = []
    last = 0
    for start, end in matches:
        replacement = new if strategy == "exact" else reindent(text[start:end], old, new)
        pieces.append(text[last:start])
        pieces.append(replacement)
        last = end
    pieces.append(text[last:])
    updated = "".join(pieces)
    try:
        files.write_bytes(absolute, updated.encode("utf-8"))
    except Refused as exc:
        raise refused("patch: ", exc, " The file is unchanged.") from None
    except TimeoutError:  # the run's deadline (a TimeoutError) is the caller's to report, as a timeout
        raise
    except OSError as exc:
        raise ToolError("patch: could not write %s: %s; the file is unchanged." % (path, exc.strerror or exc)) from None
    shown = display_path(cwd, absolute)
    diff = unified_diff(text, updated, shown)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + "\n[... diff cut at {:,} chars ...]\n".format(MAX_DIFF_CHARS)
    return {"path": shown, "replacements": len(matches), "match": strategy, "diff": diff}


def _applied_at(text: str, new: str) -> int:
    """The line where `new` already stands in `text` (matched as `old_string` would be), or 0:
    an edit that is there already, whose `old_string` is therefore gone. A deletion (blank
    `new`) leaves nothing to recognise."""
    if not new.strip():
        return 0
    spans, _ = find_matches(text, new)
    return text.count("\n", 0, spans[0][0]) + 1 if spans else 0


def unified_diff(before: str, after: str, shown: str) -> str:
    """A unified diff as `diff -u` prints it, "\\ No newline at end of file" included (without
    it a last line lacking a newline runs into the next diff line)."""

    def keepends(text: str) -> List[str]:  # LF-terminated lines (splitlines also cuts at \f)
        parts = text.split("\n")
        return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])

    lines = difflib.unified_diff(keepends(before), keepends(after), "a/" + shown, "b/" + shown)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


TOOLS = {"read_file": read_file, "write_file": write_file, "patch": patch}
