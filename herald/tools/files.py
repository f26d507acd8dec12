"""`read_file`, `write_file` and `patch`, written once against the Backend protocol.

Their logic is the sandbox package's tool core (herald/_sandbox/toolcore/textfiles.py), which a
backend-mode supervisor runs next to the script too; here it runs on the session's Backend, and
a missing file gets "did you mean" candidates from a walk of the backend.
"""

from __future__ import annotations

import difflib
import posixpath
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from .._sandbox.search.walk import SKIP_DIRS, walk_files
from .._sandbox.toolcore import textfiles
from .._sandbox.toolcore.textfiles import FileMissing, looks_binary, split_lines
from .._sandbox.wire.grant import FileLimits
from ..backends.base import call_cwd
from .context import ToolContext
from .guarded import GuardedFiles
from .registry import Tool, ToolError
from .resources import path_argument


def display_path(ctx: ToolContext, absolute: str) -> str:
    """Paths under the session's cwd are shown relative to it; others stay absolute."""
    return textfiles.display_path(call_cwd(ctx.backend), absolute)


def file_limits(ctx: ToolContext) -> FileLimits:
    """The files settings the tool core reads (also sent in a backend-mode supervisor's grant)."""
    settings = ctx.settings.files
    return {"read_max_bytes": int(settings.read_max_bytes), "read_max_line_chars": int(settings.read_max_line_chars),
            "read_max_chars": int(settings.read_max_chars)}


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
    while parent and parent != "/" and _exists_within_reach(backend, parent) is False:
        parent = posixpath.dirname(parent)
    try:
        names = [e.name for e in backend.list_dir(parent)]
    except (OSError, ValueError):
        names = []
    found += [posixpath.join(parent, n) for n in difflib.get_close_matches(name, names, n=limit, cutoff=0.6)]
    lowered = name.lower()
    near: list[tuple[float, str]] = []
    for path in walk_files(backend, call_cwd(backend), max_entries=5000):
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


def _exists_within_reach(backend: Any, path: str) -> bool | None:
    """Whether `path` exists; None when it lies out of the call's reach (never listed then)."""
    try:
        return backend.stat(path) is not None
    except OSError:
        return None


def _run_core(name: str, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    try:
        # Guarded: a write checks the run is still on; what a read loads counts against its cap.
        return textfiles.TOOLS[name](GuardedFiles(ctx.backend, name), call_cwd(ctx.backend), file_limits(ctx), args)
    except FileMissing as missing:
        raise not_found(ctx, missing.path, missing.absolute) from None


def read_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return _run_core("read_file", args, ctx)


def write_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return _run_core("write_file", args, ctx)


def patch(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return _run_core("patch", args, ctx)


class ReadFileResult(TypedDict):
    path: str
    content: Annotated[str, "numbered lines, '     7|text'"]
    total_lines: int
    start_line: int
    end_line: int
    next_offset: NotRequired[Annotated[int, "there is more: pass it as offset"]]
    hint: NotRequired[str]


class WriteFileResult(TypedDict):
    path: str
    bytes_written: int
    created: bool


class PatchResult(TypedDict):
    path: str
    replacements: int
    match: Literal["exact", "whitespace", "indentation", "collapsed-whitespace"]
    diff: Annotated[str, "unified diff"]


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
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "default": 1,
                    "description": "First line to show (1-based).",
                },
                "limit": {"type": "integer", "minimum": 1, "default": 500, "description": "Most lines to show."},
            },
            "required": ["path"],
        },
        handler=read_file,
        touches=path_argument(shared=True),
        returns=ReadFileResult,
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
        returns=WriteFileResult,
        touches=path_argument(),
        mutates=True,
    ),
    Tool(
        name="patch",
        description=(
            "Replace `old_string` with `new_string` in a file. old_string must match exactly one place "
            "unless replace_all=True; if the exact text is not found, a match ignoring trailing "
            "whitespace and indentation is tried (new_string is re-indented to fit). The file is left "
            "untouched on any failure; when old_string is gone but new_string is there, the error "
            "(AlreadyApplied) says the edit looks applied already."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_string": {
                    "type": "string",
                    "description": "The text to replace, with enough context to be unique.",
                },
                "new_string": {"type": "string", "description": "The replacement text."},
                "replace_all": {"type": "boolean", "default": False, "description": "Replace every occurrence."},
            },
            "required": ["path", "old_string", "new_string"],
        },
        handler=patch,
        returns=PatchResult,
        touches=path_argument(),
        mutates=True,
    ),
]

__all__ = ["SKIP_DIRS", "TOOLS", "display_path", "file_limits", "looks_binary", "split_lines"]
