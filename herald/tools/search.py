"""`search_files`: regex search of file contents, or find files by name, on the active backend.

Two engines, one answer: ripgrep when the backend has it (fast), else a pure-Python walk over
the Backend protocol (pysearch.py; `files.search = "python"` forces it). Both skip hidden entries and the
generated directories of walk.SKIP_DIRS, honour .gitignore (and .ignore, .rgignore; ignore.py
has the rules), sort by path like `rg --sort=path` and cut long lines alike. Globs (file_glob,
and target='files' patterns) mean what globs.py says, anchored at the searched directory.

ripgrep runs in the searched directory, so its paths are relative to it as the globs are. It
is told a narrowing that selects at least the matching files (see `_narrowing`), and its output
is filtered with the same matcher the Python engine uses; the caller's glob is never passed as
is (ripgrep's `?` and classes match bytes, and a matching --glob overrides .gitignore).

A search is bounded by its `timeout` argument, which inside a script the dispatcher cuts to the
time the run has left: ripgrep is killed with the shell command that runs it when that time is
up (so it never holds the shell into the next run), and the Python engine's regex runs in a
worker process killed likewise. The Python engine skips files over files.read_max_bytes.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Any

from ..backends.base import resolve_path
from ..backends.shell import shell_quote
from .deadline import Deadline
from .files import display_path
from .globs import Glob, GlobError, compile_glob, name_glob
from .ignore import Reach
from .pysearch import find_files, find_matches
from .registry import Tool, ToolContext, ToolError
from .resources import path_argument
from .walk import SKIP_DIRS

MAX_LINE_CHARS = 500
# ripgrep previews lines over this many bytes; at 4 bytes per character at most, a preview still
# holds MAX_LINE_CHARS characters, so both engines cut long lines to the same text.
RG_MAX_COLUMNS = 4 * MAX_LINE_CHARS
# --no-require-git: .gitignore counts without a .git directory, as in the Python engine;
# --no-ignore-global: the user's global git excludes are not part of the answer; --no-config:
# neither is a RIPGREP_CONFIG_PATH file. The globs are overrides that beat any ignore file's
# `!` line: hidden entries and SKIP_DIRS stay skipped, as in the walk.
RG_FLAGS = "--no-config --sort=path --no-require-git --no-ignore-global --color=never"
# After any narrowing --glob on the command line: the later of two matching globs wins.
RG_SKIP = " ".join(f"--glob {shell_quote(g)}" for g in ["!.*", *(f"!{name}/" for name in sorted(SKIP_DIRS))])
RG_TYPE = "heraldglob"  # the file type that carries the glob narrowing
SEARCH_TIMEOUT = 120.0  # a direct call's limit; a script's call gets at most what its run has left
PROBE_TIMEOUT = 10.0
TOO_SLOW = (
    "Narrow the search: a smaller path, a file_glob, or a simpler pattern (nested repeats such as "
    "(a+)+ can take exponential time); or pass a larger timeout."
)


def _use_ripgrep(ctx: ToolContext, deadline: Deadline) -> bool:
    if ctx.settings.files.search == "python":
        return False
    with ctx.cache_lock:
        if "ripgrep" not in ctx.cache:
            deadline.check()
            # An rg too old for the flags both engines' agreement needs (11.0 added
            # --no-require-git) counts as missing: the Python engine gives the same answer.
            probe = ctx.backend.run(f"rg {RG_FLAGS} --version >/dev/null 2>&1", timeout=min(PROBE_TIMEOUT, deadline.left()))
            if probe.timed_out or deadline.over():  # the call ran out of time: no answer to keep
                deadline.check()
                return False
            ctx.cache["ripgrep"] = probe.exit_code == 0
        return bool(ctx.cache["ripgrep"])


def _compile(text: str, what: str) -> Glob:
    try:
        return compile_glob(text)
    except GlobError as exc:
        raise ToolError(
            f"search_files: {what} {text!r} is not a valid glob: {exc}. Globs: '*.py' (a name, any depth), "
            "'src/**/*.py' (a path below `path`), '*.{py,md}'."
        ) from None


def _clip(text: str) -> str:
    return text[:MAX_LINE_CHARS] + " [...]" if len(text) > MAX_LINE_CHARS else text


def search_files(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    pattern, target, glob_text = args["pattern"], args["target"], args["file_glob"]
    limit, offset = args["limit"], args["offset"]
    deadline = Deadline("search_files", args["timeout"], TOO_SLOW)
    if not pattern:
        raise ToolError("search_files: pattern is empty. Pass a regex (target='content') or a file-name glob (target='files').")
    globs = [_compile(name_glob(pattern), "pattern")] if target == "files" else []
    if glob_text:
        globs.append(_compile(glob_text, "file_glob"))
    if target == "content":
        try:
            re.compile(pattern)  # an invalid pattern is told here, whichever engine runs it
        except re.error as exc:
            raise ToolError(f"search_files: invalid regular expression {pattern!r}: {exc}.") from None
    info = ctx.backend.stat(resolve_path(ctx.backend.cwd, args["path"] or "."))
    if info is None:
        raise ToolError(f"search_files: path {args['path']} does not exist (cwd is {ctx.backend.cwd}).", "FileNotFound")
    root = info.path
    if not info.is_dir and not info.is_file:  # ripgrep would wait for ever on a FIFO it is given
        raise ToolError(
            f"search_files: {args['path']} is not a regular file or a directory (a device, FIFO or "
            "socket); search a directory or a regular file."
        )
    # Globs are matched on paths relative to `base`: the searched directory, or for a single
    # file the directory holding it (ripgrep is handed that file as `start`).
    base, start = (root, ".") if info.is_dir else (posixpath.dirname(root), "./" + posixpath.basename(root))

    def keep(relative: str) -> bool:
        return all(glob.matches(relative) for glob in globs)

    wanted = offset + limit + 1  # one extra tells whether there is a next page
    engine = "ripgrep" if _use_ripgrep(ctx, deadline) else "python"
    if target == "files":
        files: list[str] | None = None
        first = 0  # files[i] is result number first + i
        if engine == "ripgrep":
            def listing(narrowing: str) -> str:
                return f"rg --files {RG_FLAGS} {narrowing} {RG_SKIP} -- {shell_quote(start)}"

            got = _ripgrep(ctx, listing, base, globs, keep, offset, wanted, not info.is_dir, deadline)
            if got is None:
                engine = "python"  # ripgrep's listing was too big to capture: walk instead
            else:
                files, first = [_strip_dot(line) for line in got[0]], got[1]
        if files is None:
            files = find_files(ctx.backend, root, base, keep, wanted, deadline)
        page = [display_path(ctx, posixpath.join(base, f)) for f in files[offset - first : offset - first + limit]]
        return _page({"files": page}, first + len(files), offset, limit, engine)

    matches: list[dict[str, Any]] | None = None
    first = 0
    if engine == "ripgrep":
        def command(narrowing: str) -> str:
            return (
                f"rg --line-number --no-heading --with-filename --null {RG_FLAGS} "
                f"--max-columns={RG_MAX_COLUMNS} --max-columns-preview {narrowing} {RG_SKIP} "
                f"-e {shell_quote(pattern)} -- {shell_quote(start)}"
            )

        got = _ripgrep(ctx, command, base, globs, keep, offset, wanted, not info.is_dir, deadline)
        if got is None:
            engine = "python"  # ripgrep's output was too big to capture: search here instead
        else:
            matches, first = [], got[1]
            for line in got[0]:
                path, _, rest = line.partition("\0")
                number, _, text = rest.partition(":")
                if number.isdigit():
                    text = text[:-1] if text.endswith("\r") else text
                    where = display_path(ctx, posixpath.join(base, _strip_dot(path)))
                    matches.append({"path": where, "line": int(number), "text": _clip(text)})
    if matches is None:
        matches = [
            {"path": display_path(ctx, path), "line": number, "text": _clip(line)}
            for path, number, line in find_matches(ctx.backend, root, base, keep, pattern, wanted, deadline)
        ]
    page_matches = matches[offset - first : offset - first + limit]
    return _page({"matches": page_matches}, first + len(matches), offset, limit, engine)


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _narrowing(globs: list[Glob]) -> tuple[str, bool, bool]:
    """ripgrep options selecting at least the files `globs` all match; whether exactly those;
    and whether what it finds must be checked against ignore files.

    One glob narrows: the file_glob when there is one (it comes last). A name glob becomes a
    file type, which ripgrep applies after ignore files (exact when it is the only glob and
    needed no widening). A path glob becomes --glob options, which select by path but
    override ignore files for what they match: those results are checked again here.
    """
    for glob in reversed(globs):
        if glob.anchored and (paths := glob.path_narrowing()) is not None:
            return " ".join(f"--glob {shell_quote(g)}" for g in paths), False, True
        if not glob.anchored and (named := glob.name_narrowing()) is not None:
            names, exact = named
            options = [f"--type-add {shell_quote(f'{RG_TYPE}:{name}')}" for name in names]
            return " ".join([*options, f"--type {RG_TYPE}"]), exact and len(globs) == 1, False
    return "", not globs, False


def _ripgrep(
    ctx: ToolContext,
    command: Callable[[str], str],
    base: str,
    globs: list[Glob],
    keep: Callable[[str], bool],
    offset: int,
    wanted: int,
    single_file: bool,
    deadline: Deadline,
) -> tuple[list[str], int] | None:
    """ripgrep's output lines for results `first` to `wanted` - 1, and `first`; None when the
    output is too big to capture. `command` makes the command line from the narrowing options.

    When the narrowing is exact only the page's lines cross the shell. Otherwise the lines are
    filtered here from the first one, fetching more until `wanted` are kept.
    """
    options, exact, recheck = _narrowing(globs)
    command_line = command(options)
    # A single file given to ripgrep is searched whether or not it is ignored (as in the walk).
    reach = Reach(ctx.backend, base) if recheck and not single_file else None

    def kept(line: str) -> bool:
        relative = _strip_dot(line.partition("\0")[0])
        return keep(relative) and (reach is None or reach.file(relative))

    if exact:
        lines = _rg_lines(ctx, command_line, base, deadline, offset, wanted)
        if lines is None:
            return None
        if all(kept(line) for line in lines):
            return lines, offset
        # Not exact after all (a single file given to ripgrep is searched whatever its type).
    stop = wanted
    while True:
        lines = _rg_lines(ctx, command_line, base, deadline, 0, stop)
        if lines is None:
            return None
        selected = [line for line in lines if kept(line)]
        if len(selected) >= wanted or len(lines) < stop:
            return selected[:wanted], 0
        stop *= 4


def _rg_lines(
    ctx: ToolContext, command: str, workdir: str, deadline: Deadline, skip: int = 0, stop: int | None = None
) -> list[str] | None:
    """Run ripgrep through the backend's shell in `workdir`; its output lines `skip` to `stop` - 1.

    Only those lines cross the shell (head/tail), so a deep page stays small. None when the
    output was still too big for the shell's capture (it would come back cut in the middle).
    The exit status is printed as a last line (the command runs inside the session's shell, so
    it must not `exit`); rg exits 1 for no match and 2 for an error such as a bad pattern.
    Out of time, the shell kills the command with everything it started (rg too).
    """
    window = (f" | head -n {stop}" if stop is not None else "") + (f" | tail -n +{skip + 1}" if skip else "")
    deadline.check()
    result = ctx.backend.run(
        f"{command} 2>/dev/null{window}; printf '\\n%s' \"${{PIPESTATUS[0]}}\"", timeout=deadline.left(), workdir=workdir
    )
    if result.timed_out or deadline.cancelled:  # cut short: what came back is not the answer
        error = deadline.expired_error()
        if result.note:  # killing rg took the session's shell with it: say what is kept
            error = ToolError(
                f"{error} The session's shell, which ran ripgrep, was restarted in the same directory "
                "with the same exported variables.",
                error.error_type,
            )
        raise error
    if result.truncated:
        return None
    body, _, status = result.output.rpartition("\n")
    code = int(status) if status.strip().isdigit() else result.exit_code
    lines = [line for line in body.split("\n") if line]
    if code == 2 and not lines:
        deadline.check()
        why = ctx.backend.run(
            f"{command} 2>&1 >/dev/null | head -c 1000", timeout=min(60.0, deadline.left()), workdir=workdir
        ).output.strip()
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
            "and generated directories and what .gitignore excludes; paginate with offset."
        ),
        parameters={
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regex for content, or a file-name glob such as '*.py' for files."},
                "path": {"type": "string", "default": ".", "description": "Directory (or file) to search."},
                "target": {"type": "string", "enum": ["content", "files"], "default": "content"},
                "file_glob": {
                    "type": ["string", "null"],
                    "description": (
                        "Only files matching this glob: '*.py' matches names at any depth, a glob with '/' "
                        "('src/*.py', 'src/**/*.py') paths below `path`; ** crosses directories, {py,md} alternates."
                    ),
                },
                "limit": {"type": "integer", "minimum": 1, "default": 50},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "timeout": {
                    "type": ["number", "null"],
                    "minimum": 0,
                    "default": SEARCH_TIMEOUT,
                    "description": f"Seconds before the search is stopped (default {SEARCH_TIMEOUT:g}).",
                },
            },
            "required": ["pattern"],
        },
        handler=search_files,
        touches=path_argument(shared=True, default="."),
        returns=(
            "{'matches': [{'path', 'line', 'text'}]} or {'files': [path]}, plus 'count', 'offset', "
            "'has_more', 'next_offset'?, 'engine'"
        ),
    )
]
