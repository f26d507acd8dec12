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
from .files import display_path, looks_binary, split_lines
from .registry import Tool, ToolContext, ToolError
from .walk import SKIP_DIRS, walk_files

MAX_LINE_CHARS = 500
# ripgrep previews lines over this many bytes; at 4 bytes per character at most, a preview still
# holds MAX_LINE_CHARS characters, so both engines cut long lines to the same text.
RG_MAX_COLUMNS = 4 * MAX_LINE_CHARS
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


def _expand_braces(glob: str) -> list[str]:
    """`*.{py,md}` -> [`*.py`, `*.md`]: the alternation ripgrep's globs have and fnmatch lacks."""
    open_at = glob.find("{")
    close_at = glob.find("}", open_at + 1)
    if open_at < 0 or close_at < 0:
        return [glob]
    head, body, tail = glob[:open_at], glob[open_at + 1 : close_at], glob[close_at + 1 :]
    return [expanded for option in body.split(",") for expanded in _expand_braces(head + option + tail)]


def _glob_matches(glob: str, absolute: str, root: str) -> bool:
    subject = posixpath.relpath(absolute, root) if "/" in glob else posixpath.basename(absolute)
    return any(fnmatch.fnmatchcase(subject, option) for option in _expand_braces(glob))


def _clip(text: str) -> str:
    return text[:MAX_LINE_CHARS] + " [...]" if len(text) > MAX_LINE_CHARS else text


def search_files(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    pattern, target, glob = args["pattern"], args["target"], args["file_glob"]
    limit, offset = args["limit"], args["offset"]
    if not pattern:
        raise ToolError("search_files: pattern is empty. Pass a regex (target='content') or a file-name glob (target='files').")
    info = ctx.backend.stat(resolve_path(ctx.backend.cwd, args["path"] or "."))
    if info is None:
        raise ToolError(f"search_files: path {args['path']} does not exist (cwd is {ctx.backend.cwd}).", "FileNotFound")
    root = info.path
    wanted = offset + limit + 1  # one extra tells whether there is a next page
    engine = "ripgrep" if _use_ripgrep(ctx) else "python"
    if target == "files":
        name_glob = _name_glob(pattern)
        found: list[str] | None = None
        first = 0  # found[i] is result number first + i
        if engine == "ripgrep":
            if glob:
                # Several --glob options are OR-ed by ripgrep: list by file_glob, filter by name here.
                lines = _rg_lines(ctx, f"rg --files --sort=path {_rg_globs(glob)} -- {shell_quote(root)}")
                if lines is not None:
                    found = [p for p in lines if _glob_matches(name_glob, _absolute(ctx, p), root)][:wanted]
            else:
                command = f"rg --files --sort=path {_rg_globs(name_glob)} -- {shell_quote(root)}"
                lines = _rg_lines(ctx, command, offset, wanted)
                if lines is not None:
                    found, first = lines, offset
            if found is None:
                engine = "python"  # ripgrep's listing was too big to capture: walk instead
            else:
                found = [_absolute(ctx, p) for p in found]
        if found is None:
            found = []
            for path in walk_files(ctx.backend, root):
                if _glob_matches(name_glob, path, root) and (not glob or _glob_matches(glob, path, root)):
                    found.append(path)
                    if len(found) >= wanted:
                        break
        page = [display_path(ctx, p) for p in found[offset - first : offset - first + limit]]
        return _page({"files": page}, first + len(found), offset, limit, engine)

    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"search_files: invalid regular expression {pattern!r}: {exc}.") from None
    matches: list[dict[str, Any]] | None = None
    first = 0
    if engine == "ripgrep":
        command = (
            "rg --line-number --no-heading --color=never --with-filename --null --sort=path "
            f"--max-columns={RG_MAX_COLUMNS} --max-columns-preview {_rg_globs(glob)} "
            f"-e {shell_quote(pattern)} -- {shell_quote(root)}"
        )
        lines = _rg_lines(ctx, command, offset, wanted)
        if lines is None:
            engine = "python"  # ripgrep's output was too big to capture: search here instead
        else:
            matches, first = [], offset
            for line in lines:
                path, _, rest = line.partition("\0")
                number, _, text = rest.partition(":")
                if number.isdigit():
                    text = text[:-1] if text.endswith("\r") else text
                    matches.append({"path": display_path(ctx, path), "line": int(number), "text": _clip(text)})
    if matches is None:
        matches = []
        for path in walk_files(ctx.backend, root):
            if glob and not _glob_matches(glob, path, root):
                continue
            try:
                data = ctx.backend.read_bytes(path)
            except OSError:
                continue
            if looks_binary(data):
                continue
            for lineno, line in enumerate(split_lines(data.decode("utf-8", "replace")), 1):
                if regex.search(line):
                    matches.append({"path": display_path(ctx, path), "line": lineno, "text": _clip(line)})
                    if len(matches) >= wanted:
                        break
            if len(matches) >= wanted:
                break
    page_matches = matches[offset - first : offset - first + limit]
    return _page({"matches": page_matches}, first + len(matches), offset, limit, engine)


def _absolute(ctx: ToolContext, path: str) -> str:
    return path if path.startswith("/") else resolve_path(ctx.backend.cwd, path)


def _rg_globs(glob: str | None) -> str:
    """--glob options: the caller's glob (if any), then the directories the Python walk skips.

    Later globs win in ripgrep, so the skipped directories stay skipped whatever `glob` says.
    """
    globs = [glob] if glob else []
    globs += [f"!{name}/" for name in sorted(SKIP_DIRS)]
    return " ".join(f"--glob {shell_quote(g)}" for g in globs)


def _rg_lines(ctx: ToolContext, command: str, skip: int = 0, stop: int | None = None) -> list[str] | None:
    """Run ripgrep through the backend's shell; its output lines number `skip` to `stop` - 1.

    Only those lines cross the shell (head/tail), so a deep page stays small. None when the
    output was still too big for the shell's capture (it would come back cut in the middle).
    The exit status is printed as a last line (the command runs inside the session's shell, so
    it must not `exit`); rg exits 1 for no match and 2 for an error such as a bad pattern.
    """
    window = (f" | head -n {stop}" if stop is not None else "") + (f" | tail -n +{skip + 1}" if skip else "")
    result = ctx.backend.run(f"{command} 2>/dev/null{window}; printf '\\n%s' \"${{PIPESTATUS[0]}}\"", timeout=120)
    if result.truncated:
        return None
    body, _, status = result.output.rpartition("\n")
    code = int(status) if status.strip().isdigit() else result.exit_code
    lines = [line for line in body.split("\n") if line]
    if code == 2 and not lines:
        why = ctx.backend.run(f"{command} 2>&1 >/dev/null | head -c 1000", timeout=60).output.strip()
        # Unreadable files or directories ("... (os error 13)") are skipped, as the walk does.
        problems = [line for line in why.splitlines() if "(os error" not in line]
        if problems:
            raise ToolError(f"search_files: ripgrep refused the search: {why}")
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
