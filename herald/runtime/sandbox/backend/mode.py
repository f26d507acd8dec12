"""Backend mode: the script runs inside the backend (README "Where the script runs"), one
`BackendChild` per run on an exec channel, from the Runtime's `BackendSandbox` there (sandbox.py:
the backend's python, the private directory the sandbox files are unpacked into, the pool that
serves the calls arriving over the channels).

The sandbox directory here is a copy of its own, shipped to the backend; the RPC socket is not
the script's (its supervisor relays its calls over the channel). A directory there swept while
the connection that owned it was down (_sandbox/procs/owners.py) is prepared again, once per
start (`recover`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, TypeVar

from ....backends.base import Backend
from ....config import Settings
from ....inflight import InflightBytes
from ....tools.registry import Tool
from ...rpc.server import Handler
from .. import isolation
from ..contract import LocalGrants, SandboxChild
from ..errors import SandboxStartError
from ..isolation import Isolation
from ..mode import Spares
from ..sandboxdir import make_sandbox_dir
from .sandbox import BackendPythonError, BackendSandbox
from .setup import RemoteDirGone

S = TypeVar("S")
log = logging.getLogger(__name__)


class BackendMode(Generic[S]):
    """Scripts inside the backend (see the module's docstring)."""

    name = "backend"

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        stubs: Iterable[Tool],
        elsewhere: Mapping[str, str] | None,
        lookup: Callable[[str], S | None],
        *,
        writable_workspace: bool,
        serve: Handler[S],
        tools_beside: Callable[[], LocalGrants[S]],
        inflight: Callable[[S], InflightBytes | None],
    ) -> None:
        """`lookup`: a run's token to its session; `serve`: one of its calls, answered by
        Herald; `tools_beside`: the tools its supervisor answers itself (used with the setting
        sandbox.backend_tools); `inflight`: a run's cap on bytes held for its calls."""
        self._settings = settings
        self._backend = backend
        self.socket_dir: str | None = None
        with isolation.as_start_error():
            asked = isolation.backend_request(settings, backend, writable_workspace)
        with contextlib.ExitStack() as undo:
            self.sandbox_dir = make_sandbox_dir(stubs, elsewhere, host_mode=False)
            undo.callback(shutil.rmtree, self.sandbox_dir, ignore_errors=True)
            tools = tools_beside() if settings.sandbox.backend_tools else None
            self.sandbox: BackendSandbox[S] = BackendSandbox(
                backend, settings, Path(self.sandbox_dir), lookup, serve, tools, asked, inflight=inflight
            )
            undo.pop_all()

    @property
    def isolation(self) -> Isolation:
        """As the backend's probe settled it (sandbox.py), once the backend was reached."""
        return self.sandbox.isolation

    def script_cwd(self) -> str:
        """Where the backend's shell is, wherever that is."""
        return self._backend.cwd

    def before_reply(self, session: S) -> bytes:
        return b""  # the script's calls come over its channel, not the RPC socket

    def spawn(self) -> SandboxChild:
        return self.sandbox.spawn()

    def warm_up(self, spares: Spares) -> None:
        """With warm start, the first child now: it probes the backend's python, so a setting to
        fix fails here, not in a run; a backend that cannot be reached yet is left to the first run."""
        if not self._settings.sandbox.warm:
            return
        try:
            spares.put(self.spawn())
        except SandboxStartError as exc:
            if isinstance(exc, BackendPythonError):  # a setting to fix, not a host to wait for
                raise
            log.warning("%s", exc)  # the first run tries again, and says what failed

    def recover(self, error: SandboxStartError, spares: Spares) -> bool:
        """The directory there was swept: the children made for it go, and the next spawn
        prepares a new one."""
        if not isinstance(error, RemoteDirGone):
            return False
        spares.drop()
        self.sandbox.forget_dir()
        return True

    def begin_close(self) -> None:
        self.sandbox.begin_close()  # before its children go: one of them may take its directory along

    def close(self) -> None:
        try:
            self.sandbox.close()
        finally:
            shutil.rmtree(self.sandbox_dir, ignore_errors=True)
