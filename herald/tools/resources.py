"""What a tool call touches, and the locks that keep calls that touch the same thing apart.

A tool declares a function from its (bound) arguments to the `Resource`s a call touches:
`file:<absolute path>`, `shell` (the session's persistent shell), `browser` (the session's page),
`tool:<name>` (tool-wide state such as the todo list). A read is `shared`: reads of one resource
run together; a change runs alone. Two users ask the same question, `conflicts`:

- the Dispatcher, before running a call, takes one lock per resource (`KeyedLocks`), so two
  script threads patching one file take turns while reads and other files run at once;
- the agent, given several direct calls in one turn, runs them concurrently only when no two
  conflict; there a path conflicts with any path inside it (a search of `src/` and a write to
  `src/a.py`), since the calls must also appear to run in the order the model gave them.

A tool that declares nothing touches nothing shared and runs alongside anything.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.base import call_cwd, resolve_path
from ..deadlines import time_left

if TYPE_CHECKING:
    from .context import ToolContext

# Everything a shell command or a script may change: conflicts with every file.
ANY_FILE = "file:/"
SHELL = "shell"
BROWSER = "browser"
SANDBOX = "sandbox"


@dataclass(frozen=True, order=True)
class Resource:
    key: str
    shared: bool = False  # a read: runs alongside other reads of the same key


ResourceFn = Callable[[dict[str, Any], "ToolContext"], Iterable[Resource]]


def file_at(ctx: ToolContext, path: Any, *, shared: bool = False) -> Resource:
    """The file (or directory) `path` names, resolved against the session's directory; an
    unusable path is the whole tree (the call then conflicts with every file call)."""
    if not isinstance(path, str) or not path.strip():
        return Resource(ANY_FILE, shared)
    return Resource("file:" + resolve_path(call_cwd(ctx.backend), path), shared)


def path_argument(name: str = "path", *, shared: bool = False, default: str | None = None) -> ResourceFn:
    """A tool that touches the one file named by its `name` argument."""

    def touches(args: dict[str, Any], ctx: ToolContext) -> list[Resource]:
        return [file_at(ctx, args.get(name, default), shared=shared)]

    return touches


def fixed(*keys: str, shared: bool = False) -> ResourceFn:
    """A tool that always touches the same resources (`shell`, `browser`, ...)."""
    resources = [Resource(key, shared) for key in keys]
    return lambda args, ctx: resources


def tool_wide(name: str) -> ResourceFn:
    """A tool whose calls all touch one piece of state: one call at a time."""
    return fixed(f"tool:{name}")


def _overlap(a: str, b: str) -> bool:
    if a == b:
        return True
    if not (a.startswith("file:") and b.startswith("file:")):
        return False
    a, b = posixpath.normpath(a[5:]), posixpath.normpath(b[5:])
    if a == "/" or b == "/":  # "~/x" is left to the backend to expand: still inside "/"
        return True
    return a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def conflicts(a: Iterable[Resource], b: Iterable[Resource]) -> bool:
    """Whether two calls touching `a` and `b` must not run at once (or out of order): some
    resource of one overlaps one of the other's, and not both only read it."""
    b = list(b)
    return any(_overlap(x.key, y.key) and not (x.shared and y.shared) for x in a for y in b)


class KeyedLocks:
    """A readers-writer lock per resource key, made on first use and dropped when free.

    `hold` takes every key of a call at once (all or none, so two calls never each hold what the
    other waits for); `cancel`, when set while waiting, gives up and `hold` yields False, and
    so does the current call's deadline (herald/deadlines.py) passing while it waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers: dict[str, int] = {}
        self._writers: set[str] = set()
        self._waiting = 0  # callers waiting for a key: only then does a release notify

    def _free(self, resource: Resource) -> bool:
        if resource.key in self._writers:
            return False
        return resource.shared or not self._readers.get(resource.key)

    def hold(self, resources: Iterable[Resource], cancel: threading.Event | None = None,
             poll: float = 0.1) -> _Hold:
        """`with locks.hold(resources) as held:` runs the block holding them (held is True), or,
        cancelled while waiting, without them (held is False)."""
        return _Hold(self, _merge(resources), cancel, poll)

    def _take(self, wanted: list[Resource], cancel: threading.Event | None, poll: float) -> bool:
        with self._cond:
            if not all(self._free(r) for r in wanted):
                self._waiting += 1
                try:
                    while not all(self._free(r) for r in wanted):
                        if cancel is not None and cancel.is_set():
                            return False
                        wait = time_left(poll if cancel is not None else None)
                        if wait is not None and wait <= 0:  # the run's deadline passed meanwhile
                            return False
                        self._cond.wait(wait)
                finally:
                    self._waiting -= 1
            for r in wanted:
                if r.shared:
                    self._readers[r.key] = self._readers.get(r.key, 0) + 1
                else:
                    self._writers.add(r.key)
        return True

    def _release(self, wanted: list[Resource]) -> None:
        with self._cond:
            for r in wanted:
                if r.shared:
                    left = self._readers[r.key] - 1
                    if left:
                        self._readers[r.key] = left
                    else:
                        del self._readers[r.key]
                else:
                    self._writers.discard(r.key)
            if self._waiting:
                self._cond.notify_all()


class _Hold:
    """What `KeyedLocks.hold` returns (a class, not a generator: it is on every call's path)."""

    __slots__ = ("_cancel", "_held", "_locks", "_poll", "_wanted")

    def __init__(self, locks: KeyedLocks, wanted: list[Resource], cancel: threading.Event | None, poll: float) -> None:
        self._locks, self._wanted, self._cancel, self._poll = locks, wanted, cancel, poll
        self._held = False

    def __enter__(self) -> bool:
        # Most calls touch nothing shared: no lock to take on the hot path.
        self._held = not self._wanted or self._locks._take(self._wanted, self._cancel, self._poll)
        return self._held

    def __exit__(self, *exc: object) -> None:
        if self._held and self._wanted:
            self._locks._release(self._wanted)


def _merge(resources: Iterable[Resource]) -> list[Resource]:
    """One entry per key; a key both read and changed by the same call is changed."""
    if isinstance(resources, list) and len(resources) <= 1:
        return resources  # the usual call: one file, one key
    modes: dict[str, bool] = {}
    for r in resources:
        modes[r.key] = modes.get(r.key, True) and r.shared
    return [Resource(key, shared) for key, shared in sorted(modes.items())]
