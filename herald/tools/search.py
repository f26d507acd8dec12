"""`search_files`: regex search of file contents, or find files by name, on the active backend.

ripgrep does the work when the backend has it (it is fast and honours .gitignore); otherwise a
pure-Python walk over the Backend protocol gives the same result shape (it skips hidden and
generated directories but does not read .gitignore). `files.search = "python"` forces the latter.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any

from ..backends.base import resolve_path
from ..backends.shell import shell_quote
from .files import display_path, looks_binary
from .registry import Tool, ToolContext, ToolError
from .walk import walk_files

MAX_LINE_CHARS = 500
GLOB_CHARS = set("*?[")


def _use_ripgrep(ctx: ToolContext) -> bool:
    if ctx.settings.files.search == "python":
        return False
    with ctx.cache_lock:
        if "ripgrep" not in ctx.cache:
            probe = ctx.backend.run("command -v rg >/dev/null 2>&1", timeout=10)
            ctx.cache["ripgrep"] = probe.exit_code == 0
        return bool(ctx.cache["ripgrep"])


def _name_glob(pattern: str) -> str:
    return pattern if GLOB_CHARS & set(pattern) else f"*{pattern}*"


def _glob_matches(glob: str, absolute: str, root: str) -> bool:
    if "/" in glob:
        return fnmatch.fnmatch(posixpath.relpath(absolute, root), glob)
    return fnmatch.fnmatch(posixpath.basename(absolute), glob)


def search_files(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    pattern, target, glob = args["pattern"], args["target"], args["file_glob"]
    limit, offset = args["limit"], args["offset"]
    if not pattern:
        raise ToolError("search_files: pattern is empty. Pass a regex (target='content') or a file-name glob (target='files').")
    root = resolve_path(ctx.backend.cwd, args["path"])
    if ctx.backend.stat(root) is None:
        raise ToolError(f"search_files: path {args['path']} does not exist (cwd is {ctx.backend.cwd}).", "FileNotFound")
    wanted = offset + limit + 1  # one extra tells whether there is a next page
    engine = "ripgrep" if _use_ripgrep(ctx) else "python"
    if target == "files":
        name_glob = _name_glob(pattern)
        if engine == "ripgrep":
            globs = f"--glob {shell_quote(name_glob)}" + (f" --glob {shell_quote(glob)}" if glob else "")
            found = _rg_lines(ctx, f"rg --files --sort=path {globs} -- {shell_quote(root)}", wanted)
            paths = [p if p.startswith("/") else resolve_path(ctx.backend.cwd, p) for p in found]
        else:
            paths = []
            for path in walk_files(ctx.backend, root):
                if _glob_matches(name_glob, path, root) and (not glob or _glob_matches(glob, path, root)):
                    paths.append(path)
                    if len(paths) >= wanted:
                        break
        page = [display_path(ctx, p) for p in paths[offset : offset + limit]]
        return _page({"files": page}, len(paths), offset, limit, engine)

    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"search_files: invalid regular expression {pattern!r}: {exc}.") from None
    matches: list[dict[str, Any]] = []
    if engine == "ripgrep":
        command = (
            "rg --line-number --no-heading --color=never --with-filename --null --sort=path "
            f"--max-columns={MAX_LINE_CHARS} --max-columns-preview "
            + (f"--glob {shell_quote(glob)} " if glob else "")
            + f"-e {shell_quote(pattern)} -- {shell_quote(root)}"
        )
        for line in _rg_lines(ctx, command, wanted):
            path, _, rest = line.partition("\0")
            number, _, text = rest.partition(":")
            if number.isdigit():
                matches.append({"path": display_path(ctx, path), "line": int(number), "text": text})
    else:
        for path in walk_files(ctx.backend, root):
            if glob and not _glob_matches(glob, path, root):
                continue
            try:
                data = ctx.backend.read_bytes(path)
            except OSError:
                continue
            if looks_binary(data):
                continue
            for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if regex.search(line):
                    if len(line) > MAX_LINE_CHARS:
                        line = line[:MAX_LINE_CHARS] + " [...]"
                    matches.append({"path": display_path(ctx, path), "line": lineno, "text": line})
                    if len(matches) >= wanted:
                        break
            if len(matches) >= wanted:
                break
    return _page({"matches": matches[offset : offset + limit]}, len(matches), offset, limit, engine)


def _rg_lines(ctx: ToolContext, command: str, wanted: int) -> list[str]:
    """Run ripgrep through the backend's shell; the first `wanted` output lines.

    The exit status is printed as a last line (the command runs inside the session's shell, so
    it must not `exit`); rg exits 1 for no match and 2 for an error such as a bad pattern.
    """
    result = ctx.backend.run(f"{command} 2>/dev/null | head -n {wanted}; printf '\\n%s' \"${{PIPESTATUS[0]}}\"", timeout=120)
    body, _, status = result.output.rpartition("\n")
    code = int(status) if status.strip().isdigit() else result.exit_code
    lines = [line for line in body.split("\n") if line]
    if code == 2 and not lines:
        why = ctx.backend.run(f"{command} 2>&1 >/dev/null | head -c 1000", timeout=60).output.strip()
        raise ToolError(f"search_files: ripgrep refused the search: {why or 'unknown error'}")
    return lines


def _page(result: dict[str, Any], found: int, offset: int, limit: int, engine: str) -> dict[str, Any]:
    shown = max(0, min(limit, found - offset))
    result.update({"count": shown, "offset": offset, "has_more": found > offset + limit, "engine": engine})
    if result["has_more"]:
        result["next_offset"] = offset + limit
        result["hint"] = f"More results: call again with offset={offset + limit}, or narrow the pattern or path."
    return result


TOOLS = [
    Tool(
        name="search_files",
        description=(
            "Search file contents with a regex (target='content': results give path, line and text) "
            "or find files by name glob (target='files'). Searches `path` recursively, skipping hidden "
            "and generated directories; paginate with offset."
        ),
        parameters={
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regex for content, or a file-name glob such as '*.py' for files."},
                "path": {"type": "string", "default": ".", "description": "Directory (or file) to search."},
                "target": {"type": "string", "enum": ["content", "files"], "default": "content"},
                "file_glob": {"type": ["string", "null"], "description": "Only files whose name matches this glob, e.g. '*.py'."},
                "limit": {"type": "integer", "minimum": 1, "default": 50},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
            },
            "required": ["pattern"],
        },
        handler=search_files,
        returns=(
            "{'matches': [{'path', 'line', 'text'}]} or {'files': [path]}, plus 'count', 'offset', "
            "'has_more', 'next_offset'?, 'engine'"
        ),
    )
]
