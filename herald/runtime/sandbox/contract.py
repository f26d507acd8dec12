"""`SandboxChild`: what the Runtime needs of a sandbox child, wherever it runs.

Two implementations: `ChildProcess` (host/child.py: an interpreter on this machine, spawned or forked
from the fork server) and `BackendChild` (backend/child.py: an interpreter inside the backend, driven by
the backend-side supervisor over the exec channel). The Runtime talks only to this contract.

A child's life: made (and warming up) → `wait_ready` → `send` a run (a StartFrame; later CodeFrame
cells for a kernel: _sandbox/wire/frames.py) → `collect` until it exits, a kernel cell is done, or the deadline / an
interrupt kills it → `kill` (idempotent; also for a child never used).
What `collect` returns (`Collected`) is defined here, with the contract, so neither
implementation depends on the other; so is `LocalGrants`, what a backend-mode child needs of the
tools its supervisor answers itself (runtime/backend_tools.py). The error of a child that cannot
start is errors.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from ..._sandbox.wire import frames
from ..._sandbox.wire.grant import ToolGrant, ToolSpec
from ...capture import CappedCapture

Reason = Literal["exited", "done", "timeout", "interrupted"]
S_contra = TypeVar("S_contra", contravariant=True)


@dataclass
class Collected:
    reason: Reason
    exit_code: int | None = None  # from the "done" frame (kernel) or the process status
    alive: bool = False  # the child still runs (a kernel after "done")


class SandboxChild(Protocol):
    def wait_ready(self, timeout: float) -> None:
        """Block until the interpreter can take a run; SandboxStartError (with what it said) if
        it exits or does not get ready in `timeout` seconds."""

    def send(self, message: frames.StartFrame | frames.CodeFrame) -> None:
        """Hand over a run (or a kernel cell)."""

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
        """Feed the run's output to the captures until it ends. At `deadline` (monotonic), moved
        by `paused()` (the seconds the run has waited on a person's approval), or when
        `interrupt_fd` becomes readable: SIGTERM the whole tree, SIGKILL after `kill_grace`."""

    def poll(self) -> int | None:
        """The exit status once the interpreter is gone (-1 if unknown), else None."""

    def kill(self, grace: float = 0.0) -> None:
        """Stop the interpreter and everything it started (SIGTERM, `grace`, SIGKILL)."""


class LocalGrants(Protocol[S_contra]):
    """The tools a run's supervisor answers itself (runtime/backend_tools.py)."""

    def specs(self) -> dict[str, ToolSpec]:
        """The "tool_specs" of the prepare frame: the schemas of the tools a grant may name."""
        ...

    def grant(self, session: S_contra) -> ToolGrant | None:
        """The "tools" of the run's start frame (and of each kernel cell's code frame)."""
        ...

    def record(self, session: S_contra, message: frames.RecordFrame) -> None:
        """A call the supervisor answered: count and log it."""
        ...

    def cwd(self) -> str:
        """The session's directory now (the supervisor resolves paths against it)."""
        ...

    def prefetch(self) -> None:
        """Ask the backend now what the first grant needs (called while the sandbox is set up)."""
        ...

    def ran(self, session: S_contra, message: frames.CallFrame) -> dict[str, Any]:
        """A terminal call the supervisor ran whose output Herald caps: count, log, the reply."""
        ...
