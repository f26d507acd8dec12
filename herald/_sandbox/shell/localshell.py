"""Backend mode: the `terminal` tool in the supervisor, in a bash next to the script.

Stdlib only, Python >= 3.8 (the sandbox package). The shell speaks the persistent shell's
protocol (shell/script.py, the same text as Herald's PersistentShell) and is the session's shell
as far as a command can tell: it starts from the state file Herald's shell saves on this backend
(its exported variables) and in its directory, both named by the grant ("shell"), and saves its
own exports to that same file after each command. Each record of a call carries the directory
after it; Herald's shell takes up the file and that directory before its next command
(PersistentShell.follow). When Herald's shell ran a command meanwhile (a call handed over, a CWD
frame), this one takes up the file and directory before its next command in the same way.

The answer is the one Herald's terminal tool gives: output merged, with its notes; a command that
runs past its timeout is killed with its whole tree and the next one runs in a new shell from the
saved state. Output past the cap (Overflow) is answered by Herald, which caps it and keeps the
spill file (one capping for both: toolcore/capping.py).
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Set

from ..procs.trees import descendants, signal_pids
from ..wire.grant import ShellGrant
from .script import ShellScripts, done_fields, scan

TIMEOUT_EXIT_CODE = 124  # as herald/backends/shell.py
STARTUP_SECONDS = 15.0
# The guard is this package's shellguard, under whatever name the package has here
# (`_hermes_runtime` in a backend, `herald._sandbox` in Herald's own process).
_PACKAGE = __name__.rpartition(".")[0]
PACKAGE_PARENT = os.path.abspath(__file__)
for _ in range(_PACKAGE.count(".") + 2):
    PACKAGE_PARENT = os.path.dirname(PACKAGE_PARENT)
GUARD_LAUNCH = (
    "import sys; sys.path.insert(0, sys.argv[1]); from %s.guard import main; main(sys.argv[2:])" % _PACKAGE
)


EMPTY_COMMAND = "terminal: command is empty. Pass the shell command to run, e.g. terminal('ls -la')."
KEEP_BYTES = 8 << 20  # output kept for Herald past the cap; of the rest only the last `limit` bytes
PARSE_CACHE_SIZE = 256
PARSE_CACHE_MAX_CHARS = 4096


def reply(output: str, exit_code: int, timed_out: bool, truncated: bool, note: str) -> Dict[str, Any]:
    """The terminal tool's answer (herald/tools/terminal.py builds the same from a CommandResult)."""
    answer: Dict[str, Any] = {"output": output, "exit_code": exit_code}
    if timed_out:
        answer["timed_out"] = True
    if truncated:
        answer["truncated"] = True
    if note:
        answer["note"] = note
    return answer


class Overflow(Exception):
    """The output passed the cap: Herald, which keeps the spill files, makes the answer."""

    def __init__(self, output: bytes, skipped: int, tail: bytes, exit_code: int, timed_out: bool, note: str) -> None:
        super().__init__("output over the cap")
        self.output, self.skipped, self.tail = output, skipped, tail  # output + (skipped bytes) + tail
        self.exit_code, self.timed_out, self.note = exit_code, timed_out, note


class ShellGone(Exception):
    """The shell exited or could not start: the call goes to Herald (nothing ran here)."""


class LocalShell:
    def __init__(self, spec: ShellGrant) -> None:
        state_path = spec["state_path"]
        command_path = os.path.join(os.path.dirname(state_path), "command-%s" % secrets.token_hex(4))
        self.scripts = ShellScripts(secrets.token_hex(8), state_path, command_path)
        self.spec = spec
        self.cwd = str(spec["cwd"])
        self.has_state = bool(spec.get("has_state"))
        self.stale = False  # Herald's shell ran since: take up the state file and cwd first
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.returncode = -1
        self.pending = b""
        self.parsed: Set[str] = set()
        self.kept, self.skipped, self.tail = 0, 0, bytearray()  # the output held (keep)

    def update(self, spec: ShellGrant) -> None:
        """A new run or kernel cell's grant: Herald's shell may have moved since the last one."""
        self.spec = spec
        if spec["cwd"] != self.cwd or spec.get("has_state"):
            self.follow(str(spec["cwd"]))

    def follow(self, cwd: str) -> None:
        self.cwd, self.stale, self.has_state = cwd, True, True

    # -- one command -----------------------------------------------------------------------

    def run(self, command: str, timeout: float, workdir: Optional[str]) -> Dict[str, Any]:
        """Run `command`; Herald's terminal answer for it. ShellGone before it ran."""
        started = time.monotonic()
        if self.proc is None:
            self.start()
        elif self.stale:
            self.send(self.scripts.follow(self.cwd))
        self.stale = False
        parsed_before = command in self.parsed
        written = self.scripts.write_command(command)  # this shell runs next to us
        self.send(self.scripts.command(command, workdir, parsed_before, True, written))
        chunks: List[bytes] = []
        self.kept, self.skipped, self.tail = 0, 0, bytearray()
        timed_out, note = False, ""
        try:
            fields = self.read(self.scripts.done, started + timeout, chunks)
        except ShellGone:  # `exit`, or killed: the next call starts a new shell in the same place
            note = "The shell exited during this command. %s" % self.restart_note()
            exit_code = self.returncode if self.returncode >= 0 else -1
        else:
            if fields is None:
                self.kill()
                timed_out, exit_code = True, TIMEOUT_EXIT_CODE
                note = "Command timed out after %s s and was killed with every process it started. %s" % (
                    format(timeout, "g"), self.restart_note()
                )
            else:
                exit_code, parsed, self.cwd = done_fields(fields, self.cwd)
                self.has_state = True
                if parsed and not parsed_before and len(command) <= PARSE_CACHE_MAX_CHARS:
                    if len(self.parsed) >= PARSE_CACHE_SIZE:
                        self.parsed.clear()
                    self.parsed.add(command)
        output = b"".join(chunks)
        limit = int(self.spec["max_output_bytes"])
        if len(output) > limit or self.skipped:
            raise Overflow(output, self.skipped, bytes(self.tail), exit_code, timed_out, note)
        text = self.scripts.tidy(output.decode("utf-8", "replace"))
        return reply(text[:-1] if text.endswith("\n") else text, exit_code, timed_out, False, note)

    def restart_note(self) -> str:
        kept = "directory and exported variables" if self.has_state else "directory"
        return "The next command runs in a new shell with the same %s." % kept

    # -- the process -----------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                # Under the guard (shell/guard.py): what a command leaves running after it is killed.
                [sys.executable, "-I", "-S", "-c", GUARD_LAUNCH, PACKAGE_PARENT, str(os.getpid()),
                 self.spec.get("bin") or "bash", "--noprofile", "--norc"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
            )
        except OSError as exc:
            raise ShellGone(str(exc)) from None
        self.pending = b""
        self.returncode = -1
        self.send(self.scripts.setup(self.cwd, self.has_state))
        if self.read(self.scripts.ready, time.monotonic() + STARTUP_SECONDS, None) is None:
            self.kill()
            raise ShellGone("the shell did not start")

    def send(self, text: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(text.encode("utf-8", "surrogateescape"))
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            raise ShellGone("the shell exited") from None

    def read(self, marker: bytes, deadline: float, chunks: Optional[List[bytes]]) -> Optional[List[str]]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buffer, self.pending = self.pending, b""
        while True:
            output, fields, buffer = scan(buffer, marker)
            if chunks is not None and output:
                self.keep(chunks, output)
            if fields is not None:
                self.pending = buffer
                return fields
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if chunks is not None:
                    self.keep(chunks, buffer)
                return None
            if not select.select([fd], [], [], remaining)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if chunks is not None:
                    self.keep(chunks, buffer)
                self.kill()
                raise ShellGone("the shell exited")
            buffer += chunk

    def keep(self, chunks: List[bytes], data: bytes) -> None:
        """Hold `data` for the answer: the first KEEP_BYTES, then only the last `limit` bytes."""
        room = KEEP_BYTES - self.kept
        if room > 0:
            chunks.append(data[:room])
            self.kept += min(room, len(data))
            data = data[room:]
        if data:
            limit = int(self.spec["max_output_bytes"])
            self.tail += data
            if len(self.tail) > limit:
                self.skipped += len(self.tail) - limit
                del self.tail[: len(self.tail) - limit]

    def kill(self) -> None:
        """The shell and everything it started (each command has a process group of its own)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        signal_pids(set(descendants(proc.pid)) | {proc.pid}, signal.SIGKILL)
        self.returncode = proc.wait()
        self.parsed.clear()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.kill()
        try:
            os.unlink(self.scripts.command_path)
        except OSError:
            pass
