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

import contextlib
import contextvars
import posixpath
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..capture import CappedCapture
from .base import BackendError, Channel, CommandResult

TIMEOUT_EXIT_CODE = 124
INTERRUPTED_EXIT_CODE = 130  # as a shell reports a command stopped by Ctrl-C
CANCEL_POLL_SECONDS = 0.05
PARSE_CACHE_SIZE = 256
PARSE_CACHE_MAX_CHARS = 4096  # how often a cancellable wait looks at its event

_cancel: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("herald_cancel", default=None)


@contextlib.contextmanager
def cancellable(event: threading.Event | None) -> Iterator[None]:
    """Let `event` stop what this thread runs until the block ends (commands in any persistent
    shell, and any tool that asks `current_cancel()`). None leaves things as they are."""
    if event is None:
        yield
        return
    token = _cancel.set(event)
    try:
        yield
    finally:
        _cancel.reset(token)


_foreground_only: contextvars.ContextVar[bool] = contextvars.ContextVar("herald_foreground_only", default=False)

# Kills the shell's children once a command has returned: its jobs (`cmd &`, by process group,
# as `set -m` gives each its own) and, where /proc lists them, disowned ones too. Then forgets
# them, so no "Killed" notice lands in the next command's output.
_END_JOBS = (
    "__herald_kids=(); builtin read -r -a __herald_kids < /proc/$$/task/$$/children 2>/dev/null; "
    "for __herald_job in $(builtin jobs -p) \"${__herald_kids[@]}\"; do "
    "builtin kill -9 -- -$__herald_job $__herald_job; done 2>/dev/null; builtin disown -a; "
    "builtin unset __herald_kids __herald_job; "
)


@contextlib.contextmanager
def foreground_only(on: bool = True) -> Iterator[None]:
    """While on, the commands this thread runs in a persistent shell end with everything they
    left in the background (a script's commands never outlive them); off, a command's jobs live
    on with the session (a model's direct call may start a server with `&`)."""
    token = _foreground_only.set(on)
    try:
        yield
    finally:
        _foreground_only.reset(token)


def current_cancel() -> threading.Event | None:
    """The event that cancels the work this thread is doing now, if someone may cancel it."""
    return _cancel.get()


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


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
    ) -> None:
        self._open_channel = open_channel
        self._state_path = state_path
        self._command_path = posixpath.join(posixpath.dirname(state_path), "command")
        self._max_output = max_output_bytes
        self._spill_dir = spill_dir
        self._startup_timeout = startup_timeout
        self._lock = threading.RLock()
        self._nonce = secrets.token_hex(8)
        self._done = f"__HERALD_DONE_{self._nonce}__ ".encode()
        self._ready = f"__HERALD_READY_{self._nonce}__ ".encode()
        self._channel: Channel | None = None
        self._shell_pid = 0
        self._pending = b""
        self.cwd = cwd
        self._has_state = False
        self._runs = 0
        # Commands this shell has parsed without error (a loop runs the same one again and
        # again): they skip the parse check's subshell. Emptied with each new shell.
        self._parsed: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self) -> None:
        channel = self._open_channel()
        restore = f"builtin . {shell_quote(self._state_path)} 2>/dev/null\n" if self._has_state else ""
        setup = (
            "set -m +o history 2>/dev/null; unset PROMPT_COMMAND; PS1=''; PS2=''\n"
            + restore
            + f"builtin cd -- {shell_quote(self.cwd)} 2>/dev/null || builtin cd\n"
            + f"printf '%s%s %s\\0' __HERALD_READY_ {self._nonce}__ \"$$\"\n"
        )
        channel.send(setup.encode())
        self._channel = channel
        self._pending = b""
        self._parsed.clear()
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

    # -- commands --------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float, workdir: str | None = None) -> CommandResult:
        with self._lock:
            notes: list[str] = []
            if self._channel is None:
                self._start()
            started = time.monotonic()
            # The command goes to a file that the shell sources, and only once a throwaway
            # subshell has parsed it (as a function body) without error; a command that does not
            # parse runs in a subshell, which reports the error. Parsing broken text in the
            # session's shell is what must not happen: with an unterminated quote, `${`, `$(` or
            # a trailing backslash, bash 5.2's `eval` goes on reading the session's own input
            # (the next command fails or vanishes), and an unterminated `$(` corrupts its heap.
            path = shell_quote(self._command_path)
            source = f"builtin . {path}"
            if workdir:
                source = f"builtin cd -- {shell_quote(workdir)} && {source}"
            run_here = f"{{ {f'( {source} )' if workdir else source}; }}"
            if command in self._parsed:  # parsed fine in this shell before: no subshell to check
                run_it = f"__herald_ok=1; {run_here}"
            else:
                parse = shell_quote(f"__herald_parse() {{\n{command}\n:\n}}")
                run_it = (
                    f"if ( builtin eval {parse} ) >/dev/null 2>&1; "
                    f"then __herald_ok=1; {run_here}; else __herald_ok=0; ( {source} ); fi"
                )
            script = (
                f"__herald_ok=0; {{ builtin printf '%s' {shell_quote(command)} >| {path} && {run_it}; }} </dev/null 2>&1; "
                f"__herald_ec=$?; {_END_JOBS if _foreground_only.get() else ''}"
                # State first, then the record: once a result is back, a new shell (after a
                # timeout, a crash, a dropped connection) finds the variables it left.
                f"builtin export -p >| {shell_quote(self._state_path)} 2>/dev/null; "
                f"builtin printf '\\n%s%s %s %s %s\\0' __HERALD_DONE_ {self._nonce}__ \"$__herald_ec\" "
                f"\"${{__herald_ok:-0}}\" \"$PWD\"\n"
            )
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
                    exit_code = int(record[0]) if record[0].lstrip("-").isdigit() else -1
                    parsed, _, pwd = record[1].partition(" ")
                    self.cwd = pwd or self.cwd
                    if parsed == "1" and len(command) <= PARSE_CACHE_MAX_CHARS:
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
                status = getattr(channel, "returncode", None)
                exit_code = status if isinstance(status, int) and status >= 0 else -1
                timed_out = False
            finally:
                capture.close()
            # bash names the sourced file in its own messages; say "bash" as `bash -c` would.
            output = capture.text("command output").replace(f"{self._command_path}: ", "bash: ")
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
        keep = len(marker) + 1  # bytes held back in case a marker is split across reads
        while True:
            at = buffer.find(marker)
            if at >= 0:
                end = buffer.find(b"\0", at)
                if end >= 0:
                    payload = buffer[:at]
                    if capture is not None:
                        capture.feed(payload[:-1] if payload.endswith(b"\n") else payload)
                    self._pending = buffer[end + 1 :]
                    fields = buffer[at + len(marker) : end].decode("utf-8", "surrogateescape")
                    return fields.split(" ", 1) + [""] * (2 - len(fields.split(" ", 1)))
            elif len(buffer) > keep:
                if capture is not None:
                    capture.feed(buffer[:-keep])
                buffer = buffer[-keep:]
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
