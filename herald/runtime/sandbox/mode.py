"""`ExecutionMode`: where a Runtime's scripts run, as the one object the Runtime asks.

Two implementations: `HostMode` (host/mode.py: the script on this machine, under the isolation
resolved here, forked from the process's fork server) and `BackendMode` (backend/mode.py: the
script inside the backend, driven by a supervisor there over an exec channel). The Runtime picks
one when it is made and leaves every step that differs between them to it: the sandbox directory
and the RPC socket's place, the isolation results report, where a script starts, making a child
and the first one, a child that could not start, and closing.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from .contract import SandboxChild
from .errors import SandboxStartError
from .isolation import Isolation

S_contra = TypeVar("S_contra", contravariant=True)


class Spares(Protocol):
    """What a mode needs of the Runtime's ready children (runtime/warm.py WarmChildren)."""

    def put(self, child: SandboxChild) -> None: ...
    def replenish(self) -> None: ...
    def drop(self) -> None: ...


class ExecutionMode(Protocol[S_contra]):
    """One Runtime's way of running scripts; `S_contra` is what a run's token is bound to."""

    name: str  # "host" | "backend" (setting sandbox.exec_mode)
    sandbox_dir: str  # hermes_tools.py and the _hermes_runtime package here (sandboxdir.py)
    socket_dir: str | None  # where the RPC socket must be for the script to reach it; None: anywhere

    @property
    def isolation(self) -> Isolation:
        """The isolation in force, for results and `herald doctor` (in backend mode as the
        backend's probe settled it, once reached)."""
        ...

    def script_cwd(self) -> str:
        """Where a script starts (every start frame's "cwd")."""
        ...

    def before_reply(self, session: S_contra) -> bytes:
        """What goes to a script just before Herald's reply to one of its calls over the RPC
        socket (host mode: a moved session directory, when the script answers reads itself)."""
        ...

    def spawn(self) -> SandboxChild:
        """A new child, warming up."""
        ...

    def warm_up(self, spares: Spares) -> None:
        """The Runtime is made: check what a run will need and have the first child made
        (SandboxStartError when a setting must be fixed first)."""
        ...

    def recover(self, error: SandboxStartError, spares: Spares) -> bool:
        """A child could not start with `error`: whether its cause is undone (and the children
        made for it dropped), so that a new child may be taken."""
        ...

    def begin_close(self) -> None:
        """The Runtime is closing: called before its children are killed."""
        ...

    def close(self) -> None:
        """Release what the mode holds (after the children and the tools' resources are closed)."""
        ...
