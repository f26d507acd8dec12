"""OS isolation of the script: what it can see of the machine it runs on.

Policy (setting `sandbox.isolation`, default "auto"):
- "bwrap": the sandbox interpreter (the fork server's zygote, or a spawned child) starts under
  bubblewrap in new user, PID, IPC, UTS and network namespaces with its own /proc, so Herald and
  every other process on the machine are invisible and cannot be signalled or traced. The system
  directories and the interpreter are mounted read-only; /tmp is private; the workspace (the
  local backend's directory) is read-write; the user's home, credential stores, Herald's config
  and data are not mounted (Herald's data is masked even when it lies inside the workspace).
  There is no network unless `sandbox.network = "host"`. The sandbox dies with Herald.
- "landlock": where bwrap cannot run, the child restricts itself (_sandbox/confine/inprocess.py): every
  capability dropped, no_new_privs, the same file view with Landlock (the same paths refused,
  not hidden; in a directory holding one, such as a home that is the workspace, the script
  cannot add entries at its top level), TCP refused by Landlock and every socket but AF_UNIX
  by a seccomp filter. Host unix sockets stay reachable (Landlock cannot restrict them on
  today's kernels) and processes stay visible; the label says the first:
  "landlock (no IP network; host unix sockets reachable)".
- "none": no isolation. "auto" takes bwrap, else Landlock, else none — and says which on every
  result (`ExecutionResult.isolation`) and in `herald doctor`, so a downgrade is never silent.
- As root, the script is root in its user namespace without capabilities: it owns root-owned
  files, so the well-known secret stores under /etc (shadow, ssh host keys, sudoers, private TLS
  keys) are masked.

In-backend execution (exec_mode "backend") on the local and SSH backends takes the same policy
there: `request` is what the settings ask, the backend's probe (_sandbox/confine/bwrap.py `probe`, in
the one-round-trip setup of backend/sandbox.py) answers what it has, `settle` decides, and the
backend's supervisor and zygote build the same bwrap view (or Landlock rules) from it, with the
backend's sandbox directory and interpreter read-only. Docker and Modal: the container is the
boundary ("container").

Every Runtime of this process keeps its sandbox files and RPC socket under one private directory
(`shared_root()`), mounted read-only into every sandbox: a zygote serves many Runtimes, and each
run's token, not the file system, separates them.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..._sandbox.confine import bwrap as isolate
from ...backends.base import Backend
from ...config import Settings, herald_files
from ...tempdirs import owned_tempdir
from .errors import SandboxStartError

MODES = ("auto", "bwrap", "landlock", "none")
PENDING = "not known yet"  # in-backend, until the backend has been reached and probed
NETWORKS = ("none", "host")
# What Landlock with the seccomp socket filter holds without the host network (_sandbox/confine/inprocess.py).
LANDLOCK_NO_NETWORK = "no IP network; host unix sockets reachable"

_root_lock = threading.Lock()
_root: str | None = None


@dataclass(frozen=True)
class Isolation:
    """The isolation in force for one Runtime and how to apply it."""

    mode: str  # "bwrap" | "landlock" | "none" | "container" (backend mode in Docker/Modal)
    reason: str = ""  # why not stronger, when auto fell back
    read_only: tuple[str, ...] = field(default=())  # paths the script sees read-only (beyond the system)
    read_write: tuple[str, ...] = field(default=())  # the workspace and extra read-write binds
    masked: tuple[str, ...] = field(default=())  # paths hidden even inside those (Herald's data)
    network: str = "none"
    bwrap: str = ""  # bwrap's path where the script runs (in-backend: what the backend's probe found)

    @property
    def holds_processes(self) -> bool:
        """Whether the run's processes live in a PID namespace that dies with it (bwrap)."""
        return self.mode == "bwrap"

    @property
    def seen_alike(self) -> tuple[str, ...]:
        """The paths the script sees as this machine shows them to Herald: under bwrap its binds
        (the rest of its view is its own: a private /tmp, masks over credential stores); without
        a mount namespace, everything (what it may open is another matter)."""
        return (*self.read_write, *self.read_only) if self.mode == "bwrap" else ("/",)

    @property
    def describe(self) -> str:
        """One line for results, `herald doctor` and the live view."""
        if self.mode in ("none", "container", PENDING):
            return f"{self.mode} ({self.reason})" if self.reason else self.mode
        net = "no network" if self.network == "none" else "host network"
        if self.mode == "landlock" and self.network == "none":
            # The seccomp filter lets AF_UNIX through (the RPC socket is one) and cannot read the
            # path a unix socket connects to; Landlock cannot restrict it either (ABI <= 7).
            net = LANDLOCK_NO_NETWORK
        extra = f"; {self.reason}" if self.reason else ""
        return f"{self.mode} ({net}{extra})"

    def child_environ(self) -> dict[str, str]:
        """What the sandbox interpreter's environment needs for this isolation: under Landlock,
        the rules it applies to itself (_sandbox/confine/inprocess.py) and a private scratch directory."""
        if self.mode != "landlock":
            return {}
        return isolate.confined_environ(self.wire(), os.path.join(shared_root(), "tmp"))

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` wrapped so that it starts inside the isolation (bwrap), else unchanged."""
        if self.mode != "bwrap":
            return list(argv)
        return isolate.confined_command(dict(self.wire(), bwrap=self.bwrap or bwrap_path() or "bwrap"), argv)

    def wire(self) -> dict[str, Any]:
        """This isolation as the JSON spec the sandbox side builds from (_sandbox/confine/bwrap.py)."""
        return {"mode": self.mode, "read_only": list(self.read_only), "read_write": list(self.read_write),
                "masked": list(self.masked), "network": self.network, "bwrap": self.bwrap}


def resolve(settings: Settings, workspace: str, python: str, *, writable_workspace: bool = True) -> Isolation:
    """The isolation `settings` ask for, for a script working in `workspace` with `python`;
    under the read-only permission profile (`writable_workspace` False) the script's own
    open() cannot write the workspace either. Raises ValueError when a mode that was asked for
    explicitly cannot be had here."""
    asked = request(settings, _real(workspace), writable_workspace=writable_workspace)
    if asked.mode == "none":
        return asked
    read_only = tuple(dict.fromkeys([shared_root(), *interpreter_dirs(python), *map(_real, asked.read_only)]))
    read_write = tuple(map(_real, asked.read_write))
    # Herald's data, and the home's credential stores when a bind (a workspace that is the home) holds them.
    secrets = [os.path.join(_real("~"), name) for name in isolate.HOME_SECRETS]
    masked = tuple(p for p in dict.fromkeys(map(_real, [*asked.masked, *secrets]))
                   if isolate.inside_any(p, read_only + read_write))
    from ..._sandbox.confine import landlock

    found = {"bwrap": bwrap_path() or "", "bwrap_problem": bwrap_problem(), "landlock": landlock.abi_version()}
    return settle(replace(asked, read_only=read_only, read_write=read_write, masked=masked), found, "here")


def request(settings: Settings, workspace: str, *, writable_workspace: bool = True) -> Isolation:
    """What `settings` ask for a script working in `workspace`, before anything is probed: mode
    as asked ("auto" ...), paths as given (in-backend, the backend makes them real and adds its
    sandbox files and interpreter, _sandbox/confine/bwrap.py). Raises ValueError on unknown settings."""
    check(settings)
    sandbox = settings.sandbox
    mode = sandbox.isolation
    if mode == "none":
        return Isolation("none", "sandbox.isolation = \"none\"")
    workspace_binds = ([workspace], []) if not writable_workspace else ([], [workspace])
    read_only = tuple(dict.fromkeys([*workspace_binds[0], *sandbox.ro_binds]))
    read_write = tuple(dict.fromkeys([*workspace_binds[1], *sandbox.rw_binds]))
    return Isolation(mode, read_only=read_only, read_write=read_write, masked=tuple(herald_files(settings)),
                     network=sandbox.network)


def backend_request(settings: Settings, backend: Backend, writable_workspace: bool) -> Callable[[], Isolation] | None:
    """In-backend execution: what `settings` ask of `backend` for a script working in its shell's
    directory, made once the backend is reached (backend/sandbox.py settles it by the backend's
    probe); None where the container is the boundary (Docker, Modal). ValueError on unknown settings."""
    if backend.name in ("docker", "modal"):
        return None
    check(settings)
    return lambda: request(settings, backend.cwd, writable_workspace=writable_workspace)


@contextlib.contextmanager
def as_start_error() -> Iterator[None]:
    """A setting that cannot be honoured (ValueError) as the Runtime's SandboxStartError."""
    try:
        yield
    except ValueError as exc:
        raise SandboxStartError(str(exc)) from None


def check(settings: Settings) -> None:
    """ValueError, saying what to set, when the isolation settings name no known mode."""
    if settings.sandbox.isolation not in MODES:
        raise ValueError(f"unknown sandbox.isolation {settings.sandbox.isolation!r}: use one of {', '.join(MODES)}")
    if settings.sandbox.network not in NETWORKS:
        raise ValueError(f"unknown sandbox.network {settings.sandbox.network!r}: use \"none\" or \"host\"")


def settle(asked: Isolation, found: Mapping[str, Any], where: str) -> Isolation:
    """The isolation in force for `asked` (from `request`) given what a probe `found` where the
    script runs (_sandbox/confine/bwrap.py `probe`): auto takes bwrap, else Landlock, else none, and
    says why. Raises ValueError when a mode asked for explicitly cannot be had `where`."""
    mode, problem = asked.mode, found.get("bwrap_problem")
    if mode == "none":
        return asked
    if problem is None and mode in ("auto", "bwrap"):
        return replace(asked, mode="bwrap", bwrap=str(found.get("bwrap") or ""))
    if mode == "bwrap":
        raise ValueError(f"sandbox.isolation = \"bwrap\" but {problem}" + ("" if where == "here" else f" on {where}"))
    at = "" if where == "here" else f" on {where}"
    if int(found.get("landlock") or 0) > 0:
        return replace(asked, mode="landlock", reason="" if mode == "landlock" else f"bwrap unusable{at}: {problem}")
    if mode == "landlock":
        raise ValueError(f"sandbox.isolation = \"landlock\" but {'this kernel' if where == 'here' else where} "
                         "has no Landlock")
    return Isolation("none", f"neither bwrap ({problem}) nor Landlock is usable {where}")


@functools.lru_cache(maxsize=1)
def bwrap_path() -> str | None:
    """Where bwrap is, looked up once per process, as whether it works is (bwrap_problem)."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot isolate a process here (None: it can). Probed once per process."""
    return isolate.bwrap_problem(bwrap_path())


@functools.lru_cache(maxsize=8)
def interpreter_dirs(python: str) -> tuple[str, ...]:
    """Directories the sandbox interpreter needs read-only: its installation (outside /usr)
    and, for a venv, the venv and its base installation. Found once per interpreter (a few
    dozen stat calls) for the process's Runtimes."""
    return tuple(isolate.interpreter_dirs(python))


def shared_root() -> str:
    """This process's private directory for the sandbox files and RPC sockets of its Runtimes."""
    global _root
    with _root_lock:
        if _root is None or not os.path.isdir(_root):
            _root = owned_tempdir("root")  # swept once we are gone (herald/tempdirs.py)
            atexit.register(shutil.rmtree, _root, ignore_errors=True)
        return _root


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


