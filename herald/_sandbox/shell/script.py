"""The persistent shell's protocol: the text sent to a `bash` reading its stdin, and the records
it prints back. One implementation for Herald's PersistentShell (herald/backends/shell.py) and for
the shell a backend-mode supervisor runs next to the script (shell/localshell.py).

Stdlib only, Python >= 3.8 (the sandbox package).

How one command runs: its text goes to a file next to the shell's state file, written by
Herald when the shell runs on this machine (ShellScripts.write_command), else by the shell from
its input (sent single-quoted, to `__herald_put`, a function defined at the shell's start): bash
reads its input a byte per system call, so the less of it the better (~0.4 µs a byte here).
The shell checks in a throwaway subshell that the text parses (as a function body)
and sources the file in the shell itself, at the top level, so `cd`, `export` and `declare`
persist, with stdin from /dev/null and stderr merged into stdout. A command that does not parse
runs in a subshell, which reports the error: parsing broken text in the session's shell is what
must not happen (with an unterminated quote, `${`, `$(` or a trailing backslash, bash 5.2's
`eval` goes on reading the session's own input, and an unterminated `$(` corrupts its heap).
Then `__herald_done`, a function the shell defined at its start, ends the command's jobs (a
script's), saves `export -p` to the state file and prints a record
`\\n<marker> <exit code> <parsed> <cwd>\\0` whose marker holds a random nonce.
"""

from __future__ import annotations

import os
import shutil
import stat
from typing import List, Optional, Tuple

from ..confine.readonly import CWD_FD, FILTER_FD, STDERR_FD, bwrap_argv, octal, shell_words

# Kills the shell's children once a command has returned: what /proc lists as its children
# (jobs, `cmd &`, disowned ones too; each job is its own process group under `set -m`), read
# with builtins only, since a `$(jobs -p)` would fork a subshell on every command; `jobs -p`
# where the kernel has no such list. Then forgets them, so no "Killed" notice lands in the
# next command's output.
END_JOBS = (
    "__herald_kids=(); if [ -r /proc/$$/task/$$/children ]; then "
    "builtin read -r -a __herald_kids < /proc/$$/task/$$/children; "
    "else __herald_kids=($(builtin jobs -p)); fi; "
    "for __herald_job in \"${__herald_kids[@]}\"; do "
    "builtin kill -9 -- -$__herald_job $__herald_job; done 2>/dev/null; builtin disown -a; "
    "builtin unset __herald_kids __herald_job; "
)

# Under a guard (shell/guard.py: a subreaper, the shell's parent), what a command started and that
# left the shell's tree (`setsid -f`, `(cmd &)`, a double fork) re-parented there: after every
# command the guard is asked to kill it, and the record waits for its answer on the pipe.
END_ESCAPES = (
    "if builtin test -n \"$__herald_guard\"; then builtin kill -USR1 \"$__herald_guard\" 2>/dev/null && "
    "IFS= builtin read -r -N 1 -t 30 -u \"$__herald_ack\" __herald_job 2>/dev/null; builtin unset __herald_job; fi; "
)

# Taken up at the start: the guard's pid and pipe (only from our own parent), out of the environment.
TAKE_GUARD = (
    "__herald_guard=; __herald_ack=; case ${HERALD_SHELL_GUARD-} in \"$PPID\":*) "
    "__herald_guard=$PPID; __herald_ack=${HERALD_SHELL_GUARD#*:} ;; esac; builtin unset HERALD_SHELL_GUARD\n"
)


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


class ShellScripts:
    """The text of one shell's start and commands; `nonce` makes its markers unforgeable."""

    def __init__(self, nonce: str, state_path: str, command_path: str) -> None:
        self.nonce = nonce
        self.state_path = state_path
        self.command_path = command_path
        self.done = ("__HERALD_DONE_%s__ " % nonce).encode()
        self.ready = ("__HERALD_READY_%s__ " % nonce).encode()

    def setup(self, cwd: str, restore: bool) -> str:
        """A new shell's first input: quiet prompts, the function that ends each command, the
        saved state, the directory, a ready record carrying the shell's pid."""
        return (
            "set -m +o history 2>/dev/null; unset PROMPT_COMMAND; PS1=''; PS2=''\n"
            + TAKE_GUARD
            + self._done_function()
            + self._put_function()
            + (self.restore() + "\n" if restore else "")
            + "builtin cd -- %s 2>/dev/null || builtin cd\n" % shell_quote(cwd)
            + "printf '%%s%%s %%s\\0' __HERALD_READY_ %s__ \"$$\"\n" % self.nonce
        )

    def restore(self) -> str:
        """Re-read the exported variables another shell of the session saved."""
        return "builtin . %s 2>/dev/null" % shell_quote(self.state_path)

    def follow(self, cwd: str) -> str:
        """Take up the state and directory another shell of the session left (before a command)."""
        return "%s; builtin cd -- %s 2>/dev/null; " % (self.restore(), shell_quote(cwd))

    def command(
        self, command: str, workdir: Optional[str], parsed_before: bool, end_jobs: bool, written: bool = False,
        confined: bool = False,
    ) -> str:
        """The input that runs `command` and prints its done record. `written`: the caller,
        on the shell's own machine, has put the command in its file (write_command): the text
        then stays out of the shell's input, which bash reads a byte per system call.
        `confined`: run it read-only under the OS (`__herald_ro`, defined by confine_function)."""
        path = shell_quote(self.command_path)
        source = "__herald_ro" if confined else "builtin . %s" % path
        if workdir:
            source = "builtin cd -- %s && %s" % (shell_quote(workdir), source)
        run_here = "{ %s; }" % ("( %s )" % source if workdir else source)
        if parsed_before:  # parsed fine in this shell before: no subshell to check
            run_it = "__herald_ok=1; %s" % run_here
        else:
            if written:
                parse = ("IFS= builtin read -r -d '' __herald_c < %s; "
                         "builtin eval \"__herald_parse() {\n$__herald_c\n:\n}\"" % path)
            else:
                parse = "builtin eval %s" % shell_quote("__herald_parse() {\n%s\n:\n}" % command)
            run_it = (
                "if ( %s ) >/dev/null 2>&1; "
                "then __herald_ok=1; %s; else __herald_ok=0; ( %s ); fi" % (parse, run_here, source)
            )
        write = "" if written else "__herald_put %s && " % shell_quote(command)
        return "__herald_ok=0; { %s%s; } </dev/null 2>&1; __herald_done $? %d\n" % (write, run_it, 1 if end_jobs else 0)

    def confine_function(self, bwrap: str, seccomp: bytes) -> str:
        """`__herald_ro`: run the command's file in a fresh bash confined read-only by bwrap
        (confine/readonly.py), from this shell's directory and exported variables; then `cd` where it
        ended if that is a directory. Its status is the command's. Defined once per shell."""
        private = os.path.dirname(self.command_path)
        cwd_file = shell_quote(os.path.join(private, "ro-cwd"))
        filter_file = shell_quote(os.path.join(private, "ro-filter"))
        setup_file = shell_quote(os.path.join(private, "ro-setup"))
        argv = bwrap_argv(bwrap, private, with_filter=True)
        # The confined shell marks that it started (`+`), takes the command's stderr back from its
        # spare descriptor (`command exec`: `builtin exec` would undo the redirection after it), and
        # runs the command without the three descriptors and, as in the session's shell, without
        # positional parameters; its own `exit` skips the report (the directory stays), as it would
        # end a session shell's command.
        inner = ("builtin printf + >&%d; command exec 2>&%d %d>&-; __herald_cmd=$1; builtin set --; "
                 "builtin . \"$__herald_cmd\" %d>&- %d<&-; __herald_rc=$?; "
                 "builtin printf '%%s' \"$PWD\" >&%d; builtin exit $__herald_rc"
                 % (CWD_FD, STDERR_FD, STDERR_FD, CWD_FD, FILTER_FD, CWD_FD))
        # What an earlier (unconfined) command left in their place, a FIFO for one, must not hang us.
        clear = "".join("{ builtin test -f %s && ! builtin test -L %s; } || command rm -rf -- %s 2>/dev/null; "
                        % (f, f, f) for f in (cwd_file, filter_file, setup_file))
        write_filter = "builtin printf '%s' >| %s || builtin return 126; " % (octal(seccomp), filter_file)
        # A bwrap that fails before the shell starts (no `+`) is tried again: binding `/` walks
        # every mount, and one that goes meanwhile (a container stopping) fails the bind. Its
        # messages are shown only if the last try fails too.
        return (
            "__herald_ro() { %s%s builtin local __herald_rc=126 __herald_dir= __herald_try; "
            "for __herald_try in 1 2 3; do "
            "%s --chdir \"$PWD\" -- \"$BASH\" --noprofile --norc -c %s bash %s %d>| %s %s %d>&2 2>| %s; "
            "__herald_rc=$?; __herald_dir=; IFS= builtin read -r -d '' __herald_dir < %s; "
            "case $__herald_dir in +*) break ;; esac; done; "
            "case $__herald_dir in +*) ;; *) builtin test -s %s && builtin printf '%%s\\n' \"$(< %s)\" >&2 ;; esac; "
            "__herald_dir=${__herald_dir#+}; "
            "case $__herald_dir in /*) builtin test \"$__herald_dir\" = \"$PWD\" || "
            "{ builtin test -d \"$__herald_dir\" && builtin cd -- \"$__herald_dir\"; } ;; esac; "
            "builtin return $__herald_rc; }\n" % (
                clear, write_filter, shell_words(argv), shell_quote(inner), shell_quote(self.command_path),
                CWD_FD, cwd_file, "%d< %s" % (FILTER_FD, filter_file), STDERR_FD, setup_file, cwd_file,
                setup_file, setup_file)
        )

    def write_command(self, command: str) -> bool:
        """Put `command` in the shell's command file from here (the shell runs on this machine);
        False if that failed, and the command's input then carries it (command(written=False))."""
        # O_NONBLOCK: a FIFO a command left in the file's place must not hang us.
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NONBLOCK
        for _ in range(2):
            try:
                fd = os.open(self.command_path, flags, 0o600)
            except OSError:
                if not _clear(self.command_path):
                    return False
                continue
            try:
                data = command.encode("utf-8", "surrogateescape")
                while data:
                    data = data[os.write(fd, data):]
                return True
            except OSError:
                return False
            finally:
                os.close(fd)
        return False

    def _put_function(self) -> str:
        """`__herald_put TEXT`: the shell writes a command's text to its file (when Herald cannot:
        the shell runs elsewhere). Defined once per shell, so the path is not in every
        command's input. A command may have put something else in the file's place (it can
        reach it by $BASH_SOURCE): a FIFO would block the write, a directory fail it, for every
        command; so the place is cleared first, as _clear does from here."""
        path = shell_quote(self.command_path)
        return ("__herald_put() { builtin test -f %s || builtin test ! -e %s || command rm -rf -- %s; "
                "builtin printf '%%s' \"$1\" >| %s; }\n" % (path, path, path, path))

    def _done_function(self) -> str:
        """`__herald_done STATUS END_JOBS`: what follows every command, defined once per shell.
        bash reads a pipe a byte per system call, so these 400-odd bytes sent with each command
        were most of what a short one cost. The command itself is still sourced at the top
        level, not in this function, so its `declare` and `local` mean what they do there.
        The marker is split in the text as in the command's, so `declare -f` cannot show it."""
        return (
            "__herald_done() { __herald_ec=$1; if builtin test \"$2\" = 1; then %s fi; %s"
            # State first, then the record: once a result is back, a new shell (after a
            # timeout, a crash, a dropped connection) finds the variables it left.
            "builtin export -p >| %s 2>/dev/null; "
            "builtin printf '\\n%%s%%s %%s %%s %%s\\0' __HERALD_DONE_ %s__ \"$__herald_ec\" "
            "\"${__herald_ok:-0}\" \"$PWD\"; }\n" % (END_JOBS, END_ESCAPES, shell_quote(self.state_path), self.nonce)
        )

    def tidy(self, output: str) -> str:
        """bash names the sourced file in its own messages; say "bash" as `bash -c` would."""
        return output.replace("%s: " % self.command_path, "bash: ")


def _clear(path: str) -> bool:
    """Remove what is at `path` unless it is a regular file (which open() would have taken)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def scan(buffer: bytes, marker: bytes) -> Tuple[bytes, Optional[List[str]], bytes]:
    """Split what a shell printed: (output, the fields of the `marker ... \\0` record or None,
    the rest to scan again with more bytes). Bytes that may begin a split marker stay in the rest."""
    at = buffer.find(marker)
    if at >= 0:
        end = buffer.find(b"\0", at)
        if end < 0:
            return b"", None, buffer
        payload = buffer[:at]
        fields = buffer[at + len(marker) : end].decode("utf-8", "surrogateescape").split(" ", 1)
        return (
            payload[:-1] if payload.endswith(b"\n") else payload,
            fields + [""] * (2 - len(fields)),
            buffer[end + 1 :],
        )
    keep = len(marker) + 1
    if len(buffer) > keep:
        return buffer[:-keep], None, buffer[-keep:]
    return b"", None, buffer


def done_fields(fields: List[str], cwd: str) -> Tuple[int, bool, str]:
    """A done record's (exit code, whether the command parsed, the shell's directory after it)."""
    exit_code = int(fields[0]) if fields[0].lstrip("-").isdigit() else -1
    parsed, _, pwd = fields[1].partition(" ")
    return exit_code, parsed == "1", pwd or cwd
