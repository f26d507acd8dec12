"""OS isolation of the script: what it can see of this machine (host mode).

Policy (setting `sandbox.isolation`, default "auto"):
- "bwrap": the sandbox interpreter (the fork server's zygote, or a spawned child) starts under
  bubblewrap in new user, PID, IPC, UTS and network namespaces with its own /proc, so Herald and
  every other process on the machine are invisible and cannot be signalled or traced. The system
  directories and the interpreter are mounted read-only; /tmp is private; the workspace (the
  local backend's directory) is read-write; the user's home, credential stores, Herald's config
  and data are not mounted (Herald's data is masked even when it lies inside the workspace).
  There is no network unless `sandbox.network = "host"`. The sandbox dies with Herald.
- "landlock": where bwrap cannot run, the child restricts itself (_sandbox/landlock.py) to the same
  file view with Landlock and no_new_privs; processes stay visible (Landlock does not hide them).
- "none": no isolation. "auto" takes bwrap, else Landlock, else none — and says which on every
  result (`ExecutionResult.isolation`) and in `herald doctor`, so a downgrade is never silent.
- As root, the script is root in its user namespace without capabilities: it owns root-owned
  files, so the well-known secret stores under /etc (shadow, ssh host keys, sudoers, private TLS
  keys) are masked.

Every Runtime of this process keeps its sandbox files and RPC socket under one private directory
(`shared_root()`), mounted read-only into every sandbox: a zygote serves many Runtimes, and each
run's token, not the file system, separates them.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..._sandbox import confine
from ...config import Settings
from ..owned import owned_tempdir

MODES = ("auto", "bwrap", "landlock", "none")
NETWORKS = ("none", "host")
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Secret stores a root-in-namespace script could read (it owns root-owned files): masked.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")
MASKED_DIRS = ("/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private", "/etc/herald")

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

    @property
    def holds_processes(self) -> bool:
        """Whether the run's processes live in a PID namespace that dies with it (bwrap)."""
        return self.mode == "bwrap"

    @property
    def describe(self) -> str:
        """One line for results, `herald doctor` and the live view."""
        if self.mode in ("none", "container"):
            return f"{self.mode} ({self.reason})" if self.reason else self.mode
        net = "no network" if self.network == "none" else "host network"
        extra = f"; {self.reason}" if self.reason else ""
        return f"{self.mode} ({net}{extra})"

    def child_environ(self) -> dict[str, str]:
        """What the sandbox interpreter's environment needs for this isolation: under Landlock,
        the rules it applies to itself (_sandbox/confine.py) and a private scratch directory."""
        if self.mode != "landlock":
            return {}
        scratch = os.path.join(shared_root(), "tmp")
        os.makedirs(scratch, mode=0o700, exist_ok=True)
        system = [p for p in (*SYSTEM_DIRS, "/proc", "/dev") if os.path.exists(p)]
        devices = [p for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty") if os.path.exists(p)]
        rules = {
            "read_only": [*system, *self.read_only],
            "read_write": [*self.read_write, scratch, *devices],
            "network": self.network == "host",
        }
        return {confine.ENV: json.dumps(rules), "HOME": scratch, "TMPDIR": scratch}

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` wrapped so that it starts inside the isolation (bwrap), else unchanged."""
        if self.mode != "bwrap":
            return list(argv)
        return [*self._bwrap_args(), "--", *argv]

    def _bwrap_args(self) -> list[str]:
        args = [
            bwrap_path() or "bwrap",
            "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session",
            "--cap-drop", "ALL",  # as root, bwrap would keep them: root in the namespace owns root's files
        ]
        if self.network != "host":
            args.append("--unshare-net")
        for path in SYSTEM_DIRS:
            if os.path.islink(path):  # merged /usr: /lib -> usr/lib
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for path in MASKED_FILES:
            if os.path.exists(path):
                args += ["--ro-bind", "/dev/null", path]
        for path in MASKED_DIRS:
            if os.path.isdir(path):
                args += ["--tmpfs", path]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--setenv", "HOME", "/tmp"]
        # Parents before children, so that a bind inside another one lands on top of it.
        binds = [(p, "--ro-bind") for p in self.read_only] + [(p, "--bind") for p in self.read_write]
        for path, how in sorted(binds, key=lambda item: item[0].count("/")):
            if os.path.exists(path):
                args += [how, path, path]
        for path in self.masked:
            if os.path.isdir(path):
                args += ["--tmpfs", path]
        return args


def resolve(settings: Settings, workspace: str, python: str, *, writable_workspace: bool = True) -> Isolation:
    """The isolation `settings` ask for, for a script working in `workspace` with `python`;
    under the read-only permission profile (`writable_workspace` False) the script's own
    open() cannot write the workspace either. Raises ValueError when a mode that was asked for
    explicitly cannot be had here."""
    sandbox = settings.sandbox
    mode = sandbox.isolation
    if mode not in MODES:
        raise ValueError(f"unknown sandbox.isolation {mode!r}: use one of {', '.join(MODES)}")
    if sandbox.network not in NETWORKS:
        raise ValueError(f"unknown sandbox.network {sandbox.network!r}: use \"none\" or \"host\"")
    if mode == "none":
        return Isolation("none", "sandbox.isolation = \"none\"")
    ro_workspace = [] if writable_workspace else [_real(workspace)]
    rw_workspace = [_real(workspace)] if writable_workspace else []
    read_only = tuple(dict.fromkeys([shared_root(), *interpreter_dirs(python), *ro_workspace,
                                     *map(_real, sandbox.ro_binds)]))
    read_write = tuple(dict.fromkeys([*rw_workspace, *map(_real, sandbox.rw_binds)]))
    masked = tuple(p for p in (_real(str(settings.data_dir)),) if _inside_any(p, read_only + read_write))
    spec = dict(read_only=read_only, read_write=read_write, masked=masked, network=sandbox.network)
    problem = bwrap_problem()
    if problem is None and mode in ("auto", "bwrap"):
        return Isolation("bwrap", **spec)  # type: ignore[arg-type]
    if mode == "bwrap":
        raise ValueError(f"sandbox.isolation = \"bwrap\" but {problem}")
    from ..._sandbox import landlock

    if landlock.abi_version() > 0:
        return Isolation("landlock", "" if mode == "landlock" else f"bwrap unusable: {problem}", **spec)  # type: ignore[arg-type]
    if mode == "landlock":
        raise ValueError("sandbox.isolation = \"landlock\" but this kernel has no Landlock")
    return Isolation("none", f"neither bwrap ({problem}) nor Landlock is usable here")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot isolate a process here (None: it can). Probed once per process."""
    path = bwrap_path()
    if path is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    probe = Isolation("bwrap", read_only=(), read_write=()).command(["/bin/true"])
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create namespaces here: {done.stderr.strip()[:200] or done.returncode}"
    return None


def interpreter_dirs(python: str) -> list[str]:
    """Directories the sandbox interpreter needs read-only: its installation (outside /usr)
    and, for a venv, the venv and its base installation."""
    found: list[str] = []
    candidates = [python, os.path.realpath(python)]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        found += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    for path in candidates:
        found.append(os.path.dirname(os.path.dirname(os.path.abspath(path))))  # <prefix>/bin/python
    return [_real(p) for p in dict.fromkeys(found) if not _inside_any(_real(p), ("/usr",)) and p != "/"]


def shared_root() -> str:
    """This process's private directory for the sandbox files and RPC sockets of its Runtimes."""
    global _root
    with _root_lock:
        if _root is None or not os.path.isdir(_root):
            _root = owned_tempdir("root")  # swept once we are gone (owned.py)
            atexit.register(shutil.rmtree, _root, ignore_errors=True)
        return _root


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _inside_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
