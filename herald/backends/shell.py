"""A persistent shell session over any byte channel, shared by every backend.

The backend supplies a channel to a running `bash` (a local pipe pair, an SSH channel, a Docker
exec socket, a Modal exec stream); this class turns it into `run(command) -> CommandResult`.

How one command runs: the shell writes the command text (sent single-quoted) to a file next to
its state file, checks in a subshell that it parses, and sources it in the shell itself, so
`cd` and `export` persist, with stdin from /dev/null and stderr merged into stdout. After it
the shell saves `export -p` to a state file, then prints a record `\\n<marker> <exit code>
<cwd>\\0` whose marker holds a random nonce. Job control (`set -m`) gives every command its
own process group.

On timeout the command's processes and the shell that runs them are killed together: killing
only the children would let the rest of a command list (`sleep 100; rm -rf build`) carry on.
A new shell then starts in the last directory with the last exported variables (from the state
file), so the session goes on. The same happens when the shell exits (`exit`) or dies.

Cancellation: a caller that may have to stop a command early (an interrupted agent) runs it
inside `cancellable(event)`. Setting the event then ends the command as a timeout does (the
whole tree is killed, the next command gets a new shell in the same place), at once rather than
at the deadline. The event travels in a context variable, not as an argument, so it passes
through every backend's `run` (and any other code between a tool and the shell) unchanged; a
long tool of another kind can honour the same event through `current_cancel()`.
"""

from __future__ import annotations

import contextvars
import posixpath
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .._sandbox.confine.readonly import Confinement
from .._sandbox.shell.script import ShellScripts, done_fields, scan, shell_quote
from ..capture import CappedCapture
from ..scoped import scoped
from .base import BackendError, Channel, CommandResult

__all__ = ["PersistentShell", "cancellable", "current_cancel", "foreground_only", "shell_quote"]

TIMEOUT_EXIT_CODE = 124
INTERRUPTED_EXIT_CODE = 130  # as a shell reports a command stopped by Ctrl-C
CANCEL_POLL_SECONDS = 0.05
PARSE_CACHE_SIZE = 256
PARSE_CACHE_MAX_CHARS = 4096  # how often a cancellable wait looks at its event

_cancel: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("herald_cancel", default=None)


def cancellable(event: threading.Event | None) -> scoped[threading.Event | None]:
    """Let `event` stop what this thread runs until the block ends (commands in any persistent
    shell, and any tool that asks `current_cancel()`). None leaves things as they are."""
    return scoped(_cancel, event, keep_on_none=True)


_foreground_only: contextvars.ContextVar[bool] = contextvars.ContextVar("herald_foreground_only", default=False)


def foreground_only(on: bool = True) -> scoped[bool]:
    """While on, the commands this thread runs in a persistent shell end with everything they
    left in the background (a script's commands never outlive them); off, a command's jobs live
    on with the session (a model's direct call may start a server with `&`)."""
    return scoped(_foreground_only, on)


def current_cancel() -> threading.Event | None:
    """The event that cancels the work this thread is doing now, if someone may cancel it."""
    return _cancel.get()


class PersistentShell:
    def __init__(
        self,
        open_channel: Callable[[], Channel],
        *,
        cwd: str,
        state_path: str,
        max_output_bytes: int,
        spill_dir: Path | None,
        startup_timeout: float = 15.0,
        local_files: bool = False,
    ) -> None:
        """`local_files`: the shell runs on this machine and sees its files as we do, so each
        command is written to its file from here rather than sent through the shell's input."""
        self._open_channel = open_channel
        self._local_files = local_files
        self._state_path = state_path
        self._command_path = posixpath.join(posixpath.dirname(state_path), "command")
        self._max_output = max_output_bytes
        self._spill_dir = spill_dir
        self._startup_timeout = startup_timeout
        self._lock = threading.RLock()
        self._nonce = secrets.token_hex(8)
        self._scripts = ShellScripts(self._nonce, state_path, self._command_path)
        self._done = self._scripts.done
        self._ready = self._scripts.ready
        self._follow = False  # another shell of the session ran since: take up its state and cwd
        self._channel: Channel | None = None
        self._shell_pid = 0
        self._pending = b""
        self.cwd = cwd
        self._has_state = False
        self._runs = 0
        self._confined_by: Confinement | None = None  # what this shell's __herald_ro runs
        # Commands this shell has parsed without error (a loop runs the same one again and
        # again): they skip the parse check's subshell. Emptied with each new shell.
        self._parsed: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self) -> None:
        channel = self._open_channel()
        setup = self._scripts.setup(self.cwd, self._has_state)
        self._follow = False
        channel.send(setup.encode())
        self._channel = channel
        self._pending = b""
        self._parsed.clear()
        self._confined_by = None
        try:
            record = self._read_record(self._ready, time.monotonic() + self._startup_timeout, None)
        except BackendError:
            self._discard_channel()
            raise
        if record is None:
            self._discard_channel()
            raise BackendError(f"the shell did not start within {self._startup_timeout:.0f} s")
        self._shell_pid = int(record[0] or 0)

    def _discard_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            try:
                channel.close()
            except Exception:
                pass

    @property
    def channel(self) -> Channel | None:
        """The channel to the running shell, if one runs."""
        return self._channel

    @property
    def lock(self) -> threading.RLock:
        """Held while a command runs: hold it to act between commands."""
        return self._lock

    def close(self) -> None:
        with self._lock:
            self._discard_channel()

    @property
    def max_output_bytes(self) -> int:
        """The output cap of this shell's answers."""
        return self._max_output

    @property
    def state_path(self) -> str:
        """Where this shell saves its exported variables after each command."""
        return self._state_path

    def follow(self, cwd: str) -> None:
        """Another shell of this session (a backend-mode supervisor's, on the same backend) ran
        commands and saved its exports to our state file: the next command first takes them up,
        and `cwd`, so the session reads as one shell."""
        with self._lock:
            self.cwd = cwd
            self._has_state = True
            self._follow = self._channel is not None  # a new shell restores both anyway

    # -- commands --------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float, workdir: str | None = None,
            confine: Confinement | None = None) -> CommandResult:
        """`confine`: run the command read-only under the OS (herald/_sandbox/confine/readonly.py), in
        a fresh bash that starts from this shell's directory and exports; a `cd` comes back."""
        with self._lock:
            notes: list[str] = []
            if self._channel is None:
                self._start()
            started = time.monotonic()
            # The text and why it is so: herald/_sandbox/shell/script.py (the supervisor's shell's too).
            written = self._local_files and self._scripts.write_command(command)
            script = self._scripts.command(command, workdir, command in self._parsed, _foreground_only.get(), written,
                                           confined=confine is not None)
            if confine is not None and self._confined_by != confine:
                script = self._scripts.confine_function(confine.bwrap, confine.seccomp) + script
                self._confined_by = confine
            if self._follow:
                script, self._follow = self._scripts.follow(self.cwd) + script, False
            capture = CappedCapture(
                self._max_output,
                spill_dir=self._spill_dir,
                spill_name=f"terminal-{self._nonce}-{self._runs}.txt",
            )
            self._runs += 1
            cancel = current_cancel()
            try:
                assert self._channel is not None
                self._channel.send(script.encode("utf-8", "surrogateescape"))
                record = self._read_record(self._done, started + timeout, capture, cancel)
                interrupted = record is None and cancel is not None and cancel.is_set()
                timed_out = record is None and not interrupted
                if record is None:
                    self._discard_channel()  # kills the command, everything it started, the shell
                    if interrupted:
                        notes.append(
                            f"Command interrupted after {time.monotonic() - started:.1f} s: it was "
                            f"killed with every process it started. {self._restart_note()}"
                        )
                    else:
                        notes.append(
                            f"Command timed out after {timeout:g} s and was killed with every process "
                            f"it started. {self._restart_note()}"
                        )
                    exit_code = INTERRUPTED_EXIT_CODE if interrupted else TIMEOUT_EXIT_CODE
                else:
                    exit_code, parsed, self.cwd = done_fields(record, self.cwd)
                    if parsed and len(command) <= PARSE_CACHE_MAX_CHARS:
                        if len(self._parsed) >= PARSE_CACHE_SIZE:
                            self._parsed.clear()
                        self._parsed.add(command)
                    self._has_state = True
            except BackendError:
                # The shell went away mid-command (`exit`, killed): the next call starts a new
                # one in the same place, so the session goes on.
                channel = self._channel
                self._discard_channel()
                notes.append(f"The shell exited during this command. {self._restart_note()}")
                # `exit 3` should read as 3: a channel that knows the shell's status offers it.
                status = channel.returncode if channel is not None else None
                exit_code = status if status is not None and status >= 0 else -1
                timed_out = False
            finally:
                capture.close()
            output = self._scripts.tidy(capture.text("command output"))
            if output.endswith("\n") and not capture.overflowed:
                output = output[:-1]
            return CommandResult(
                output=output,
                exit_code=exit_code,
                timed_out=timed_out,
                duration_seconds=time.monotonic() - started,
                output_bytes=capture.total,
                truncated=capture.overflowed,
                note=" ".join(notes),
            )

    def _restart_note(self) -> str:
        kept = "directory and exported variables" if self._has_state else "directory"
        return f"The next command runs in a new shell with the same {kept}."

    def _read_record(
        self,
        marker: bytes,
        deadline: float,
        capture: CappedCapture | None,
        cancel: threading.Event | None = None,
    ) -> list[str] | None:
        """Feed output to `capture` until `marker ... \\0`; return its fields, None on deadline
        or once `cancel` is set."""
        assert self._channel is not None
        buffer = self._pending
        self._pending = b""
        while True:
            output, fields, buffer = scan(buffer, marker)
            if capture is not None:
                capture.feed(output)
            if fields is not None:
                self._pending = buffer
                return fields
            remaining = deadline - time.monotonic()
            if cancel is not None:  # wake up now and then to look at the event
                remaining = 0.0 if cancel.is_set() else min(remaining, CANCEL_POLL_SECONDS)
            if remaining <= 0:
                if capture is not None:  # no record is coming: what was held back is output
                    capture.feed(buffer)
                    buffer = b""
                self._pending = buffer
                return None
            chunk = self._channel.recv(remaining)
            if chunk is None:
                continue
            if chunk == b"":
                if capture is not None:
                    capture.feed(buffer)
                raise BackendError("the shell exited")
            buffer += chunk
