"""Path confinement: the workspace roots and whether a path a tool is given lies inside them.

The roots are the session's directory when the policy starts (the backend's cwd) plus the
configured `policy.roots`. A path is resolved the way the tool will open it: relative to the
backend's current directory, `..` collapsed, and on the local backend with symlinks followed
(`os.path.realpath`), so a link inside the workspace that points out of it is outside. A remote
backend that offers `realpath(path)` resolves there; one that does not is checked lexically
(`..` and absolute paths only): see `Workspace.exact`.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..backends.base import resolve_path

if TYPE_CHECKING:
    from ..backends.base import Backend


def real_path(path: str) -> str:
    """`os.path.realpath` in three system calls whatever the depth: the kernel follows every
    link when it opens the path (O_PATH: nothing is read, a FIFO does not block) and
    /proc/self/fd says where it ended. A path that does not exist yet (a file to write), a
    dangling link, or no /proc: `os.path.realpath`, component by component."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
    return target if target.startswith("/") else os.path.realpath(path)


class Workspace:
    """The roots of one session, resolved once; `outside(path)` per call."""

    def __init__(self, backend: Backend, extra_roots: Sequence[str] = (), read_roots: Sequence[str] = ()) -> None:
        self.backend = backend
        self._local = backend.name == "local"
        remote: Callable[[str], str] | None = getattr(backend, "realpath", None)
        self._remote_realpath = None if self._local else remote
        # Symlinks are followed where this backend can tell us where they lead.
        self.exact = self._local or self._remote_realpath is not None
        start = backend.cwd
        roots = [start, *(resolve_path(start, os.path.expanduser(r) if self._local else r) for r in extra_roots)]
        self.roots = tuple(dict.fromkeys(self._resolve_root(r) for r in roots))
        self._prefixes = tuple(r.rstrip("/") + "/" for r in self.roots)
        # Herald's own files the model is pointed at (spill files): readable on the local backend only.
        readable = tuple(os.path.realpath(r) for r in read_roots) if self._local else ()
        self._read_prefixes = self._prefixes + tuple(r.rstrip("/") + "/" for r in readable)

    def _resolve_root(self, path: str) -> str:
        if self._local:
            return os.path.realpath(path)
        if self._remote_realpath is not None:
            try:
                return self._remote_realpath(path)
            except Exception:
                return posixpath.normpath(path)
        return posixpath.normpath(path)

    def resolve(self, path: str) -> str | None:
        """Where `path` leads, or None when it cannot be told (a `~` path on a remote backend)."""
        full = resolve_path(self.backend.cwd, path)
        if full == "~" or full.startswith("~/"):
            if not self._local:
                return None
            full = os.path.expanduser(full)
        if self._local:
            return real_path(full)
        if self._remote_realpath is not None:
            try:
                return self._remote_realpath(full)
            except Exception:
                return None
        return full

    def inside(self, resolved: str, *, reading: bool = False) -> bool:
        return resolved in self.roots or resolved.startswith(self._read_prefixes if reading else self._prefixes)

    def outside(self, path: str, *, reading: bool = False) -> str | None:
        """None when `path` is inside a root (or, `reading`, a read root), else where it leads
        (for the refusal message)."""
        resolved = self.resolve(path)
        if resolved is None:
            return f"{path} (cannot be resolved on the {self.backend.name} backend)"
        return None if self.inside(resolved, reading=reading) else resolved
