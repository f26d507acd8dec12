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
make the swap acceptable to an operation already allowed. Locally there is no window: the
policy gives each call its confinement (`confined` or `masks_only`, _sandbox/toolcore/callroots.py)
and the local backend checks it on the object it opened, after the call's locks are held.

Masks: Herald's own files (config, data: transcripts, sessions, spill files) and the credential
stores the script's isolation hides (_sandbox/confine/bwrap.py's lists, under this user's home) are
out of reach of file tools on the local backend whatever the workspace and profile. Only a
setting that names a path inside a mask lifts it below that path: an entry of `policy.roots`
(reads and writes), Herald's read roots (its spill files: reads only). On a remote backend the
system's secret stores are masked under a confining profile (its user's home is not known
here; in backend mode the supervisor adds the home's, there).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._sandbox.confine.bwrap import MASKED_DIRS, MASKED_FILES
from .._sandbox.toolcore.callroots import Confinement, secret_paths
from .._sandbox.toolcore.resolve import ReadCache, real_path
from ..backends.base import call_cwd, resolve_path

if TYPE_CHECKING:
    from ..backends.base import Backend


def local_masks(own_files: Sequence[str]) -> list[str]:
    """Every mask on this machine, as real paths: `own_files` (herald_files) and the credential stores."""
    home = os.path.realpath(os.path.expanduser("~"))
    return list(dict.fromkeys(os.path.realpath(os.path.expanduser(p)) for p in [*own_files, *secret_paths(home)]))


def _within(path: str, masks: Sequence[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in masks)


class Workspace:
    """The roots of one session, resolved once; `outside(path)` per call."""

    def __init__(self, backend: Backend, extra_roots: Sequence[str] = (), read_roots: Sequence[str] = (),
                 own_files: Sequence[str] = ()) -> None:
        self.backend = backend
        self._local = backend.name == "local"
        remote = backend.resolves_links and not self._local
        self._remote_realpath: Callable[[str], str] | None = backend.realpath if remote else None
        # A remote backend that can hold its operations on a path to where it was allowed to lead.
        self._pin: Callable[[str, str], None] | None = backend.pin if remote else None
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
        masks = local_masks(own_files) if self._local else [*MASKED_FILES, *MASKED_DIRS]
        named = self.roots[1:]  # policy.roots: a setting that names a path inside a mask lifts it there
        self.masks_only = Confinement(None, None, masks, [r for r in named if _within(r, masks)],
                                      [r for r in readable if _within(r, masks)])
        self.confined = Confinement(self._prefixes, self._read_prefixes, self.masks_only.masked,
                                    self.masks_only.unmasked, self.masks_only.unmasked_read)

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

    def locate(self, path: str, *, reading: bool = False) -> tuple[str, str | None]:
        """(the absolute path the tool will open, where it leads or None): for the masks and
        `outside` on one path without resolving it twice."""
        return self._locate(path, reading)

    def outside(self, path: str, *, reading: bool = False, located: tuple[str, str | None] | None = None) -> str | None:
        """None when `path` is inside a root (or, `reading`, a read root), else where it leads
        (for the refusal message). On a remote backend an allowed path is pinned there: its
        reads and writes go ahead only while it still leads where it led now; a system secret
        store there counts as outside."""
        full, resolved = located or self._locate(path, reading)
        if resolved is None:
            return f"{path!r} (cannot be resolved on the {self.backend.name} backend)"
        if not self.inside(resolved, reading=reading) or (
                not self._local and self.masks_only.is_masked(resolved, not reading)):
            return resolved
        if self._pin is not None:
            self._pin(full, resolved)
        return None
