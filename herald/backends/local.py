"""The local backend: a persistent bash on this machine and direct file access."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from .. import spawner
from .._sandbox.confine.readonly import local_confinement
from .._sandbox.procs.environ import scrubbed_environ
from .._sandbox.procs.trees import children_of, descendants, signal_pids, terminate_tree
from .._sandbox.search.walk import scan_dir
from .._sandbox.shell import guard as shellguard
from .._sandbox.toolcore import fileaccess
from .._sandbox.toolcore.callroots import call_confinement
from ..config import Settings
from ..keys import herald_environ
from ..tempdirs import owned_tempdir
from ..webguard import connect_here, open_checked, resolve_here
from .base import (
    Backend,
    BackendError,
    Channel,
    CommandResult,
    DirEntry,
    FileStat,
    NoConfinement,
    resolve_path,
)
from .shell import PersistentShell

SANDBOX_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(shellguard.__file__))))


class _LocalChannel(Channel):
    """A local process in its own session, stdin and merged stdout+stderr on pipes.

    The process runs under a guard (shellguard.py) that dies with Herald, taking everything
    below it along, and collects what leaves the process's tree (see `kill_escapes`)."""

    def __init__(self, argv: list[str], cwd: str, env: dict[str, str], grace: float) -> None:
        self._grace = grace
        if shutil.which(argv[0], path=env.get("PATH")) is None:  # the guard would start, then fail to exec it
            raise BackendError(f"could not start {argv[0]!r}: no such executable")
        guard = [sys.executable, "-I", "-S", "-c", shellguard.LAUNCH, SANDBOX_PACKAGE_PARENT, str(os.getpid())]
        try:
            self.proc = spawner.popen(
                guard + argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd if os.path.isdir(cwd) else None,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"could not start {argv[0]!r}: {exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._in, view) :]
        except BrokenPipeError:
            pass  # the shell is gone; the next recv reports it

    def recv(self, timeout: float) -> bytes | None:
        ready, _, _ = select.select([self._out], [], [], max(0.0, timeout))
        if not ready:
            return None
        return os.read(self._out, 1 << 16)

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited, looked at without reaping it (WNOWAIT):
        its pid stays its own, for kill_escapes and close, until close reaps it."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            ended = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped meanwhile (close): Popen has its status
            return self.proc.returncode
        if ended is None:
            return None
        return ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status

    def kill_escapes(self) -> None:
        """Kill what left the process's tree during a command (`setsid -f`, double forks): such
        orphans re-parent to the guard, whose only child of its own is the process itself."""
        escaped = children_of(self.proc.pid)[1:]  # the kernel lists children oldest first
        if escaped:
            signal_pids([*escaped, *descendants(*escaped)], signal.SIGKILL)

    def close(self) -> None:
        # The guard kills and reaps the whole tree on SIGTERM; should it not, the tree is killed here.
        self.proc.terminate()
        try:
            self.proc.wait(timeout=self._grace + 5)
        except subprocess.TimeoutExpired:
            terminate_tree(self.proc.pid, grace=self._grace)
            self.proc.wait()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.stdout.close()


class LocalBackend(Backend):
    """Commands in a persistent local bash; files through the OS, relative to the shell's cwd."""

    name = "local"

    def __init__(self, cwd: str | None = None, *, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        start = os.path.abspath(os.path.expanduser(cwd or os.getcwd()))
        if not os.path.isdir(start):
            raise NotADirectoryError(f"working directory {start} does not exist")
        # The shell rewrites its state file after every command: keep it in memory-backed
        # /dev/shm where there is one (a truncating write to disk costs ~1 ms here).
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._state_dir = owned_tempdir("shell", dir=shm)
        self._env = scrubbed_environ(herald_environ(), self.settings.sandbox.env_passthrough)
        self._env.setdefault("PATH", os.defpath)
        self._grace = min(self.settings.sandbox.kill_grace, 2.0)
        self._shell = PersistentShell(
            self._open_shell,
            cwd=start,
            state_path=os.path.join(self._state_dir, "state.sh"),
            max_output_bytes=self.settings.terminal.max_output_bytes,
            spill_dir=self.settings.spill_dir,
            local_files=True,
        )
        self._closed = threading.Event()

    @property
    def session_shell(self) -> PersistentShell | None:
        """The session's persistent shell once it runs (a backend-mode supervisor shares its state)."""
        return self._shell

    @property
    def cwd(self) -> str:
        return self._shell.cwd

    def _open_shell(self) -> _LocalChannel:
        shell = self.settings.terminal.shell
        try:
            return self.open_channel([shell, "--noprofile", "--norc"])
        except BackendError as exc:
            raise BackendError(f"could not start the shell {shell!r} (setting terminal.shell): {exc}") from None

    def open_channel(self, argv: list[str], *, cwd: str | None = None, changes_files: bool = True) -> _LocalChannel:
        return _LocalChannel(argv, cwd or self.cwd, self._env, self._grace)

    def _path(self, path: str) -> str:
        expanded = os.path.expanduser(path)
        if expanded.startswith("~"):  # no such user or no home: a file literally named so
            expanded = os.path.join(".", expanded)
        return resolve_path(self.cwd, expanded)

    def run(self, command: str, *, timeout: float | None = None, workdir: str | None = None,
            read_only: bool = False) -> CommandResult:
        if self._closed.is_set():
            raise BackendError("the local backend is closed")
        limit = self.settings.terminal.timeout if timeout is None else timeout
        confine = None
        if read_only:
            confine, problem = local_confinement()  # probed once per process
            if confine is None:
                raise NoConfinement(f"bwrap cannot confine a command on this machine: {problem}")
        with self._shell.lock:
            try:
                return self._shell.run(command, timeout=limit, workdir=self._path(workdir) if workdir else None,
                                       confine=confine)
            finally:
                channel = self._shell.channel
                if isinstance(channel, _LocalChannel):
                    channel.kill_escapes()  # a foreground command's processes end with it

    def open_tcp(self, host: str, port: int, *, timeout: float | None,
                 check: Callable[[str], None] | None = None) -> socket.socket:
        """See Backend.open_tcp: this machine's network, names resolved here."""
        return open_checked(host, port, timeout, check, resolve_here, connect_here)

    # Files: the same OS-level operations as the file tools inside a backend-mode supervisor
    # (_sandbox/toolcore/fileaccess.py), each confined, on the object it opened, by the current tool
    # call's confinement (set by the policy's Gate; none outside a call).

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        limit = self.settings.files.read_max_bytes if max_bytes is None else max_bytes
        return fileaccess.read_bytes(self._path(path), limit, call_confinement())

    def write_bytes(self, path: str, data: bytes) -> None:
        fileaccess.write_bytes(self._path(path), data, call_confinement())

    def stat(self, path: str) -> FileStat | None:
        return fileaccess.stat(self._path(path), call_confinement())

    def list_dir(self, path: str) -> list[DirEntry]:
        return [DirEntry(*fields) for fields in scan_dir(self._path(path), call_confinement())]

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._shell.close()
        shutil.rmtree(self._state_dir, ignore_errors=True)

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
