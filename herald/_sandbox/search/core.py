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
is told a narrowing that selects at least the matching files (see `_narrowing`), and its output
is filtered with the same matcher the Python engine uses; the caller's glob is never passed as
is (ripgrep's `?` and classes match bytes, and a matching --glob overrides .gitignore).

A search is bounded by its `timeout` argument, which inside a script is cut to the time the run
has left: ripgrep is killed with the shell command that runs it when that time is up, and the
Python engine's regex runs in a worker process killed likewise. The Python engine skips files
over files.read_max_bytes.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import threading
from typing import (
    Any,
    Callable,
    ContextManager,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
)

from ..shell.script import shell_quote
from ..toolcore.base import ToolError
from ..toolcore.callroots import Confinement, Refused
from ..toolcore.deadline import Deadline
from ..toolcore.fileaccess import open_dir, resolve_path
from ..toolcore.textfiles import REFUSED, display_path
from .globs import Glob, GlobError, compile_glob, name_glob
from .ignorefiles import Reach, Tree
from .pyengine import Popen, find_files, find_matches
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
RG_SKIP = " ".join("--glob %s" % shell_quote(g) for g in ["!.*"] + ["!%s/" % name for name in sorted(SKIP_DIRS)])
RG_TYPE = "heraldglob"  # the file type that carries the glob narrowing
SEARCH_TIMEOUT = 120.0  # a direct call's limit; a script's call gets at most what its run has left
PROBE_TIMEOUT = 10.0
MOVED = "herald-search-dir-moved"  # the last line of a ripgrep command whose directory was swapped
TOO_SLOW = (
    "Narrow the search: a smaller path, a file_glob, or a simpler pattern (nested repeats such as "
    "(a+)+ can take exponential time); or pass a larger timeout."
)


class Ran(Protocol):
    """A shell command's outcome as the place reports it (the Backend protocol's CommandResult)."""

    @property
    def output(self) -> str: ...

    @property
    def exit_code(self) -> int: ...

    @property
    def timed_out(self) -> bool: ...

    @property
    def truncated(self) -> bool:
        """The output passed the capture's cap: what came back is cut."""
        ...

    @property
    def note(self) -> str: ...


class Place(Protocol):
    """Where a search runs: its files, its shell for ripgrep, its session's directory."""

    tree: Tree
    cwd: str
    python_only: bool  # files.search = "python"
    cache: Dict[str, Any]  # lives as long as the place's session: whether ripgrep is there
    cache_lock: threading.Lock
    cancel: Optional[threading.Event]  # set when the run that made the call is over
    popen: Popen  # starts the regex worker

    def run(self, command: str, timeout: float, workdir: Optional[str] = None) -> Ran:
        """Run a bash command line (pipes and all); out of time, kill it with all it started."""
        ...

    def held(self, directory: str) -> ContextManager["Held"]:
        """The directory to search, held for the search. Refused when it is out of the call's reach."""
        ...


Visible = Callable[[str], bool]


class Held(NamedTuple):
    """A directory held for a search."""

    workdir: str  # where ripgrep runs
    visible: Visible  # whether a path relative to it may be shown (not in a mask)
    place: Optional[str]  # the physical path ripgrep's directory must have (None: not checked here)


@contextlib.contextmanager
def held_dir(directory: str, confinement: Optional[Confinement]) -> Iterator[Held]:
    """`directory` opened once and checked (links followed, then where it really is), held
    while the search runs: ripgrep's shell enters its physical path and checks it is still
    there (`Held.place`); the walk checks each thing it opens."""
    fd, place = open_dir(directory, confinement)
    try:
        if confinement is None or not confinement.masked:
            yield Held(place, everything, place)
        else:
            base = place.rstrip("/")
            yield Held(place, lambda rel: not confinement.is_masked(base + "/" + rel, False), place)
    finally:
        os.close(fd)


def everything(relative: str) -> bool:
    return True


def use_ripgrep(place: Place, deadline: Deadline) -> bool:
    if place.python_only:
        return False
    with place.cache_lock:
        if "ripgrep" not in place.cache:
            deadline.check()
            # An rg too old for the flags both engines' agreement needs (11.0 added
            # --no-require-git) counts as missing: the Python engine gives the same answer.
            probe = place.run("rg %s --version >/dev/null 2>&1" % RG_FLAGS, min(PROBE_TIMEOUT, deadline.left()))
            if probe.timed_out or deadline.over():  # the call ran out of time: no answer to keep
                deadline.check()
                return False
            place.cache["ripgrep"] = probe.exit_code == 0
        return bool(place.cache["ripgrep"])


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
    search = _Search(place, base, held, globs, keep, offset, wanted, not is_dir, deadline)
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
                files, first = [_strip_dot(line) for line in got[0]], got[1]
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
                    where = display_path(cwd, posixpath.join(base, _strip_dot(path)))
                    matches.append({"path": where, "line": int(number), "text": _clip(text)})
    if matches is None:
        matches = [
            {"path": display_path(cwd, path), "line": number, "text": _clip(line)}
            for path, number, line in find_matches(place.tree, root, base, keep, pattern, wanted, deadline, place.popen)
        ]
    page_matches = matches[offset - first : offset - first + limit]
    return _page({"matches": page_matches}, first + len(matches), offset, limit, engine)


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _narrowing(globs: List[Glob]) -> Tuple[str, bool, bool]:
    """ripgrep options selecting at least the files `globs` all match; whether exactly those;
    and whether what it finds must be checked against ignore files.

    One glob narrows: the file_glob when there is one (it comes last). A name glob becomes a
    file type, which ripgrep applies after ignore files (exact when it is the only glob and
    needed no widening). A path glob becomes --glob options, which select by path but
    override ignore files for what they match: those results are checked again here.
    """
    for glob in reversed(globs):
        paths = glob.path_narrowing() if glob.anchored else None
        if paths is not None:
            return " ".join("--glob %s" % shell_quote(g) for g in paths), False, True
        named = glob.name_narrowing() if not glob.anchored else None
        if named is not None:
            names, exact = named
            options = ["--type-add %s" % shell_quote("%s:%s" % (RG_TYPE, name)) for name in names]
            return " ".join([*options, "--type %s" % RG_TYPE]), exact and len(globs) == 1, False
    return "", not globs, False


class _Search:
    """One search's ripgrep runs: the command lines and the filtering of what comes back."""

    def __init__(
        self, place: Place, base: str, held: Held, globs: List[Glob], keep: Callable[[str], bool], offset: int,
        wanted: int, single_file: bool, deadline: Deadline,
    ) -> None:
        self.place, self.base, self.globs, self.keep = place, base, globs, keep
        self.workdir = held.workdir
        # Before ripgrep: is the shell's directory, physically, the one held? (`cd -P .` sets
        # $PWD from the kernel's getcwd; no process is started for it.)
        self.guard = "" if held.place is None else (
            "{ builtin cd -P . && [ \"$PWD\" = %s ]; } || { printf '\\n%%s' %s; exit; }; "
            % (shell_quote(held.place), MOVED))
        self.offset, self.wanted, self.single_file, self.deadline = offset, wanted, single_file, deadline

    def ripgrep(self, command: Callable[[str], str]) -> Optional[Tuple[List[str], int]]:
        """ripgrep's output lines for results `first` to `wanted` - 1, and `first`; None when the
        output is too big to capture. `command` makes the command line from the narrowing options.

        When the narrowing is exact only the page's lines cross the shell. Otherwise the lines are
        filtered here from the first one, fetching more until `wanted` are kept.
        """
        options, exact, recheck = _narrowing(self.globs)
        command_line = command(options)
        # A single file given to ripgrep is searched whether or not it is ignored (as in the walk).
        reach = Reach(self.place.tree, self.base) if recheck and not self.single_file else None

        def kept(line: str) -> bool:
            relative = _strip_dot(line.partition("\0")[0])
            return self.keep(relative) and (reach is None or reach.file(relative))

        if exact:
            lines = self._lines(command_line, self.offset, self.wanted)
            if lines is None:
                return None
            if all(kept(line) for line in lines):
                return lines, self.offset
            # Not exact after all (a single file given to ripgrep is searched whatever its type).
        stop = self.wanted
        while True:
            lines = self._lines(command_line, 0, stop)
            if lines is None:
                return None
            selected = [line for line in lines if kept(line)]
            if len(selected) >= self.wanted or len(lines) < stop:
                return selected[: self.wanted], 0
            stop *= 4

    def _lines(self, command: str, skip: int, stop: int) -> Optional[List[str]]:
        """Run ripgrep through the place's shell in `base`; its output lines `skip` to `stop` - 1.

        Only those lines cross the shell (head/tail), so a deep page stays small. None when the
        output was still too big for the shell's capture (it would come back cut in the middle).
        The exit status is printed as a last line (on Herald's side the command runs inside the
        session's shell, so it must not `exit`); rg exits 1 for no match and 2 for an error such
        as a bad pattern. Out of time, the shell kills the command with everything it started.
        """
        place, deadline = self.place, self.deadline
        window = " | head -n %d" % stop + (" | tail -n +%d" % (skip + 1) if skip else "")
        deadline.check()
        result = place.run("%s%s 2>/dev/null%s; printf '\\n%%s' \"${PIPESTATUS[0]}\"" % (self.guard, command, window),
                           deadline.left(), self.workdir)
        if result.timed_out or deadline.cancelled:  # cut short: what came back is not the answer
            error = deadline.expired_error()
            if result.note:  # killing rg took the session's shell with it: say what is kept
                error = ToolError(
                    "%s The session's shell, which ran ripgrep, was restarted in the same directory "
                    "with the same exported variables." % error,
                    error.error_type,
                )
            raise error
        if result.truncated:
            return None
        body, _, status = result.output.rpartition("\n")
        if status == MOVED:
            raise Refused(self.base, "%s was moved or replaced while it was searched (it no longer leads where it "
                                     "was checked); the search is refused. Search it again." % self.base)
        code = int(status) if status.strip().isdigit() else result.exit_code
        lines = [line for line in body.split("\n") if line]
        if code == 2 and not lines:
            deadline.check()
            why = place.run("%s%s 2>&1 >/dev/null | head -c 1000" % (self.guard, command), min(60.0, deadline.left()),
                            self.workdir).output.strip()
            # Unreadable files or directories ("... (os error 13)") are skipped, as the walk does.
            problems = [line for line in why.splitlines() if "(os error" not in line]
            if problems:
                raise ToolError("search_files: ripgrep refused the search: %s" % why)
        return lines


def _page(result: Dict[str, Any], found: int, offset: int, limit: int, engine: str) -> Dict[str, Any]:
    shown = max(0, min(limit, found - offset))
    result.update({"count": shown, "offset": offset, "has_more": found > offset + limit, "engine": engine})
    if result["has_more"]:
        result["next_offset"] = offset + limit
        result["hint"] = "More results: call again with offset=%d, or narrow the pattern or path." % (offset + limit)
    return result
