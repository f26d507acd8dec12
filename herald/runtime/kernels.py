"""Kernel sessions: `execute(code, session="name")` keeps one child and its globals across runs.

Policy:
- A session's child is taken from the Runtime's ready children on its first run and told to
  stay (a "kernel" start frame with a sentinel that ends each cell's output); each later run
  sends it the next cell.
- Its token lives as long as the session; each cell gets a new call scope (budget, deadline,
  spill) under that token, and when the cell ends, calls it left running stop and later ones are
  refused.
- A timeout, interrupt or crash kills the child; the next run starts a fresh one and its result
  says the state was lost, as does `reset=True`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .._sandbox.wire.frames import CODE, StartFrame
from ..config import Settings
from ..policy.approvals import PausedTime
from .dispatcher import Dispatcher
from .outcome import OutputListener, build_result, capture_streams
from .sandbox.contract import SandboxChild
from .sandbox.result import ExecutionResult
from .scope import stop_calls
from .tokens import RunToken, RunTokens


@dataclass
class _Kernel:
    child: SandboxChild
    token: str
    grant: RunToken
    sentinel: bytes


class KernelSessions:
    """The named kernel sessions of one Runtime (not thread-safe: the Runtime serialises runs)."""

    def __init__(
        self,
        *,
        start_run: Callable[[StartFrame], SandboxChild],
        grants: RunTokens,
        dispatcher: Dispatcher,
        start_fields: Callable[[], StartFrame],
    ) -> None:
        self._start_run = start_run  # a ready child that has taken the start frame (Runtime._start_run)
        self._grants = grants
        self._dispatcher = dispatcher
        self._start_fields = start_fields  # what every start frame carries: socket, cwd, max_parallel
        self._kernels: dict[str, _Kernel] = {}

    def child(self, name: str) -> SandboxChild:
        """The child of session `name` (KeyError: no such session)."""
        return self._kernels[name].child

    def names(self) -> list[str]:
        return list(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)

    def run(
        self, code: str, name: str, *, reset: bool, timeout: float, max_calls: int, budgets: Mapping[str, float],
        on_output: OutputListener | None, settings: Settings, interrupt_fd: int, paused: PausedTime,
    ) -> ExecutionResult:
        started = time.monotonic()
        lost = False
        kernel = self._kernels.get(name)
        if kernel is not None and (reset or kernel.child.poll() is not None):
            lost = True  # died since the last run, or reset: either way its variables are gone
            self.stop(name)
            kernel = None
        if kernel is None:
            kernel = self._start(name)
        scope = self._dispatcher.new_scope(max_calls, deadline=started + timeout, budgets=budgets)
        kernel.grant.scope = scope
        paused.begin(scope)
        stdout, stderr = capture_streams(settings, scope, on_output)
        try:
            kernel.child.send({"type": CODE, "code": code, "line_buffered": on_output is not None})
            collected = kernel.child.collect(
                stdout,
                stderr,
                deadline=started + timeout,
                interrupt_fd=interrupt_fd,
                kill_grace=settings.sandbox.kill_grace,
                sentinel=kernel.sentinel,
                paused=paused.seconds,
            )
        finally:
            scope.cancel.set()  # the cell is over: calls it left running stop, later ones are refused
            stdout.close()
            stderr.close()
            stop_calls(scope)
            rolled_back = self._dispatcher.transactions.end_run(scope)  # what the cell left open in a transaction
        if not collected.alive:
            self.stop(name)
        return build_result(collected, scope, stdout, stderr, started, timeout, session=name,
                            state_lost=lost or not collected.alive, more_notes=rolled_back)

    def _start(self, name: str) -> _Kernel:
        token, grant = self._grants.issue(self._dispatcher.new_scope(0))
        sentinel = f"\0__HERALD_KERNEL_{secrets.token_hex(8)}__\0"
        frame = self._start_fields()
        frame["mode"], frame["token"], frame["sentinel"] = "kernel", token, sentinel
        try:
            child = self._start_run(frame)
        except BaseException:
            self._grants.revoke(token, grant)
            raise
        kernel = _Kernel(child, token, grant, sentinel.encode("ascii"))
        self._kernels[name] = kernel
        return kernel

    def stop(self, name: str) -> None:
        kernel = self._kernels.pop(name, None)
        if kernel is not None:
            self._grants.revoke(kernel.token, kernel.grant)
            kernel.child.kill()

    def close(self) -> None:
        for name in list(self._kernels):
            self.stop(name)
