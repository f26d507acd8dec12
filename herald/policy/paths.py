"""Path confinement: the workspace roots and whether a path a tool is given lies inside them.

The roots are the session's directory when the policy starts (the backend's cwd) plus the
configured `policy.roots`. A path is resolved the way the tool will open it: relative to the
backend's current directory, `..` collapsed, and on the local backend with symlinks followed
(`os.path.realpath`), so a link inside the workspace that points out of it is outside. A remote
backend that offers `realpath(path)` (SSH, Docker, Modal) resolves there, links followed the
same way; one that does not is checked lexically (`..` and absolute paths only): see
`Workspace.exact`.

The check and the tool's own file operation are two steps, and a link may change in between
(a command, a process left running). Locally the window is two system calls. On a remote
backend `outside` pins each path it allows to where it led (`backend.pin`), and the backend's
read or write checks, in the same request flight or command, that it still leads there
(herald/backends/realpath.py): the rule lives here, the backend only keeps what was allowed.
Only allowed resolutions are pinned, so a concurrent check that refuses a swapped link cannot
make the swap acceptable to an operation already allowed.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._sandbox.realpaths import ReadCache, real_path
from ..backends.base import call_cwd, resolve_path

if TYPE_CHECKING:
    from ..backends.base import Backend


class Workspace:
    """The roots of one session, resolved once; `outside(path)` per call."""

    def __init__(self, backend: Backend, extra_roots: Sequence[str] = (), read_roots: Sequence[str] = ()) -> None:
        self.backend = backend
        self._local = backend.name == "local"
        remote: Callable[[str], str] | None = getattr(backend, "realpath", None)
        self._remote_realpath = None if self._local else remote
        # A remote backend that can hold its operations on a path to where it was allowed to lead.
        pin: Callable[[str, str], None] | None = getattr(backend, "pin", None)
        self._pin = pin if self._remote_realpath is not None else None
        # Symlinks are followed where this backend can tell us where they lead.
        self.exact = self._local or self._remote_realpath is not None
        start = backend.cwd
        roots = [start, *(resolve_path(start, os.path.expanduser(r) if self._local else r) for r in extra_roots)]
        self.roots = tuple(dict.fromkeys(self._resolve_root(r) for r in roots))
        self._prefixes = tuple(r.rstrip("/") + "/" for r in self.roots)
        # Herald's own files the model is pointed at (spill files): readable on the local backend only.
        readable = tuple(os.path.realpath(r) for r in read_roots) if self._local else ()
        self._read_prefixes = self._prefixes + tuple(r.rstrip("/") + "/" for r in readable)
        self._reads = ReadCache()

    def _resolve_root(self, path: str) -> str:
        if self._local:
            return os.path.realpath(path)
        if self._remote_realpath is not None:
            try:
                return self._remote_realpath(path)
            except Exception:
                return posixpath.normpath(path)
        return posixpath.normpath(path)

    def resolve(self, path: str, *, reading: bool = False) -> str | None:
        """Where `path` leads, or None when it cannot be told (a `~` path on a remote backend,
        a NUL byte). `reading`: the call only reads it (see ReadCache)."""
        return self._locate(path, reading)[1]

    def _locate(self, path: str, reading: bool) -> tuple[str, str | None]:
        """(the absolute path the tool will open, where it leads or None)."""
        if "\0" in path:
            return path, None
        full = resolve_path(call_cwd(self.backend), path)
        if full == "~" or full.startswith("~/"):
            if not self._local:
                return full, None
            full = os.path.expanduser(full)
        if self._local:
            return full, self._reads.resolve(full) if reading else real_path(full)
        if self._remote_realpath is not None:
            try:
                return full, self._remote_realpath(full)
            except Exception:
                return full, None
        return full, full

    def prefixes(self, *, reading: bool = False) -> tuple[str, ...]:
        """The roots as "/dir/" prefixes (with the read roots when `reading`): for a check made
        elsewhere with the same rule as `inside` (backend mode's supervisor)."""
        return self._read_prefixes if reading else self._prefixes

    def inside(self, resolved: str, *, reading: bool = False) -> bool:
        return resolved in self.roots or resolved.startswith(self._read_prefixes if reading else self._prefixes)

    def outside(self, path: str, *, reading: bool = False) -> str | None:
        """None when `path` is inside a root (or, `reading`, a read root), else where it leads
        (for the refusal message). On a remote backend an allowed path is pinned there: its
        reads and writes go ahead only while it still leads where it led now."""
        full, resolved = self._locate(path, reading)
        if resolved is None:
            return f"{path!r} (cannot be resolved on the {self.backend.name} backend)"
        if not self.inside(resolved, reading=reading):
            return resolved
        if self._pin is not None:
            self._pin(full, resolved)
        return None
