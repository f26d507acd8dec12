"""The SSH backend: a persistent bash on a remote host, files over SFTP, one connection per session.

The connection is made on first use and kept; when it drops, the next call reconnects, says so
(in the command's note, or in the next tool result through `take_note`), and the shell starts
again in the directory it was in with the variables it had exported: its state file lives on
the host, in a private directory made at the first connection (in /dev/shm when writable,
since the shell rewrites it after every command; scripts.py).

File calls run on SFTP sessions of their own (several per connection, so concurrent calls
overlap) at one or two round trips each (filecalls.py, files.py, sftp.py). Every wait for the
host has a deadline: a host that goes silent gets its connection abandoned (connection.py), the
waits on it end, and the next call reconnects.
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import posixpath
import socket
import threading
import time
from collections.abc import Callable

import paramiko

from ..._sandbox.confine.readonly import Confinement, parse_probe, probe_script
from ...config import Settings
from ..base import Backend, BackendError, CommandResult, DirEntry, FileStat, NoConfinement, resolve_path
from ..remote import guarded_argv
from ..shell import PersistentShell, shell_quote
from .channel import SSHChannel
from .connection import HOUSEKEEPING_SECONDS, SSHConnection, connect
from .filecalls import FileCalls
from .scripts import RESTORE, SETUP
from .seen import Seen
from .target import DEFAULT_PORT, SSHTarget, parse_ssh_spec
from .tunnel import Tunnels

log = logging.getLogger(__name__)


class SSHBackend(Backend):
    """Commands in a persistent bash on `target`; files through SFTP, relative to the shell's cwd."""

    name = "ssh"

    def __init__(
        self,
        host: str | SSHTarget,
        *,
        user: str | None = None,
        port: int = DEFAULT_PORT,
        cwd: str | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or Settings()
        if isinstance(host, SSHTarget):
            target = host
        elif host.startswith("ssh://"):
            target = parse_ssh_spec(host)
        else:
            target = SSHTarget(host=host, user=user or getpass.getuser(), port=port)
        self.target = dataclasses.replace(target, directory=cwd) if cwd else target
        self._grace = min(self.settings.sandbox.kill_grace, 2.0)
        self._lock = threading.RLock()  # guards the connection, the session and the notes
        self._conn: SSHConnection | None = None
        self._generation = 0  # counts connections; a shell channel belongs to one of them
        self._shell: PersistentShell | None = None
        self._confine: tuple[Confinement | None, str] | None = None  # the host's read-only confinement, once probed
        self._shell_channel: SSHChannel | None = None
        self._shell_generation = 0
        self._home = ""
        self._state_dir = ""
        self._notes: list[str] = []
        self._closed = False
        # What calls saw of paths a moment ago (seen.py); commands running and processes
        # started make it stale.
        self._running = 0
        self._channels: list[SSHChannel] = []
        self._seen = Seen(self._lock, self._busy)
        self._silent_at = -1e9  # when a connection was last given up because the host went silent
        self._file_calls = FileCalls(self.target, self._connection, self._lock, self._seen)
        self._tunnels = Tunnels(self._connection, str(self.target))

    # -- the connection ----------------------------------------------------------------------

    def connect(self) -> None:
        """Connect now rather than on first use (BackendError says what is wrong)."""
        self._connection()

    def _connection(self) -> SSHConnection:
        with self._lock:
            if self._closed:
                raise BackendError("the SSH backend is closed")
            ssh = self.settings.ssh
            if self._conn is not None:
                if self._conn.alive():
                    return self._conn
                if self._conn.abandoned:
                    self._silent_at = self._conn.abandoned_at
                self._conn.close()
                self._conn = None
            brief = time.monotonic() - self._silent_at < ssh.connect_timeout
            if brief:
                # The host went silent just now: try again, but briefly (housekeeping right
                # after a timeout must not wait a whole connect timeout on a dead link).
                ssh = dataclasses.replace(ssh, connect_timeout=min(ssh.connect_timeout, HOUSEKEEPING_SECONDS))
            try:
                conn = connect(self.target, ssh)
            except BackendError:
                if brief:
                    self._silent_at = time.monotonic()
                raise
            conn.timeout = self.settings.ssh.connect_timeout
            try:
                if self._shell is None:
                    self._set_up(conn)
                else:
                    _, said = conn.exec(
                        f"/bin/sh -c {shell_quote(RESTORE)} herald {shell_quote(self._state_dir)}", timeout=conn.timeout
                    )
                    kept = "with the same exported variables" if said.strip() == b"kept" else (
                        "but its exported variables were lost with the host's temporary files"
                    )
                    self._notes.append(
                        f"Reconnected to {self.target}: the SSH connection had dropped. The shell "
                        f"starts again in the same directory {kept}."
                    )
            except BaseException:
                conn.close()
                raise
            self._generation += 1
            self._conn = conn
            return conn

    def _set_up(self, conn: SSHConnection) -> None:
        command = f"/bin/sh -c {shell_quote(SETUP)} herald {shell_quote(self.target.directory)}"
        status, output = conn.exec(command, timeout=conn.timeout)
        fields = output.decode("utf-8", "surrogateescape").split("\0")
        if status == 4:
            raise BackendError(f"the directory {self.target.directory} does not exist on {self.target.host}")
        if status != 0 or len(fields) < 3:
            raise BackendError(
                f"could not set up a session on {self.target} (exit {status}): "
                f"{output.decode('utf-8', 'replace').strip()[:300] or 'no output'}"
            )
        self._state_dir, self._home, start = fields[0], fields[1], fields[2]
        self._shell = PersistentShell(
            self._open_shell,
            cwd=start,
            state_path=posixpath.join(self._state_dir, "state.sh"),
            max_output_bytes=self.settings.terminal.max_output_bytes,
            spill_dir=self.settings.spill_dir,
            startup_timeout=max(15.0, conn.timeout),
        )

    def _session(self) -> PersistentShell:
        if self._shell is None:
            self._connection()
        assert self._shell is not None
        return self._shell

    @property
    def transport(self) -> paramiko.Transport | None:
        """The current connection's paramiko Transport (None before first use and after close)."""
        conn = self._conn
        return conn.transport if conn is not None else None

    def take_note(self) -> str:
        """What happened to the backend since it was last asked (a reconnect), for a tool result."""
        with self._lock:
            notes, self._notes = self._notes, []
        return " ".join(notes)

    # -- processes ---------------------------------------------------------------------------

    @property
    def session_shell(self) -> PersistentShell | None:
        """The session's persistent shell once it runs (a backend-mode supervisor shares its state)."""
        return self._shell

    @property
    def cwd(self) -> str:
        return self._session().cwd

    @property
    def home(self) -> str:
        self._session()
        return self._home

    def _open_shell(self) -> SSHChannel:
        conn = self._connection()
        # Under the shell guard (remote.py): what a command leaves running after it is killed.
        shell_argv = guarded_argv([self.settings.terminal.shell, "--noprofile", "--norc"])
        channel = SSHChannel(conn, shell_argv, cwd=None, grace=self._grace)
        with self._lock:
            self._shell_channel, self._shell_generation = channel, self._generation
        return channel

    def open_channel(self, argv: list[str], *, cwd: str | None = None, changes_files: bool = True) -> SSHChannel:
        directory = self._path(cwd) if cwd else self.cwd
        channel = SSHChannel(self._connection(), argv, cwd=directory, grace=self._grace)
        if not changes_files:  # what was seen of files stays good while it runs
            return channel
        with self._lock:
            self._channels = [c for c in self._channels if not c.closed] + [channel]
        self._seen.changed(None)
        return channel

    def open_tcp(self, host: str, port: int, *, timeout: float | None,
                 check: Callable[[str], None] | None = None) -> socket.socket:
        """See Backend.open_tcp: a `direct-tcpip` channel on the session's connection (tunnel.py)."""
        try:
            return self._tunnels.open(host, port, timeout, check)
        except BackendError as exc:
            raise ConnectionError(f"cannot reach the network of {self.target}: {exc}") from None

    def run(self, command: str, *, timeout: float | None = None, workdir: str | None = None,
            read_only: bool = False) -> CommandResult:
        confine = self._confinement() if read_only else None
        with self._lock:
            self._running += 1
        self._seen.changed(None)
        try:
            return self._run(command, timeout, workdir, confine)
        finally:
            with self._lock:
                self._running -= 1
            self._seen.changed(None)

    def _confinement(self) -> Confinement:
        """The host's bwrap and architecture, probed once per backend (readonly.py's probe, one
        round trip); NoConfinement says why a host cannot confine a command."""
        with self._lock:
            if self._confine is None:
                conn = self._connection()
                status, said = conn.exec(f"/bin/sh -c {shell_quote(probe_script())}", timeout=conn.timeout)
                self._confine = parse_probe(status, said.decode("utf-8", "replace"))
            found, problem = self._confine
        if found is None:
            raise NoConfinement(f"{self.target} cannot confine a command to read-only: {problem}")
        return found

    def _run(self, command: str, timeout: float | None, workdir: str | None,
             confine: Confinement | None = None) -> CommandResult:
        limit = self.settings.terminal.timeout if timeout is None else timeout
        shell = self._session()
        directory = self._path(workdir) if workdir else None
        for attempt in (1, 2):
            conn = self._connection()
            if self._shell_generation != self._generation:
                shell.close()  # its channel went down with the old connection: start a new one
            try:
                result = shell.run(command, timeout=limit, workdir=directory, confine=confine)
            except BackendError as exc:
                if not conn.alive() and attempt == 1:
                    continue
                shell_name = self.settings.terminal.shell
                raise BackendError(
                    f"could not start the shell {shell_name!r} on {self.target} (setting terminal.shell): {exc}"
                ) from None
            if conn.alive():
                break
            channel = self._shell_channel
            if attempt == 1 and channel is not None and channel.undelivered:
                continue  # the connection was gone before the command was sent: run it on a new one
            result = dataclasses.replace(
                result,
                note=f"{result.note} The SSH connection to {self.target} dropped during this command, "
                "so it may or may not have finished; the next call reconnects.".strip(),
            )
            break
        note = self.take_note()
        return dataclasses.replace(result, note=f"{note} {result.note}".strip()) if note else result

    # -- files -------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return posixpath.normpath(self.home + path[1:])
        return resolve_path(self.cwd, path)

    def _busy(self) -> bool:
        """A command runs or a process started here still runs: anything may change."""
        with self._lock:
            return bool(self._running) or any(not channel.closed for channel in self._channels)

    # The file calls themselves: filecalls.py (paths resolved here first, against the shell's cwd).

    resolves_links = True

    def realpath(self, path: str) -> str:
        """Where `path` leads on the host, every symlink followed (FileCalls.realpath)."""
        return self._file_calls.realpath(self._path(path))

    def pin(self, path: str, resolved: str) -> None:
        """The workspace check allowed `path` because it leads to `resolved` (FileCalls.pin)."""
        self._file_calls.pin(self._path(path), resolved)

    def pinned(self, path: str) -> str | None:
        """Where the workspace check allowed `path` to lead, if it pinned it (else None)."""
        return self._file_calls.pinned(self._path(path))

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        """See Backend.read_bytes; a pinned path only where it was allowed to lead (`pin`)."""
        limit = self.settings.files.read_max_bytes if max_bytes is None else max_bytes
        return self._file_calls.read_bytes(self._path(path), limit)

    def write_bytes(self, path: str, data: bytes) -> None:
        """See Backend.write_bytes; a pinned path only where it was allowed to lead (`pin`)."""
        self._file_calls.write_bytes(self._path(path), data)

    def stat(self, path: str) -> FileStat | None:
        return self._file_calls.stat(self._path(path))

    def list_dir(self, path: str) -> list[DirEntry]:
        return self._file_calls.list_dir(self._path(path))

    def sftp_sessions(self) -> tuple[int, int]:
        """(SFTP sessions open on the current connection, of which in use now), for diagnostics."""
        conn = self._conn
        return conn.sftp_sessions() if conn is not None else (0, 0)

    def sftp_counts(self) -> tuple[int, int]:
        """(SFTP requests, round trips) on the current connection so far, for diagnostics."""
        conn = self._conn
        return conn.sftp_counts() if conn is not None else (0, 0)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn, shell, self._conn = self._conn, self._shell, None
        removed = False  # the state directory, by the shell's kill command
        remove = f"rm -rf -- {shell_quote(self._state_dir)}" if self._state_dir else ""
        if shell is not None:
            # A command still running (its caller not yet told to stop) gets a moment to end;
            # then the connection is given up under it, which ends its wait at once.
            if shell.lock.acquire(timeout=HOUSEKEEPING_SECONDS + self._grace):
                shell.lock.release()
            elif conn is not None:
                conn.abandon("closing while a command still ran")
            channel = self._shell_channel
            if channel is not None and channel is shell.channel and remove:
                removed = channel.close_with(remove)  # the kill and the removal in one exec
            shell.close()  # stops the shell and everything it started
        if conn is not None:
            if conn.alive() and remove and not removed:  # it holds the exported variables: not left behind
                try:
                    conn.exec(remove, timeout=min(HOUSEKEEPING_SECONDS, conn.timeout))
                except BackendError as exc:
                    log.warning("could not remove %s on %s: %s", self._state_dir, self.target, exc)
            conn.close()

    def __enter__(self) -> SSHBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
