"""Host mode: the script runs on this machine, in a child interpreter under the isolation
resolved here (isolation.py), spawned or forked from the process's fork server (zygote.py).

Its sandbox directory lies under the process's shared root, the one directory every isolated
script sees, and so does the RPC socket. On the local backend the script's process answers
`read_file` itself (runtime/backend_tools.py), under the paths it sees as Herald does.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

from ...._sandbox.procs.environ import sandbox_environ
from ....backends.base import Backend
from ....config import Settings
from ....keys import herald_environ
from ....tools.registry import Tool
from .. import isolation
from ..contract import LocalGrants
from ..errors import SandboxStartError
from ..isolation import Isolation
from ..mode import Spares
from ..sandboxdir import make_sandbox_dir
from . import zygote
from .child import ChildProcess, check_interpreter

S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)


class ScriptTools(LocalGrants[S_contra], Protocol[S_contra]):
    """The reads a host-mode script's own process answers (runtime/backend_tools.py)."""

    def cwd_frame(self, session: S_contra) -> bytes:
        """A CWD frame when the session's directory moved since the script was told, else b""."""
        ...


class HostMode(Generic[S]):
    """Scripts on this machine (see the module's docstring)."""

    name = "host"

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        stubs: Iterable[Tool],
        elsewhere: Mapping[str, str] | None,
        lookup: Callable[[str], S | None],
        *,
        writable_workspace: bool,
        tools_in_script: Callable[[Isolation], ScriptTools[S]],
    ) -> None:
        """`lookup`: a run's token to its session; `tools_in_script`: the reads the script's
        process answers, under `isolation`'s view (used on the local backend, with the setting
        sandbox.backend_tools)."""
        self._settings = settings
        self._backend = backend
        self._lookup = lookup
        self.socket_dir: str | None = isolation.shared_root()
        with contextlib.ExitStack() as undo:
            self.sandbox_dir = make_sandbox_dir(stubs, elsewhere, host_mode=True)
            undo.callback(shutil.rmtree, self.sandbox_dir, ignore_errors=True)
            self._env = sandbox_environ(herald_environ(), settings.sandbox.env_passthrough)
            with isolation.as_start_error():
                self.isolation = isolation.resolve(settings, self.script_cwd(), settings.sandbox.python,
                                                   writable_workspace=writable_workspace)
            self._env.update(self.isolation.child_environ())
            on_these_files = backend.name == "local" and settings.sandbox.backend_tools
            self._tools = tools_in_script(self.isolation) if on_these_files else None
            self._forks: zygote.Lease | None = None
            if settings.sandbox.fork_server:
                self._forks = zygote.Lease(settings.sandbox.python, self._env, self.isolation)
            undo.pop_all()

    def script_cwd(self) -> str:
        """The script's own open() sees this machine: it starts where the local backend's shell
        is, or in the sandbox directory when the backend is remote."""
        return self._backend.cwd if self._backend.name == "local" else self.sandbox_dir

    def before_reply(self, session: S) -> bytes:
        return self._tools.cwd_frame(session) if self._tools is not None else b""

    def spawn(self) -> ChildProcess:
        server = self._forks.server() if self._forks is not None else None
        return ChildProcess(self._settings.sandbox.python, self.sandbox_dir, self._env, forkserver=server,
                            isolation=self.isolation, tools=self._tools, lookup=self._lookup)

    def warm_up(self, spares: Spares) -> None:
        """The interpreter exists; the first warm child starts in the background (no wait here)."""
        check_interpreter(self._settings.sandbox.python)
        spares.replenish()

    def recover(self, error: SandboxStartError, spares: Spares) -> bool:
        return False  # nothing here goes away under a waiting child

    def begin_close(self) -> None:
        pass

    def close(self) -> None:
        try:
            if self._forks is not None:
                self._forks.close()
        finally:
            shutil.rmtree(self.sandbox_dir, ignore_errors=True)
