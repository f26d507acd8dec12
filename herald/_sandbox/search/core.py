"""`search_files`: regex search of file contents, or find files by name. One implementation for
Herald (herald/tools/search.py, over the session's Backend) and for a backend-mode supervisor
(beside/searchplace.py, over its own file system, next to the script). Stdlib only, Python >= 3.8.

Two engines, one answer: ripgrep when the place has it (fast), else a pure-Python walk
(search/pyengine.py; `files.search = "python"` forces it). Both skip hidden entries and the generated
directories of walk.SKIP_DIRS, honour .gitignore (and .ignore, .rgignore; search/ignorefiles.py has the
rules), sort by path like `rg --sort=path` and cut long lines alike. Globs (file_glob, and
target='files' patterns) mean what search/globs.py says, anchored at the searched directory.

Both search the directory as opened once and checked (`held_dir`): ripgrep's shell enters it
and, before ripgrep starts, checks that the directory it is in really is the one checked (its
physical path, from the kernel: a link swapped in between fails that, and the search is refused);
ripgrep follows no links out of it. The walk's every listing and read is checked on what it
opened (toolcore/fileaccess.py), and results in a mask (toolcore/callroots.py) are dropped, whichever engine
found them.

ripgrep runs in the searched directory, so its paths are relative to it as the globs are. It
is told a narrowing that selects at least the matching files (see ripgrep.py `narrowing`), and its output
is filtered with the same matcher the Python engine uses; the caller's glob is never passed as
is (ripgrep's `?` and classes match bytes, and a matching --glob overrides .gitignore).

A search is bounded by its `timeout` argument, which inside a script is cut to the time the run
has left: ripgrep is killed with the shell command that runs it when that time is up, and the
Python engine's regex runs in a worker process killed likewise. The Python engine skips files
over files.read_max_bytes.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional

from ..shell.script import shell_quote
from ..toolcore.base import ToolError
from ..toolcore.callroots import Refused
from ..toolcore.deadline import Deadline
from ..toolcore.fileaccess import resolve_path
from ..toolcore.textfiles import REFUSED, display_path
from .globs import Glob, GlobError, compile_glob, name_glob
from .place import Held, Place
from .pyengine import find_files, find_matches
from .ripgrep import MAX_LINE_CHARS, RG_FLAGS, RG_MAX_COLUMNS, RG_SKIP, RipgrepRun, strip_dot, use_ripgrep

SEARCH_TIMEOUT = 120.0  # a direct call's limit; a script's call gets at most what its run has left
TOO_SLOW = (
    "Narrow the search: a smaller path, a file_glob, or a simpler pattern (nested repeats such as "
    "(a+)+ can take exponential time); or pass a larger timeout."
)


def _compile(text: str, what: str) -> Glob:
    try:
        return compile_glob(text)
    except GlobError as exc:
        raise ToolError(
            "search_files: %s %r is not a valid glob: %s. Globs: '*.py' (a name, any depth), "
            "'src/**/*.py' (a path below `path`), '*.{py,md}'." % (what, text, exc)
        ) from None


def _clip(text: str) -> str:
    return text[:MAX_LINE_CHARS] + " [...]" if len(text) > MAX_LINE_CHARS else text


def search_files(place: Place, args: Dict[str, Any]) -> Dict[str, Any]:
    """The tool, on bound arguments (see herald/tools/search.py for its schema)."""
    pattern, target, glob_text = args["pattern"], args["target"], args["file_glob"]
    deadline = Deadline("search_files", args["timeout"], TOO_SLOW, place.cancel)
    if not pattern:
        raise ToolError(
            "search_files: pattern is empty. Pass a regex (target='content') or a file-name glob (target='files')."
        )
    globs = [_compile(name_glob(pattern), "pattern")] if target == "files" else []
    if glob_text:
        globs.append(_compile(glob_text, "file_glob"))
    if target == "content":
        try:
            re.compile(pattern)  # an invalid pattern is told here, whichever engine runs it
        except re.error as exc:
            raise ToolError("search_files: invalid regular expression %r: %s." % (pattern, exc)) from None
    cwd = place.cwd
    try:
        info = place.tree.stat(resolve_path(cwd, args["path"] or "."))
    except Refused as exc:
        raise ToolError("search_files: %s" % exc.message, REFUSED) from None
    if info is None:
        raise ToolError("search_files: path %s does not exist (cwd is %s)." % (args["path"], cwd), "FileNotFound")
    root = info.path
    if not info.is_dir and not info.is_file:  # ripgrep would wait for ever on a FIFO it is given
        raise ToolError(
            "search_files: %s is not a regular file or a directory (a device, FIFO or "
            "socket); search a directory or a regular file." % args["path"]
        )
    # Globs are matched on paths relative to `base`: the searched directory, or for a single
    # file the directory holding it (ripgrep is handed that file as `start`).
    base, start = (root, ".") if info.is_dir else (posixpath.dirname(root), "./" + posixpath.basename(root))
    try:
        with place.held(base) as held:
            return _search(place, args, info.is_dir, root, base, start, held, globs, deadline)
    except Refused as exc:
        raise ToolError("search_files: %s" % exc.message, REFUSED) from None
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(
            "search_files: path %s does not exist (cwd is %s)." % (args["path"], cwd), "FileNotFound"
        ) from None


def _search(place: Place, args: Dict[str, Any], is_dir: bool, root: str, base: str, start: str, held: Held,
            globs: List[Glob], deadline: Deadline) -> Dict[str, Any]:
    """search_files in `base`, `held`, once its arguments were checked."""
    visible = held.visible
    pattern, target, limit, offset, cwd = args["pattern"], args["target"], args["limit"], args["offset"], place.cwd

    def keep(relative: str) -> bool:
        return visible(relative) and all(glob.matches(relative) for glob in globs)

    wanted = offset + limit + 1  # one extra tells whether there is a next page
    engine = "ripgrep" if use_ripgrep(place, deadline) else "python"
    search = RipgrepRun(place, base, held, globs, keep, offset, wanted, not is_dir, deadline)
    if target == "files":
        files: Optional[List[str]] = None
        first = 0  # files[i] is result number first + i
        if engine == "ripgrep":
            got = search.ripgrep(
                lambda narrowing: "rg --files %s %s %s -- %s" % (RG_FLAGS, narrowing, RG_SKIP, shell_quote(start))
            )
            if got is None:
                engine = "python"  # ripgrep's listing was too big to capture: walk instead
            else:
                files, first = [strip_dot(line) for line in got[0]], got[1]
        if files is None:
            files = find_files(place.tree, root, base, keep, wanted, deadline)
        page = [display_path(cwd, posixpath.join(base, f)) for f in files[offset - first : offset - first + limit]]
        return _page({"files": page}, first + len(files), offset, limit, engine)

    matches: Optional[List[Dict[str, Any]]] = None
    first = 0
    if engine == "ripgrep":
        def command(narrowing: str) -> str:
            return (
                "rg --line-number --no-heading --with-filename --null %s --max-columns=%d --max-columns-preview "
                "%s %s -e %s -- %s"
                % (RG_FLAGS, RG_MAX_COLUMNS, narrowing, RG_SKIP, shell_quote(pattern), shell_quote(start))
            )

        got = search.ripgrep(command)
        if got is None:
            engine = "python"  # ripgrep's output was too big to capture: search here instead
        else:
            matches, first = [], got[1]
            for line in got[0]:
                path, _, rest = line.partition("\0")
                number, _, text = rest.partition(":")
                if number.isdigit():
                    text = text[:-1] if text.endswith("\r") else text
                    where = display_path(cwd, posixpath.join(base, strip_dot(path)))
                    matches.append({"path": where, "line": int(number), "text": _clip(text)})
    if matches is None:
        matches = [
            {"path": display_path(cwd, path), "line": number, "text": _clip(line)}
            for path, number, line in find_matches(place.tree, root, base, keep, pattern, wanted, deadline, place.popen)
        ]
    page_matches = matches[offset - first : offset - first + limit]
    return _page({"matches": page_matches}, first + len(matches), offset, limit, engine)


def _page(result: Dict[str, Any], found: int, offset: int, limit: int, engine: str) -> Dict[str, Any]:
    shown = max(0, min(limit, found - offset))
    result.update({"count": shown, "offset": offset, "has_more": found > offset + limit, "engine": engine})
    if result["has_more"]:
        result["next_offset"] = offset + limit
        result["hint"] = "More results: call again with offset=%d, or narrow the pattern or path." % (offset + limit)
    return result
