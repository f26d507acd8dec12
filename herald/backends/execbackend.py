"""What Docker and Modal share: a sandbox reached only by starting processes in it.

A subclass provides the sandbox (`_sandbox_ready`, `_start_process`, `_discard_sandbox`) and, if
it can tell, whether a process ended because the whole sandbox went away (`_lost`). Everything
else lives here: the session's persistent shell, a second shell for file operations (so a long
command does not hold up file tools), path resolution (`~` is the sandbox's HOME), the
"sandbox lost" error and the note about its replacement.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import socket
import threading
from collections.abc import Callable

from ..config import Settings
from ..keys import herald_environ
from ..webguard import open_checked
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
from .realpath import Pins
from .relay import Relay, RelayStopped, relay_argv
from .remote import guarded_argv
from .shell import PersistentShell
from .shellfiles import ShellFiles

FILE_TIMEOUT = 300.0  # one file command (a chunk of a large write at most)


class ExecSessionBackend(Backend):
    """Commands in a persistent shell and files through `ShellFiles`, both over exec'd processes."""

    name = "exec"
    kind_of_sandbox = "sandbox"  # for messages: "container", "Modal sandbox"

    def __init__(self, image: str, *, settings: Settings, cwd: str) -> None:
        self.settings = settings
        self.image = image
        self._lock = threading.RLock()
        self._shell: PersistentShell | None = None
        self._file_shell: PersistentShell | None = None
        self._files = ShellFiles(self._file_command, self._upload)
        self._home = ""
        self._lost: str | None = None  # why the sandbox went away under the current call
        self._replaced = False  # a sandbox was lost: say so when the next one starts
        self._notes: list[str] = []
        self._closed = False
        self._grace = min(settings.sandbox.kill_grace, 2.0)
        env = herald_environ()
        self._env = {n: env[n] for n in settings.sandbox.env_passthrough if n in env}
        self._cwd = cwd
        self._pins = Pins()  # where the workspace check allowed paths to lead (`pin`)
        self._relay: Relay | None = None  # connections from the sandbox (open_tcp), started on first use
        self._relay_lock = threading.Lock()

    # -- for subclasses --------------------------------------------------------------------

    def _sandbox_ready(self) -> str:
        """Create (or find) the sandbox if there is none; return an id for messages and paths."""
        raise NotImplementedError

    def _start_process(self, argv: list[str], cwd: str | None) -> Channel:
        """`argv` in the sandbox as a Channel (BackendError if it cannot start)."""
        raise NotImplementedError

    def _sandbox_gone(self) -> str | None:
        """None while the sandbox runs, else how it ended ("was removed", "stopped ...")."""
        raise NotImplementedError

    def _discard_sandbox(self, *, remove: bool) -> None:
        """Forget the sandbox (removing it if `remove`); the next call makes a new one."""
        raise NotImplementedError

    def _sandbox_started(self, sandbox_id: str) -> None:
        """Called by a subclass when it made a new sandbox."""
        self._lost = None
        if self._replaced:
            self._replaced = False
            self._notes.append(
                f"Started a fresh {self.kind_of_sandbox} ({sandbox_id}) from {self.image}: the previous "
                "one stopped, and its files and processes are gone."
            )

    def _found_lost(self, how: str, sandbox_id: str) -> None:
        """A process ended because the sandbox did: the current call fails with this."""
        self._lost = f"the {self.kind_of_sandbox} {sandbox_id} {how}"

    # -- shells ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Start (or find) the sandbox now rather than on first use: errors show up here."""
        with self._lock:
            self._check_open()
            self._sandbox_ready()

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f"the {self.name} backend is closed")

    @property
    def session_shell(self) -> PersistentShell | None:
        """The session's persistent shell once it runs (a backend-mode supervisor shares its state)."""
        return self._shell

    @property
    def cwd(self) -> str:
        return self._shell.cwd if self._shell is not None else self._cwd

    def _new_shell(self, sandbox_id: str, kind: str, cwd: str, max_output: int) -> PersistentShell:
        state_dir = f"/tmp/.herald-{sandbox_id}-{os.getpid()}/{kind}"

        def open_shell() -> Channel:
            # The state directory is made before bash starts (so a restart after `rm -rf /tmp/*`
            # makes it again); then the sh is replaced by bash.
            argv = ["/bin/sh", "-c", 'mkdir -p -m 700 "$0" && exec "$@"', state_dir]
            # Under the shell guard (remote.py): what a command leaves running after it is killed.
            shell = guarded_argv([self.settings.terminal.shell, "--noprofile", "--norc"])
            return self._channel([*argv, *shell], cwd=cwd)

        return PersistentShell(
            open_shell,
            cwd=cwd,
            state_path=posixpath.join(state_dir, "state.sh"),
            max_output_bytes=max_output,
            spill_dir=self.settings.spill_dir,
        )

    def _channel(self, argv: list[str], *, cwd: str | None) -> Channel:
        with self._lock:
            self._check_open()
            sandbox_id = self._sandbox_ready()
        try:
            return self._start_process(argv, cwd)
        except BackendError:
            how = self._sandbox_gone()
            if how is not None:  # it died while nothing ran in it
                self._found_lost(how, sandbox_id)
                self._fail_if_lost()
            raise

    def _fail_if_lost(self) -> None:
        with self._lock:
            if self._lost is None:
                return
            why, self._lost = self._lost, None
            shells = self._forget(remove=True)
            self._replaced = True
        _close_all(shells)
        raise BackendError(
            f"{why} during this call; everything in it is gone. The next call starts a fresh "
            f"{self.kind_of_sandbox} from {self.image} in {self._cwd}."
        )

    def _forget(self, *, remove: bool) -> list[PersistentShell]:
        """Drop the sandbox and what ran in it (under the lock); the shells it returns are the
        caller's to close once it has let go of the lock: a shell starting a command holds its
        own lock and asks for ours (`_channel`), so closing one under ours could wait forever."""
        shells, self._shell, self._file_shell = (self._shell, self._file_shell), None, None
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.close()
        self._discard_sandbox(remove=remove)  # first: with it removed there is nothing to kill
        self._home = ""
        return [shell for shell in shells if shell is not None]

    def take_note(self) -> str:
        """What the backend had to do since last asked (a replaced sandbox), once."""
        with self._lock:
            notes, self._notes = self._notes, []
        return " ".join(notes)

    # -- Backend ---------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float | None = None, workdir: str | None = None,
            read_only: bool = False) -> CommandResult:
        if read_only:
            # The container's default seccomp profile refuses the namespaces bwrap needs, and
            # the exec API offers no read-only view: a command here can write what the
            # sandbox's user can.
            raise NoConfinement(f"the {self.name} backend cannot confine a command to read-only: its "
                                f"{self.kind_of_sandbox} offers no read-only view of its files (no usable bwrap)")
        limit = self.settings.terminal.timeout if timeout is None else timeout
        with self._lock:
            self._check_open()
            sandbox_id = self._sandbox_ready()
            if self._shell is None:
                self._shell = self._new_shell(sandbox_id, "session", self._cwd, self.settings.terminal.max_output_bytes)
            shell = self._shell
        result = shell.run(command, timeout=limit, workdir=self._path(workdir) if workdir else None)
        self._fail_if_lost()
        news = self.take_note()
        return dataclasses.replace(result, note=f"{news} {result.note}".strip()) if news else result

    def open_channel(self, argv: list[str], *, cwd: str | None = None, changes_files: bool = True) -> Channel:
        return self._channel(argv, cwd=cwd or self.cwd)

    def open_tcp(self, host: str, port: int, *, timeout: float | None,
                 check: Callable[[str], None] | None = None) -> socket.socket:
        """See Backend.open_tcp: made by the sandbox's relay process (relay.py), names resolved
        in the sandbox; works with its network off (its loopback answers). A relay that was
        stopped (a `pkill python3` in the sandbox) is replaced, and the request asked again."""
        for attempt in (1, 2):
            try:
                relay = self._relay_ready()
            except BackendError as exc:
                raise ConnectionError(f"cannot reach the {self.kind_of_sandbox}'s network: {exc}") from None
            try:
                return open_checked(host, port, timeout, check, relay.resolve, relay.connect)
            except RelayStopped:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _relay_ready(self) -> Relay:
        with self._relay_lock:
            relay = self._relay
            if relay is None or relay.dead:
                if relay is not None:
                    relay.close()
                channel = self._channel(relay_argv(self.settings.sandbox.remote_python), cwd="/")
                relay = self._relay = Relay(channel, self.kind_of_sandbox)
            return relay

    def _file_command(self, command: str) -> CommandResult:
        with self._lock:
            self._check_open()
            sandbox_id = self._sandbox_ready()
            if self._file_shell is None:
                # Base64 makes a file 4/3 larger; the largest file read_file accepts must fit.
                limit = self.settings.files.read_max_bytes * 2 + (1 << 20)
                self._file_shell = self._new_shell(sandbox_id, "files", "/", limit)
            shell = self._file_shell
        result = shell.run(command, timeout=FILE_TIMEOUT)
        self._fail_if_lost()
        if result.timed_out or result.note:
            raise BackendError(f"a file operation in the {self.kind_of_sandbox} failed: {result.note or 'timed out'}")
        return result

    def _upload(self, temp: str, data: bytes) -> None:
        """Stream `data` into the file `temp` through a process that reads exactly that much."""
        channel = self._channel(["/bin/sh", "-c", 'head -c "$0" > "$1"', str(len(data)), temp], cwd="/")
        chunk: bytes | None = b""
        output = b""
        try:
            for at in range(0, len(data), 1 << 20):
                channel.send(data[at : at + (1 << 20)])
            while (chunk := channel.recv(FILE_TIMEOUT)) not in (b"", None):
                output += chunk
        finally:
            channel.close()
        if chunk is None or channel.returncode != 0:
            message = output.decode("utf-8", "replace").strip() or "it did not finish"
            raise OSError(5, f"writing the file in the {self.kind_of_sandbox} failed: {message}", temp)
        self._fail_if_lost()

    def _path(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            if not self._home:
                self._home = self._file_command('printf "%s" "$HOME"').output or "/"
            path = self._home + path[1:]
        return resolve_path(self.cwd, path)

    resolves_links = True

    def realpath(self, path: str) -> str:
        """Where `path` leads in the sandbox, every symlink followed (a missing tail as
        written): the workspace check's resolution (policy/paths.py), one file command."""
        return self._files.realpath(self._path(path))

    def pin(self, path: str, resolved: str) -> None:
        """The workspace check allowed `path` because it leads to `resolved`: from now on it is
        read or written only while it still leads there (checked by the operation's own
        command; PermissionError otherwise)."""
        with self._lock:
            self._pins.pin(self._path(path), resolved)

    def _pinned(self, target: str) -> str | None:
        with self._lock:
            return self._pins.get(target)

    def pinned(self, path: str) -> str | None:
        """Where the workspace check allowed `path` to lead, if it pinned it (else None)."""
        return self._pinned(self._path(path))

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        limit = self.settings.files.read_max_bytes if max_bytes is None else max_bytes
        target = self._path(path)
        return self._files.read_bytes(target, limit, self._pinned(target))

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        self._files.write_bytes(target, data, self._pinned(target))

    def stat(self, path: str) -> FileStat | None:
        return self._files.stat(self._path(path))

    def list_dir(self, path: str) -> list[DirEntry]:
        return self._files.list_dir(self._path(path))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            shells = self._forget(remove=self._remove_on_close())
        _close_all(shells)

    def _remove_on_close(self) -> bool:
        return True


def _close_all(shells: list[PersistentShell]) -> None:
    for shell in shells:
        shell.close()
