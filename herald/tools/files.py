"""`read_file`, `write_file` and `patch`, written once against the Backend protocol."""

from __future__ import annotations

import difflib
import posixpath
from typing import Any

from ..backends.base import FileTooLargeError, NotRegularFileError, resolve_path
from .fuzzy import find_matches, reindent
from .registry import Tool, ToolContext, ToolError
from .resources import path_argument
from .walk import SKIP_DIRS, walk_files

BINARY_SNIFF_BYTES = 8192
MAX_DIFF_CHARS = 20_000


def display_path(ctx: ToolContext, absolute: str) -> str:
    """Paths under the session's cwd are shown relative to it; others stay absolute."""
    cwd = ctx.backend.cwd.rstrip("/") + "/"
    return absolute[len(cwd) :] if absolute.startswith(cwd) else absolute


def _abs(ctx: ToolContext, path: str) -> str:
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path is empty: pass a file path, relative to the current directory or absolute.")
    return resolve_path(ctx.backend.cwd, path)


def looks_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def _decode(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def split_lines(text: str) -> list[str]:
    """Lines as ripgrep, grep and editors number them: split at LF only, dropping a CR before it.

    (str.splitlines also splits at form feeds and other separators, which shifts line numbers.)
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def not_found(ctx: ToolContext, path: str, absolute: str) -> ToolError:
    candidates = similar_paths(ctx, absolute)
    hint = f" Did you mean: {', '.join(candidates)}?" if candidates else ""
    return ToolError(
        f"File not found: {path} (looked in {posixpath.dirname(absolute)}).{hint} "
        "Use search_files(pattern, target='files') to locate it.",
        "FileNotFound",
    )


def similar_paths(ctx: ToolContext, absolute: str, limit: int = 5) -> list[str]:
    """Existing paths a mistyped `absolute` probably meant: near names in the nearest existing
    directory, then files with the same or a close name anywhere under the cwd (bounded walk)."""
    backend = ctx.backend
    name = posixpath.basename(absolute)
    found: list[str] = []
    parent = posixpath.dirname(absolute)
    while parent and parent != "/" and backend.stat(parent) is None:
        parent = posixpath.dirname(parent)
    try:
        names = [e.name for e in backend.list_dir(parent)]
    except (OSError, ValueError):
        names = []
    found += [posixpath.join(parent, n) for n in difflib.get_close_matches(name, names, n=limit, cutoff=0.6)]
    lowered = name.lower()
    near: list[tuple[float, str]] = []
    for path in walk_files(backend, backend.cwd, max_entries=5000):
        base = posixpath.basename(path).lower()
        if base == lowered:
            near.append((2.0, path))
        else:
            score = difflib.SequenceMatcher(None, lowered, base).ratio()
            if score >= 0.75:
                near.append((score, path))
    near.sort(key=lambda item: (-item[0], item[1]))
    for _, path in near:
        if path not in found:
            found.append(path)
    return [display_path(ctx, p) for p in found[:limit]]


def _load(ctx: ToolContext, prefix: str, path: str, absolute: str) -> bytes:
    """The bytes of the file a tool reads; each refusal says what to do instead. `prefix` starts
    the messages ("patch: ")."""
    limit = ctx.settings.files.read_max_bytes
    info = ctx.backend.stat(absolute)
    if info is None:
        raise not_found(ctx, path, absolute)
    if info.is_dir:
        raise ToolError(
            f"{prefix}{path} is a directory, not a file. List it with terminal('ls {path}') or "
            f"search_files('*', target='files', path='{path}')."
        )
    if info.size > limit:
        raise ToolError(
            f"{prefix}{path} is {info.size:,} bytes, over read_file's {limit:,}-byte limit. "
            "Read parts of it with terminal (head, tail, sed -n '100,200p'), or grep it with search_files."
        )
    try:
        # The backend refuses what is not a regular file, by the opened file: a FIFO or a device
        # reached through a symlink, or swapped in after the stat above.
        return ctx.backend.read_bytes(absolute, limit)
    except NotRegularFileError as exc:
        raise ToolError(
            f"{prefix}{path} is {exc.strerror}: reading it could block or never end, so it is refused. "
            f"See what it is with terminal('ls -lL {path}'); read a bounded part with terminal, e.g. "
            f"terminal('head -c 4096 {path} | xxd', timeout=10).",
            "NotRegularFile",
        ) from None
    except FileTooLargeError:
        raise ToolError(
            f"{prefix}{path} holds over {limit:,} bytes (it grew while being read), over read_file's "
            "limit. Read parts of it with terminal (head, tail, sed -n '100,200p').",
        ) from None


def read_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    path, offset, limit = args["path"], args["offset"], args["limit"]
    absolute = _abs(ctx, path)
    settings = ctx.settings.files
    data = _load(ctx, "", path, absolute)
    if looks_binary(data):
        raise ToolError(
            f"{path} is a binary file ({len(data):,} bytes); read_file shows text only. "
            f"Inspect it with terminal, e.g. 'file {path}' or 'xxd {path} | head'.",
            "BinaryFile",
        )
    text, replaced = _decode(data)
    lines = split_lines(text)
    total = len(lines)
    if total and offset > total:
        raise ToolError(f"{path} has {total} lines; offset {offset} is past the end. Use an offset from 1 to {total}.")
    out: list[str] = []
    used = 0
    end = offset - 1
    cut_lines = 0
    for number in range(offset, min(total, offset - 1 + limit) + 1):
        line = lines[number - 1]
        if len(line) > settings.read_max_line_chars:
            line = line[: settings.read_max_line_chars] + f"… [line cut at {settings.read_max_line_chars} chars]"
            cut_lines += 1
        rendered = f"{number:>6}|{line}"
        if out and used + len(rendered) + 1 > settings.read_max_chars:
            break
        out.append(rendered)
        used += len(rendered) + 1
        end = number
    result: dict[str, Any] = {
        "path": display_path(ctx, absolute),
        "content": "\n".join(out),
        "total_lines": total,
        "start_line": offset if total else 0,
        "end_line": end,
    }
    notes = []
    if end < total:
        result["next_offset"] = end + 1
        notes.append(f"Showing lines {offset}-{end} of {total}; call read_file('{path}', offset={end + 1}) for more.")
    if cut_lines:
        notes.append(f"{cut_lines} long line(s) were cut; use terminal to see them whole.")
    if replaced:
        notes.append("The file is not valid UTF-8; undecodable bytes are shown as U+FFFD.")
    if not total:
        notes.append("The file is empty.")
    if notes:
        result["hint"] = " ".join(notes)
    return result


def write_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    path, content = args["path"], args["content"]
    absolute = _abs(ctx, path)
    info = ctx.backend.stat(absolute)
    if info is not None and info.is_dir:
        raise ToolError(f"{path} is a directory; pass a file path to write_file.")
    if info is not None and not info.is_file:  # replacing a device or FIFO is never what was meant
        raise ToolError(
            f"{path} is not a regular file (mode {info.mode:o}: a device, FIFO or socket); write_file "
            f"only replaces regular files. Check it with terminal('ls -l {path}'), or write elsewhere."
        )
    data = content.encode("utf-8", "surrogateescape")
    try:
        ctx.backend.write_bytes(absolute, data)
    except OSError as exc:
        raise ToolError(f"Could not write {path}: {exc.strerror or exc}.") from None
    return {"path": display_path(ctx, absolute), "bytes_written": len(data), "created": info is None}


def patch(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    path, old, new, replace_all = args["path"], args["old_string"], args["new_string"], args["replace_all"]
    if old == "":
        raise ToolError("patch: old_string is empty. To create or overwrite a whole file use write_file.")
    if old == new:
        raise ToolError("patch: old_string and new_string are identical; nothing would change.")
    absolute = _abs(ctx, path)
    data = _load(ctx, "patch: ", path, absolute)
    if looks_binary(data):
        raise ToolError(f"patch: {path} is a binary file; patch edits text files only.", "BinaryFile")
    text, replaced = _decode(data)
    if replaced:
        raise ToolError(f"patch: {path} is not valid UTF-8; edit it with terminal (e.g. sed) instead.")
    newline = "\r\n" if "\r\n" in text else "\n"
    if newline != "\n":
        old, new = old.replace("\r\n", "\n").replace("\n", newline), new.replace("\r\n", "\n").replace("\n", newline)
    matches, strategy = find_matches(text, old)
    if not matches:
        raise ToolError(
            f"patch: old_string was not found in {path}, even ignoring differences in whitespace "
            "and indentation. read_file the region you want to change and copy the text exactly.",
            "NoMatch",
        )
    if len(matches) > 1 and not replace_all:
        where = ", ".join(str(text.count("\n", 0, start) + 1) for start, _ in matches[:10])
        raise ToolError(
            f"patch: old_string occurs {len(matches)} times in {path} (at lines {where}). Include more "
            "surrounding lines to make it unique, or pass replace_all=True to change every one.",
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
        ctx.backend.write_bytes(absolute, updated.encode("utf-8"))
    except OSError as exc:
        raise ToolError(f"patch: could not write {path}: {exc.strerror or exc}; the file is unchanged.") from None
    shown = display_path(ctx, absolute)
    diff = unified_diff(text, updated, shown)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[... diff cut at {MAX_DIFF_CHARS:,} chars ...]\n"
    return {"path": shown, "replacements": len(matches), "match": strategy, "diff": diff}


def unified_diff(before: str, after: str, shown: str) -> str:
    """A unified diff as `diff -u` prints it, "\\ No newline at end of file" included (without
    it a last line lacking a newline runs into the next diff line)."""

    def keepends(text: str) -> list[str]:  # LF-terminated lines (splitlines also cuts at \f)
        parts = text.split("\n")
        return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])

    lines = difflib.unified_diff(keepends(before), keepends(after), f"a/{shown}", f"b/{shown}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


_PATH = {"type": "string", "description": "File path, relative to the current directory or absolute."}

TOOLS = [
    Tool(
        name="read_file",
        description=(
            "Read a text file as numbered lines ('     7|text'), `limit` lines from line `offset`. "
            "Long files are paginated (see next_offset); binary files are refused; a missing path "
            "comes with 'did you mean' candidates."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _PATH,
                "offset": {"type": "integer", "minimum": 1, "default": 1, "description": "First line to show (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "default": 500, "description": "Most lines to show."},
            },
            "required": ["path"],
        },
        handler=read_file,
        touches=path_argument(shared=True),
        returns=(
            "{'path', 'content': numbered lines, 'total_lines', 'start_line', 'end_line', "
            "'next_offset'?: int, 'hint'?: str}"
        ),
    ),
    Tool(
        name="write_file",
        description="Create or replace a whole file with `content` (atomic; parent directories are created).",
        parameters={
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string", "description": "The complete new file text."}},
            "required": ["path", "content"],
        },
        handler=write_file,
        returns="{'path', 'bytes_written': int, 'created': bool}",
        touches=path_argument(),
        mutates=True,
    ),
    Tool(
        name="patch",
        description=(
            "Replace `old_string` with `new_string` in a file. old_string must match exactly one place "
            "unless replace_all=True; if the exact text is not found, a match ignoring trailing "
            "whitespace and indentation is tried (new_string is re-indented to fit). The file is left "
            "untouched on any failure."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_string": {"type": "string", "description": "The text to replace, with enough context to be unique."},
                "new_string": {"type": "string", "description": "The replacement text."},
                "replace_all": {"type": "boolean", "default": False, "description": "Replace every occurrence."},
            },
            "required": ["path", "old_string", "new_string"],
        },
        handler=patch,
        returns="{'path', 'replacements': int, 'match': 'exact'|'whitespace'|'indentation', 'diff': unified diff}",
        touches=path_argument(),
        mutates=True,
    ),
]

__all__ = ["SKIP_DIRS", "TOOLS", "display_path", "looks_binary", "split_lines"]
