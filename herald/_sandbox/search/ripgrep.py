"""search_files' ripgrep engine: whether the place has a usable ripgrep, the narrowing it is
told, and its runs through the place's shell in the held directory (checked before ripgrep
starts). What it finds is filtered with the Python engine's matcher (search/core.py has the
whole design). Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from ..shell.script import shell_quote
from ..toolcore.base import ToolError
from ..toolcore.callroots import Refused
from ..toolcore.deadline import Deadline
from .globs import Glob
from .ignorefiles import Reach
from .place import Held, Place
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
PROBE_TIMEOUT = 10.0
MOVED = "herald-search-dir-moved"  # the last line of a ripgrep command whose directory was swapped


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


def strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def narrowing(globs: List[Glob]) -> Tuple[str, bool, bool]:
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


class RipgrepRun:
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
        options, exact, recheck = narrowing(self.globs)
        command_line = command(options)
        # A single file given to ripgrep is searched whether or not it is ignored (as in the walk).
        reach = Reach(self.place.tree, self.base) if recheck and not self.single_file else None

        def kept(line: str) -> bool:
            relative = strip_dot(line.partition("\0")[0])
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
