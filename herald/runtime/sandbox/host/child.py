"""One sandbox child process: spawn, hand it a script, collect its output, kill its tree.

The child runs in its own session and process group with stdin from /dev/null, stdout and
stderr on pipes, and a control pipe pair for "ready" / "run this" / "done" / "exit" frames.
Collection is one poll loop over stdout, stderr, the child's pidfd (exit), the control pipe and
an interrupt pipe, so a timeout or an interrupt can never be missed while output keeps draining.
A forked child's "exit" frame ends the run before the process is gone (collect, kill).
With `tools` (host mode on the local backend, runtime/backend_tools.py), a run's start frame and
each kernel cell carry the grant of the file reads the script's process answers itself, and the
records of those answers come back on the control pipe, ahead of the frame that ends the run.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from .... import spawner
from ...._sandbox.child.bootstrap import KEEP_ARG
from ...._sandbox.procs.child import Forked, Spawned, fork_child, spawn_child
from ...._sandbox.procs.forking import ForkError
from ...._sandbox.procs.trees import KillClock, descendants, signal_pids
from ...._sandbox.wire import frames
from ...._sandbox.wire import guards as wire
from ...._sandbox.wire.framing import MAX_CONTROL_FRAME_BYTES, FrameBuffer, ProtocolError, encode_frame
from ....capture import CappedCapture
from ..contract import Collected, LocalGrants, Reason
from ..errors import SandboxStartError
from ..isolation import Isolation
from ..sandboxdir import CHILD_LOADER
from ..streams import OutputStream, drain_fd
from .zygote import ForkServer

EXIT_SETTLE_SECONDS = 2.0
log = logging.getLogger(__name__)


@dataclass
class _ControlState:
    """What the control pipe said during one run."""

    done: bool = False  # a kernel cell ended
    done_status: int | None = None
    reported: int | None = None  # the exit status the child sent just before exiting
    open: bool = True


class ChildProcess:
    def __init__(
        self, python: str, sandbox_dir: str, env: dict[str, str], forkserver: ForkServer | None = None,
        isolation: Isolation | None = None, tools: LocalGrants[Any] | None = None,
        lookup: Callable[[str], Any] | None = None,
    ) -> None:
        self.forked = False
        self._tools: LocalGrants[Any] | None = tools if lookup is not None else None
        self._lookup = lookup
        self._session: Any = None  # what the run's token is bound to (with tools)
        self._process: Spawned | Forked
        forked = self._fork(forkserver, sandbox_dir)
        if forked is not None:
            self._process = forked
        else:
            def command(ctl_read: int, ctl_write: int) -> list[str]:
                argv = [python, "-I", "-B", "-c", CHILD_LOADER, sandbox_dir, str(ctl_read), str(ctl_write)]
                if isolation is None or not isolation.holds_processes:
                    argv.append(KEEP_ARG)  # a keeper process holds what the run leaves (procs/reaper.py)
                return isolation.command(argv) if isolation is not None else argv

            try:
                self._process = spawn_child(command, env, sandbox_dir, popen=spawner.popen)
            except OSError as exc:
                raise SandboxStartError(f"could not start the sandbox interpreter {python}: {exc}") from None
        process = self._process
        self.stdout_fd, self.stderr_fd, self._to_child, self._from_child = (
            process.stdout, process.stderr, process.ctl_out, process.ctl_in
        )
        self.pid = self._process.pid
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None
        self._ctl_frames = FrameBuffer(MAX_CONTROL_FRAME_BYTES)
        self._leaving = False  # it reported its exit status on its way out: collect returned
        self.ready = False
        self.closed = False

    def _fork(self, server: ForkServer | None, sandbox_dir: str) -> Forked | None:
        """A child forked by `server`, or None (spawn one instead)."""
        if server is None:
            return None
        try:
            forked = fork_child(server, sandbox_dir)
        except ForkError as exc:
            log.warning("fork server failed (%s); spawning an interpreter instead", exc)
            return None
        self.forked = True
        return forked

    # -- control channel -------------------------------------------------------------------

    def _read_control(self) -> list[frames.FromChild | frames.EofFrame]:
        try:
            chunk = os.read(self._from_child, 65536)
        except BlockingIOError:
            return []
        if not chunk:
            return [{"type": frames.EOF}]
        try:  # the script shares the control pipe's process: a bad frame from it is skipped
            messages = self._ctl_frames.feed(chunk, skip_bad=True)
        except ProtocolError:  # an impossible length: the rest of the pipe is read and dropped
            return []
        said: list[frames.FromChild | frames.EofFrame] = []
        for message in messages:
            try:  # a script's forgery (say, a status that is not a number) must not break the loop
                said.append(wire.from_child(message))
            except wire.FrameError:
                pass
        return said

    def _drain_control(self) -> list[frames.FromChild | frames.EofFrame]:
        """All the control pipe holds now (a killed script's last records among them)."""
        drained: list[frames.FromChild | frames.EofFrame] = []
        for _ in range(64):  # a pipe holds 64 KiB unless its writer enlarged it: bounded all the same
            batch = self._read_control()
            if not batch or batch[-1]["type"] == frames.EOF:
                return drained + batch[:-1] if batch else drained
            drained += batch
        return drained

    def wait_ready(self, timeout: float) -> None:
        """Block until the child says it is ready; raise SandboxStartError if it dies first."""
        deadline = time.monotonic() + timeout
        while not self.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxStartError(f"the sandbox interpreter did not start within {timeout:.0f} s")
            readable, _, _ = select.select([self._from_child], [], [], remaining)
            for message in self._read_control() if readable else []:
                if message["type"] == frames.READY:
                    self.ready = True
                elif message["type"] == frames.EOF:
                    raise SandboxStartError(self._startup_failure())

    def _startup_failure(self) -> str:
        status = self._process.wait(5)
        try:
            err = os.read(self.stderr_fd, 20000).decode("utf-8", "replace").strip()
        except OSError:
            err = ""
        return f"the sandbox interpreter exited during start-up (status {status}): {err or 'no output'}"

    def poll(self) -> int | None:
        """The exit status once the child is gone, else None."""
        return self._process.poll()

    def send(self, message: frames.StartFrame | frames.CodeFrame) -> None:
        if self._tools is not None:
            self._add_grant(message)
        data = encode_frame(message)
        while data:
            written = os.write(self._to_child, data)
            data = data[written:]

    def _add_grant(self, frame: frames.StartFrame | frames.CodeFrame) -> None:
        """The run's grant into a one-shot start frame or a kernel cell; a kernel's start frame
        binds the session and brings the schemas, its cells bring their grants."""
        assert self._tools is not None and self._lookup is not None
        start = cast("frames.StartFrame", frame)
        token = start.get("token")
        if isinstance(token, str):
            self._session = self._lookup(token)
            if self._session is None:
                return
            start["tool_specs"] = self._tools.specs()
            if start.get("mode") == "kernel":
                return
        if self._session is not None:
            grant = self._tools.grant(self._session)
            if grant is not None:
                frame["tools"] = grant

    def _control(self, message: frames.FromChild | frames.EofFrame) -> None:
        """A record of a call the script's process answered itself: counted and logged."""
        if message["type"] == frames.RECORD and self._tools is not None and self._session is not None:
            self._tools.record(self._session, message)

    # -- the run ---------------------------------------------------------------------------

    def _exited(self) -> bool:
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        return self._process.exited()

    def collect(
        self,
        stdout: CappedCapture,
        stderr: CappedCapture,
        *,
        deadline: float,
        interrupt_fd: int,
        kill_grace: float,
        sentinel: bytes | None = None,
        paused: Callable[[], float] | None = None,
    ) -> Collected:
        """Read output until the child exits (one-shot) or reports done and both sentinels
        arrived (kernel). At the deadline or on interrupt, SIGTERM the tree, then SIGKILL after
        `kill_grace` seconds. `paused()`: seconds the run waited on a person, added to the deadline."""
        streams = {
            self.stdout_fd: OutputStream(self.stdout_fd, stdout, sentinel),
            self.stderr_fd: OutputStream(self.stderr_fd, stderr, sentinel),
        }
        poller = select.poll()
        for fd in (self.stdout_fd, self.stderr_fd, self._from_child, interrupt_fd):
            poller.register(fd, select.POLLIN)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        known: set[int] = set()

        def terminate() -> None:
            known.update(self._terminate())

        def kill() -> None:
            signal_pids(known | set(descendants(self.pid)) | {self.pid}, signal.SIGKILL)

        clock = KillClock(deadline, kill_grace, terminate, kill)
        control = _ControlState()
        # A record of a call the script answered itself was written before anything it printed
        # after that call: the control pipe is read before each piece of output is taken, so a
        # live view sees the call first.
        first = functools.partial(self._take_control, control, poller) if self._tools is not None else None
        while True:
            if paused is not None:
                clock.deadline = deadline + paused()
            if self._poll_once(poller, streams, interrupt_fd, clock, control, first):
                break
            if control.reported is not None and self.forked and sentinel is None and clock.reason is None:
                # The script flushed its output, killed what it started and said it is leaving
                # (child/bootstrap.py): the run is over now, not when the kernel has torn the process
                # down (a millisecond or more). kill() takes the rest, and the fork server, a
                # subreaper, kills whatever a status forged by the script left running.
                self._leaving = True
                break
            if control.done and clock.reason is None and all(s.seen for s in streams.values()):
                return Collected("done", control.done_status, alive=True)
        return self._finish(streams, known, cast("Reason | None", clock.reason), control, first)

    def _poll_once(
        self, poller: Any, streams: dict[int, OutputStream], interrupt_fd: int, clock: KillClock,
        control: _ControlState, first: Callable[[], None] | None,
    ) -> bool:
        """Wait until something happens (or the clock's next step) and handle it: True once the
        child has exited."""
        now = time.monotonic()
        clock.tick(now)
        wake = clock.wait(now)
        wake = EXIT_SETTLE_SECONDS if wake is None else wake  # killed: wait for the exit
        exited = False
        for fd, _ in poller.poll(min(wake, 0.25 if self._pidfd is None else 3600.0) * 1000):
            if fd in streams:
                self._pump(streams[fd], poller, first=first)
            elif fd == self._from_child:
                self._take_control(control, poller)
            elif fd == interrupt_fd:
                drain_fd(interrupt_fd)
                clock.stop("interrupted")
            elif fd == self._pidfd:
                exited = True
        return exited or (self._pidfd is None and self._exited())

    def _take_control(self, control: _ControlState, poller: Any) -> None:
        for message in self._read_control() if control.open else ():
            if message["type"] == frames.DONE:
                control.done, control.done_status = True, message["exit_code"]
            elif message["type"] == frames.EXIT:
                control.reported = message["exit_code"]
            elif message["type"] == frames.EOF:
                control.open = False
                poller.unregister(self._from_child)
            else:
                self._control(message)

    def _finish(
        self, streams: dict[int, OutputStream], known: set[int], killing: Reason | None, control: _ControlState,
        first: Callable[[], None] | None,
    ) -> Collected:
        """The run is over: kill what is left, take the last output and records, reap."""
        # The child is gone but not yet reaped, so its pid (= its group id) cannot be reused:
        # kill what is left of its group and any descendants we saw, then drain and reap.
        signal_pids(known | {self.pid}, signal.SIGKILL)
        for stream in streams.values():
            self._pump(stream, None, drain=True, first=first)
            stream.finish()
        for message in self._drain_control():
            if message["type"] == frames.EXIT:
                control.reported = message["exit_code"]
            else:
                self._control(message)
        reported = control.reported
        status = reported if reported is not None and killing is None else self._process.wait(None)
        if killing is not None:
            return Collected(killing, status)
        if control.done:
            return Collected("done", control.done_status)
        return Collected("exited", status)

    def _terminate(self) -> set[int]:
        known = set(descendants(self.pid)) | {self.pid}
        signal_pids(known, signal.SIGTERM)
        return known

    @staticmethod
    def _pump(
        stream: OutputStream, poller: Any, *, drain: bool = False, first: Callable[[], None] | None = None
    ) -> None:
        """Feed what `stream` holds to its capture; `first`, if given, runs before each piece is fed."""
        while stream.open:
            try:
                chunk = os.read(stream.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                stream.open = False
                if poller is not None:
                    poller.unregister(stream.fd)
                return
            if first is not None:
                first()
            stream.feed(chunk)
            if not drain and len(chunk) < (1 << 16):
                return

    def kill(self, grace: float = 0.0) -> None:
        """Stop the child and everything it started; reap it."""
        if self.closed:
            return
        # A child that reported it is leaving was SIGKILLed as collect returned; what it started
        # it killed itself, and what a forged report left running is orphaned to the fork server
        # (a subreaper), which kills children it did not fork: no walk of its tree here.
        if not self._leaving and not self._exited():
            known = self._terminate() if grace > 0 else set(descendants(self.pid)) | {self.pid}
            self._process.wait(grace)
            signal_pids(known | set(descendants(self.pid)), signal.SIGKILL)
        try:  # stragglers left in its group; the pid is not reaped yet, so it is still ours
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._process.release()
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pidfd is not None:
            try:
                os.close(self._pidfd)
            except OSError:
                pass
        self._process.close()


def check_interpreter(python: str) -> None:
    """SandboxStartError unless `python` (setting sandbox.python) names an executable."""
    if not (shutil.which(python) or (os.path.isfile(python) and os.access(python, os.X_OK))):
        raise SandboxStartError(
            f"could not start the sandbox interpreter {python}: no such executable "
            "(setting sandbox.python; Python 3.8 or newer)"
        )
