"""`Runtime`: run model-written Python scripts that call Herald's tools.

Execution policy:
- A script runs in a fresh child interpreter (its own process group, scrubbed environment, no
  access to Herald's package). With warm start on, that child was spawned ahead of time and is
  waiting (warm.py), so a run pays no interpreter start-up; the next is made while a run goes on.
- Tool calls come back over the RPC socket, authenticated by a token valid for this run only, and
  go through the Dispatcher (allow-list, argument checks, call budget, transcript).
- The run ends when the child exits, or, forked from the fork server, when it reports that it
  is leaving (its output flushed, what it started killed): the kernel's teardown of the process
  is not waited for. At the timeout or on `interrupt()` the whole tree gets SIGTERM, then
  SIGKILL after the grace period; whatever survives the child is killed too.
- When the run ends, its tool calls still running are cancelled and waited for (a short, bounded
  wait: `scope.stop_calls`); a call that was still waiting for a lock gives up, and one that
  got it checks the run's cancel and deadline before it acts, so nothing of a run acts after
  `execute` has returned (only a tool that honours neither, mid-action, could).
- Kernel sessions (`session="name"`) keep one child and its globals across runs (kernels.py); a
  timeout, interrupt or crash kills it and the result says the state was lost.
- Where the child runs is the Runtime's mode (sandbox/mode.py), picked when it is made: on this
  machine (`exec_mode="host"`, sandbox/host/mode.py) or inside the backend (`exec_mode="backend"`,
  sandbox/backend/mode.py: the same bootstrap, RPC frames and Dispatcher, carried over the
  backend's exec channel; warm start, kernel sessions and the fork server work the same way there).
  Every step that differs between the two is the mode's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._sandbox.wire.frames import START, StartFrame
from ..backends.base import Backend, BackendError
from ..capture import CappedCapture
from ..config import Settings, load_settings
from ..config.budgets import check_budgets
from ..policy import Policy
from ..policy.approvals import PausedTime
from ..spill import sweep
from ..tools import Registry, ToolContext
from ..transcript import Transcript
from .backend_tools import BackendTools
from .checkpointing import RunCheckpoints
from .dispatcher import Dispatcher
from .execute_code import execute_code_tool
from .kernels import KernelSessions
from .outcome import OutputListener, build_result, capture_streams, unreachable, unrunnable
from .rpc.replies import script_reply
from .rpc.server import RpcServer
from .sandbox.backend.mode import BackendMode
from .sandbox.contract import SandboxChild
from .sandbox.errors import SandboxStartError
from .sandbox.host.mode import HostMode
from .sandbox.isolation import Isolation
from .sandbox.mode import ExecutionMode
from .sandbox.result import ExecutionResult
from .sandbox.streams import drain_fd
from .scope import stop_calls
from .selfguard import guard_process
from .tokens import RunToken, RunTokens
from .toolset import default_registry
from .warm import WarmChildren

READY_TIMEOUT = 30.0
EXEC_MODES = ("host", "backend")
log = logging.getLogger(__name__)


class Runtime:
    """Runs scripts against one backend. Use as a context manager; `execute` is thread-safe
    (runs are serialised) and `interrupt` may be called from any thread."""

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        settings: Settings | None = None,
        tools: Iterable[str] | None = None,
        registry: Registry | None = None,
        transcript: Transcript | Path | bool = True,
        exec_mode: str | None = None,
        policy: Policy | str | None = None,
        checkpoint_session: str | None = None,
    ) -> None:
        guard_process()  # once per process: not traceable; dead processes' temp dirs removed (selfguard.py)
        self.settings = settings or load_settings()
        exec_mode = _known_mode(exec_mode or self.settings.sandbox.exec_mode)
        self._own_backend = backend is None
        sweep(self.settings.spill_dir, self.settings.sandbox.spill_retention)  # old runs' spill files
        # A constructor that fails half-way (an unknown tool name, a bad sandbox python) must not
        # leave a shell, a socket, temp dirs or open files behind: undo what was made so far.
        with contextlib.ExitStack() as undo:
            self.backend = backend if backend is not None else self._local_backend(undo)
            self.registry = registry or default_registry(self.settings)
            self.transcript = self._open_transcript(transcript, undo)
            # Time a script waits on a person's approval does not count against its timeout.
            self.paused = PausedTime()
            self.dispatcher = self._make_dispatcher(tools, policy)
            # The model's way to run scripts here; known to the dispatcher, which refuses it to scripts.
            self.execute_tool = execute_code_tool(self)
            self.dispatcher.add_direct(self.execute_tool)
            self._grants = RunTokens(on_revoke=lambda grant: self._server.close_sessions(grant))
            self.mode = self._make_mode(exec_mode)
            undo.callback(self.mode.close)
            self._max_parallel = max(1, self.settings.sandbox.max_parallel_calls)
            self._server: RpcServer[RunToken] = RpcServer(
                self._grants.lookup,
                self._serve,
                max_concurrency=self._max_parallel,
                parent_dir=self.mode.socket_dir,
                inflight=lambda grant: grant.scope.inflight,
            )
            undo.callback(self._server.close)
            self._interrupt_r, self._interrupt_w = _interrupt_pipe(undo)
            self._exec_lock = threading.Lock()
            self._children: WarmChildren[SandboxChild] = WarmChildren(
                self.mode.spawn, enabled=self.settings.sandbox.warm
            )
            # A checkpoint before each run (herald/checkpoints/): kept per session, the agent's or one of its own.
            self.checkpoints = RunCheckpoints(self.backend, self.settings, checkpoint_session)
            self._kernels = KernelSessions(start_run=self._start_run, grants=self._grants,
                                           dispatcher=self.dispatcher, start_fields=self._start_fields)
            self._closed = False
            self.mode.warm_up(self._children)
            undo.pop_all()

    # -- plumbing --------------------------------------------------------------------------

    def _local_backend(self, undo: contextlib.ExitStack) -> Backend:
        """A local backend of the Runtime's own (closed with it), in the current directory."""
        from ..backends.local import LocalBackend

        backend = LocalBackend(settings=self.settings)
        undo.callback(backend.close)
        return backend

    def _open_transcript(self, transcript: Transcript | Path | bool, undo: contextlib.ExitStack) -> Transcript | None:
        """The run log: True makes a new file in the settings' transcript directory."""
        if transcript is True:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            transcript = self.settings.transcript_dir / f"runtime-{stamp}-{secrets.token_hex(3)}.jsonl"
        if isinstance(transcript, Path):
            transcript = Transcript(transcript)
            undo.callback(transcript.close)
        return transcript or None

    def _make_dispatcher(self, tools: Iterable[str] | None, policy: Policy | str | None) -> Dispatcher:
        """The Dispatcher of this Runtime's tool calls, under `policy` (a name, a Policy, or the settings')."""
        return Dispatcher(
            self.registry,
            ToolContext(backend=self.backend, settings=self.settings),
            enabled=list(tools) if tools is not None else self.settings.tools,
            transcript=self.transcript,
            policy=self.paused.wrap(Policy.coerce(policy, self.settings)),
        )

    def _make_mode(self, name: str) -> ExecutionMode[RunToken]:
        """The mode `name` (one of EXEC_MODES) for this Runtime's tools and policy."""
        stubs, elsewhere = self.dispatcher.script_tools, self.dispatcher.offer.elsewhere(self.registry)
        writable = self.dispatcher.policy.profile != "read-only"
        if name == "host":
            return HostMode(self.settings, self.backend, stubs, elsewhere, self._grants.lookup,
                            writable_workspace=writable, tools_in_script=self._tools_in_script)
        return BackendMode(
            self.settings, self.backend, stubs, elsewhere, self._grants.lookup, writable_workspace=writable,
            serve=lambda grant, message, echo: script_reply(self.dispatcher.handle, grant.scope, message, echo),
            tools_beside=lambda: BackendTools(self.dispatcher), inflight=lambda grant: grant.scope.inflight,
        )

    def _tools_in_script(self, isolation: Isolation) -> BackendTools:
        """Host mode on this machine's files: the reads a script's own process answers
        (backend_tools.py), under the paths it sees as Herald does."""
        return BackendTools(self.dispatcher, visible=isolation.seen_alike, masked=isolation.masked)

    def _serve(self, grant: RunToken, message: dict[str, Any], echo: tuple[str, ...]) -> bytes:
        """One of a script's calls over the RPC socket; the mode may have news for the script
        (a moved session directory) just before the reply."""
        frame = script_reply(self.dispatcher.handle, grant.scope, message, echo)
        return self.mode.before_reply(grant) + frame

    @property
    def exec_mode(self) -> str:
        """"host" or "backend" (setting sandbox.exec_mode)."""
        return self.mode.name

    @property
    def isolation(self) -> Isolation:
        """The isolation in force; in backend mode as the backend's probe settled it, once reached."""
        return self.mode.isolation

    def wait_warm(self, timeout: float = READY_TIMEOUT) -> None:
        """Block until the pre-spawned interpreter is ready (benchmarks use it)."""
        with self._exec_lock:
            self._children.wait_ready(timeout)

    def interrupt(self) -> None:
        """Stop the running script (if any): its result has status "interrupted"."""
        try:
            os.write(self._interrupt_w, b"!")
        except (BlockingIOError, OSError):
            pass

    # -- execution -------------------------------------------------------------------------

    def execute(
        self,
        code: str,
        *,
        timeout: float | None = None,
        max_tool_calls: int | None = None,
        session: str | None = None,
        reset: bool = False,
        on_output: OutputListener | None = None,
        budgets: Mapping[str, float] | None = None,
        started: float | None = None,
    ) -> ExecutionResult:
        """Run `code` and return its result. `started` (time.monotonic(); default now) is when
        the run's clock started: `herald exec` passes its own start, so the time it took to get
        here (MCP listings, the backend's connection) counts against `timeout` too. `budgets`
        (default: setting sandbox.budgets) limits what its tool calls may use beyond their number
        (herald/policy/budgets.py). `on_output` sees the script's stdout and stderr
        while it runs (the script's streams are then line-buffered); it is called on the
        thread that called `execute`, and whatever it raises is logged and ignored."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of Python source, not {type(code).__name__}")
        limits = self.settings.sandbox
        timeout = limits.timeout if timeout is None else timeout
        max_calls = limits.max_tool_calls if max_tool_calls is None else max_tool_calls
        budgets = check_budgets(limits.budgets if budgets is None else budgets)  # ValueError: says which
        refused = unrunnable(code, session)
        if refused is not None:
            return refused
        self.dispatcher.warmer.script_starts(code)  # a browser the script will use starts now
        with self._exec_lock:
            if self._closed:
                raise RuntimeError("this Runtime is closed")
            drain_fd(self._interrupt_r)
            noted = self.checkpoints.before_run(code)
            try:
                if session is not None:
                    result = self._kernels.run(
                        code, session, reset=reset, timeout=timeout, max_calls=max_calls, budgets=budgets,
                        on_output=on_output, settings=self.settings, interrupt_fd=self._interrupt_r, paused=self.paused,
                    )
                else:
                    result = self._execute_once(code, timeout, max_calls, on_output, budgets, started)
                result = replace(result, isolation=self.isolation.describe, profile=self.dispatcher.policy.profile)
                return self.checkpoints.noted(result, noted)
            except BackendError as exc:  # the backend could not be reached to start the run (in backend mode)
                return replace(unreachable(exc, session), isolation=self.isolation.describe,
                               profile=self.dispatcher.policy.profile)
            finally:
                if self.transcript is not None:
                    try:
                        self.transcript.flush()
                    except OSError:  # a full disk must not cost the caller the run's result
                        log.exception("could not flush the transcript %s", self.transcript.path)

    def _execute_once(
        self, code: str, timeout: float, max_calls: int, on_output: OutputListener | None,
        budgets: Mapping[str, float], started: float | None = None,
    ) -> ExecutionResult:
        started = time.monotonic() if started is None else started
        scope = self.dispatcher.new_scope(max_calls, deadline=started + timeout, budgets=budgets)
        token, grant = self._grants.issue(scope)
        self.paused.begin(scope)
        child: SandboxChild | None = None
        captures: tuple[CappedCapture, CappedCapture] | None = None
        try:
            frame = self._start_fields()
            frame["mode"], frame["token"], frame["code"] = "oneshot", token, code
            frame["line_buffered"] = on_output is not None
            child = self._start_run(frame)
            # Made once the run is on its way (in backend mode, on the wire): only collect needs them.
            captures = stdout, stderr = capture_streams(self.settings, scope, on_output)
            collected = child.collect(
                stdout,
                stderr,
                deadline=started + timeout,
                interrupt_fd=self._interrupt_r,
                kill_grace=self.settings.sandbox.kill_grace,
                paused=self.paused.seconds,
            )
        finally:
            scope.cancel.set()  # tool calls the script left running (a long terminal command) stop now
            self._grants.revoke(token, grant)
            if child is not None:
                child.kill()
            for capture in captures or ():
                capture.close()
            stop_calls(scope)  # none of its calls may act once this returns
            rolled_back = self.dispatcher.transactions.end_run(scope)  # what it left open in a transaction
        return build_result(collected, scope, stdout, stderr, started, timeout, more_notes=rolled_back)

    def _start_fields(self) -> StartFrame:
        """What every start frame carries, one-shot or kernel."""
        cwd = self.mode.script_cwd()
        return {"type": START, "socket": self._server.path, "cwd": cwd, "max_parallel": self._max_parallel}

    def _take_child(self, *, replenish: bool = True) -> SandboxChild:
        """A ready child. One that cannot start for a cause the mode can undo (in backend mode,
        the directory there swept while the connection that owned it was down) is tried again, once."""
        try:
            return self._children.take(READY_TIMEOUT, replenish=replenish)
        except SandboxStartError as exc:
            if not self.mode.recover(exc, self._children):
                raise
            return self._children.take(READY_TIMEOUT, replenish=replenish)

    def _start_run(self, frame: StartFrame) -> SandboxChild:
        """A ready child that has taken `frame`. A waiting child can die before its run (its
        zygote's PID namespace went away with the zygote): the run then goes to a new one."""
        for _ in range(2):
            child = self._take_child(replenish=False)
            try:
                child.send(frame)
                return child
            except BrokenPipeError:
                child.kill()
            finally:
                self._children.replenish()  # after the hand-over, not before it (warm.py)
        raise SandboxStartError("the sandbox child died before it could start the run, twice; see `herald doctor`")

    # -- lifecycle -------------------------------------------------------------------------

    def end_sessions(self, ending: Callable[[str], bool]) -> list[str]:
        """End the kernel sessions whose names `ending` picks: their children killed, their
        tokens revoked, their globals gone (a later run of that name starts afresh). Waits for
        a run in progress. The names ended."""
        with self._exec_lock:
            names = [name for name in self._kernels.names() if ending(name)]
            for name in names:
                self._kernels.stop(name)
            return names

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.interrupt()
        with self._exec_lock:
            self.mode.begin_close()  # before its children go (backend mode: one may take its directory along)
            self._kernels.close()
            self._children.close()
            self._server.close()
            self.dispatcher.ctx.close()  # session resources the tools opened (a browser, ...)
            self.checkpoints.close()  # the snapshot engine's process on a remote backend
            self.mode.close()
            # A late interrupt() must not write into whatever file reuses these numbers next.
            read_fd, write_fd = self._interrupt_r, self._interrupt_w
            self._interrupt_r = self._interrupt_w = -1
            os.close(read_fd)
            os.close(write_fd)
            if self.transcript is not None:
                self.transcript.close()
            if self._own_backend:
                self.backend.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _known_mode(name: str) -> str:
    """`name` if it is one of EXEC_MODES, else a ValueError that says what to use."""
    if name not in EXEC_MODES:
        raise ValueError(
            f"unknown exec_mode {name!r} (setting sandbox.exec_mode): use \"host\" to run "
            "scripts on this machine or \"backend\" to run them inside the backend"
        )
    return name


def _interrupt_pipe(undo: contextlib.ExitStack) -> tuple[int, int]:
    """The pipe `interrupt` writes to and a run's collect watches, both ends non-blocking."""
    read_fd, write_fd = os.pipe()
    undo.callback(os.close, read_fd)
    undo.callback(os.close, write_fd)
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    return read_fd, write_fd
