"""The Backend protocol: where commands run and files live.

Every tool that touches commands or files is written once against this protocol, so `terminal`,
`read_file`, `write_file`, `patch` and `search_files` behave the same on every backend. A backend
provides a persistent shell session and file access, and TCP connections made from its side
(`open_tcp`: the browser and web_extract reach its localhost and its names). File errors are the
standard `OSError` subclasses (`FileNotFoundError`, `IsADirectoryError`, `PermissionError`, ...)
and the two below for what a reader refuses; failures of the backend itself (connection lost,
container gone) are `BackendError`.

Reading trusts nothing about the file: a script may point a tool at a FIFO (an open that blocks
for ever), a device (/dev/zero never ends, and reports size 0) or a file that grows while it is
read. So `read_bytes` reads regular files only, checked on the opened file where the mechanism
allows, and never more than its limit + 1 bytes.
"""

from __future__ import annotations

import contextvars
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# The reader's rules, path resolution and the stat type are shared with the sandbox's tool core.
from .._sandbox.toolcore.fileaccess import FileInfo as FileStat
from .._sandbox.toolcore.fileaccess import (
    FileTooLargeError,
    NotRegularFileError,
    check_length,
    check_regular,
    resolve_path,
)
from ..scoped import scoped

__all__ = [
    "CONFINE_PREFERRED", "CONFINE_REQUIRED", "Backend", "BackendError", "Channel", "CommandResult", "DirEntry",
    "FileStat", "FileTooLargeError", "NoConfinement", "NotRegularFileError", "SharedShell", "call_confinement",
    "call_cwd", "check_length", "check_regular", "confine_call", "pinned_cwd", "resolve_path",
]

# The current tool call's cwd, once something asked for it (a list of at most one: filled on
# first use, so a call that resolves no path never asks the backend, which may have to connect).
_call_cwd: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("herald_call_cwd", default=None)


def call_cwd(backend: Backend) -> str:
    """The directory the current tool call's relative paths lead from: the backend's cwd when
    the call first resolved a path (its locks or the policy's check, before the tool runs), so
    that the check of a path, the call's locks and the tool's work all name the same file even
    when a concurrent command (a `terminal('cd ...')` in parallel()) moves the shell meanwhile.
    Outside a call (see pinned_cwd), the cwd now."""
    pinned = _call_cwd.get()
    if pinned is None:
        return backend.cwd
    if not pinned:
        pinned.append(backend.cwd)
    return pinned[0]


# What the policy asked of the current tool call's commands (a list of at most one: the Gate
# fills it while it checks the call; the terminal tool reads it).
_call_confine: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("herald_call_confine", default=None)
CONFINE_REQUIRED = "required"  # read-only: confined by the OS, or refused
CONFINE_PREFERRED = "preferred"  # read-only, but a rule (or a person) allowed this command: unconfined if need be


class _CallScope:
    """The scope of one tool call: its pinned cwd and what the policy asked of its commands."""

    __slots__ = ("_confine", "_cwd")

    def __init__(self) -> None:
        self._cwd = scoped(_call_cwd, [])
        self._confine = scoped(_call_confine, [])

    def __enter__(self) -> None:
        self._cwd.__enter__()
        self._confine.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._confine.__exit__(*exc)
        self._cwd.__exit__(*exc)


def pinned_cwd() -> _CallScope:
    """`with pinned_cwd():` around one tool call: its cwd is fixed at first use (see call_cwd),
    and what the policy asks of its commands (confine_call) lasts as long as the call."""
    return _CallScope()


def confine_call(how: str) -> bool:
    """The policy's word on the current call's commands (CONFINE_REQUIRED or _PREFERRED);
    False outside a call's scope (pinned_cwd), where nothing would carry it to the tool."""
    marks = _call_confine.get()
    if marks is None:
        return False
    marks[:] = [how]
    return True


def call_confinement() -> str | None:
    """What the policy asked of the current call's commands (None: nothing, run as usual)."""
    marks = _call_confine.get()
    return marks[0] if marks else None


class BackendError(RuntimeError):
    """The backend itself failed (not the command): the message says what to check."""


class NoConfinement(BackendError):
    """`run(read_only=True)` on a backend that cannot confine a command now: nothing ran; the
    message says why."""


@dataclass(frozen=True)
class CommandResult:
    output: str  # stdout and stderr interleaved as the command wrote them
    exit_code: int
    timed_out: bool = False
    duration_seconds: float = 0.0
    output_bytes: int = 0  # size before any capping
    truncated: bool = False
    note: str = ""  # what the backend had to do, e.g. "the shell was restarted"


@dataclass(frozen=True)
class DirEntry:
    name: str
    is_dir: bool
    is_file: bool
    is_symlink: bool = False


class Channel(Protocol):
    """A process on the backend seen as a byte stream: its stdin, and its stdout+stderr merged.

    The persistent shell runs over one; in-backend execution runs the sandbox bootstrap over one.
    Implementations subclass it, and so inherit the defaults of what they cannot tell
    (`returncode`, `undelivered`).
    """

    def send(self, data: bytes) -> None:
        """Write to the process's stdin (a gone process is reported by the next recv)."""
        ...

    def recv(self, timeout: float) -> bytes | None:
        """Output bytes; None when nothing came within `timeout`; b"" once the process is gone."""
        ...

    def close(self) -> None:
        """Stop the process and everything it started (SIGTERM, a short grace, SIGKILL)."""
        ...

    @property
    def returncode(self) -> int | None:
        """The process's exit status once known; None until then (the default: never known)."""
        return None

    @property
    def undelivered(self) -> bool:
        """True once a send found the process (or the link to it) already gone, so nothing of it
        arrived; False otherwise (the default: a backend that cannot tell says False, and the
        next recv reports the end)."""
        return False


class SharedShell(Protocol):
    """The session's persistent shell as a backend-mode supervisor shares it (shell.py's
    PersistentShell is one): its state file, its directory, its output cap, and taking up what
    the supervisor's shell did."""

    cwd: str

    @property
    def state_path(self) -> str: ...

    @property
    def max_output_bytes(self) -> int: ...

    def follow(self, cwd: str) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A session's place to run commands and keep files. Implementations are thread-safe."""

    name: str

    @property
    def cwd(self) -> str:
        """The shell session's current directory; relative tool paths resolve against it."""
        ...

    def run(self, command: str, *, timeout: float | None = None, workdir: str | None = None,
            read_only: bool = False) -> CommandResult:
        """Run `command` in the persistent shell: `cd` and `export` carry over to later calls.

        On timeout the command's processes are killed but the session (cwd, variables) is kept.
        `workdir` runs this one command elsewhere without moving the session. `read_only`: the
        OS confines it (every path read-only, no network: herald/_sandbox/confine/readonly.py), in a
        fresh shell from the session's directory and exported variables, whose `cd` carries
        back; a backend that cannot raises NoConfinement before anything runs.
        """
        ...

    def open_channel(self, argv: list[str], *, cwd: str | None = None, changes_files: bool = True) -> Channel:
        """Start `argv` on the backend (environment scrubbed as for the shell) as a Channel.
        `changes_files=False`: Herald's own process that changes no file the tools look at (the
        snapshot engine taking snapshots): a backend that remembers what it saw of files keeps
        it while the process runs, as it would not for a command."""
        ...

    def open_tcp(self, host: str, port: int, *, timeout: float | None,
                 check: Callable[[str], None] | None = None) -> socket.socket:
        """A TCP connection to `host`:`port` made from the backend, as a program there would make
        it: its localhost, its names, the addresses it can reach (the browser and web_extract use
        it with `browser.network = "backend"`). Returned as a connected stream socket here (one
        end of a relay where the backend is remote). With `check`, the name is resolved on the
        backend, `check` is called with each of its addresses before any is used (it raises to
        refuse the name) and the connection goes to one of those addresses; without, the
        backend resolves the name itself. OSError (TimeoutError, ConnectionRefusedError, ...)
        when no connection is made, its message saying why."""
        ...

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        """The contents of the regular file at `path` (symlinks followed); `max_bytes` None is
        the setting files.read_max_bytes. Anything else raises NotRegularFileError (without
        blocking on a FIFO), more than `max_bytes` FileTooLargeError (having read at most
        `max_bytes` + 1 bytes, whatever size the file claims)."""
        ...

    def write_bytes(self, path: str, data: bytes) -> None:
        """Atomically replace `path` (temp file + rename), creating parent directories."""
        ...

    def stat(self, path: str) -> FileStat | None:
        """None when nothing exists at `path`."""
        ...

    def list_dir(self, path: str) -> list[DirEntry]: ...

    def close(self) -> None:
        """Stop the shell and everything it started; release the backend's resources."""
        ...

    # What some backends can do and others cannot. Implementations subclass Backend and so
    # inherit these defaults where they have nothing to offer.

    def connect(self) -> None:
        """Connect now, if the backend connects at all (a remote host, a container to start),
        so that a failure shows before a script runs; BackendError saying what to check. The
        default: nothing to connect to."""
        return None

    def take_note(self) -> str:
        """What the backend had to do since it was last asked (reconnected, replaced a lost
        container), which the dispatcher adds to the next tool result as `note` (`run` puts such
        news in its own CommandResult.note instead). The default: "" (nothing to say)."""
        return ""

    @property
    def session_shell(self) -> SharedShell | None:
        """The session's persistent shell once it runs, if a backend-mode supervisor can share
        its state (a file on the backend); None until then (the default: never)."""
        return None

    # Links on a remote backend: whether it can tell where a path leads (realpath) and hold the
    # call's operations to that place (pin). The local backend's paths are resolved here instead.
    resolves_links: bool = False

    def realpath(self, path: str) -> str:
        """Where `path` leads on the backend, every link followed (backends/realpath.py), for
        the workspace check; only called when `resolves_links`. The default: `path` itself."""
        return path

    def pin(self, path: str, resolved: str) -> None:
        """The workspace check allowed `path` because it leads to `resolved`: hold the call's
        operations on it to that place (checked by each operation). The default: nothing held."""
        return None

    def pinned(self, path: str) -> str | None:
        """Where the current tool call's check found `path` to lead (realpath.py), for an
        operation to enter that place and check it is still there; None when it was not pinned
        (the default: on this machine, calls act on what they opened instead)."""
        return None
