"""The next sandbox child, made ahead of time so a run does not wait for one.

Policy: after a run takes the waiting child, the next one is made at once on a helper thread
(while the run goes on), so back-to-back runs find it ready and no run pays for a start-up on
its result path. A caller that has the run to hand over first (the Runtime's start frame) asks
for the next child just after that: starting the helper thread (and what it sets going: an
exec channel opening in backend mode) before the hand-over would delay it. A child that died while waiting is replaced when taken. Nothing is made once the
owner is closing; `close` kills the one that waits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)


class Child(Protocol):  # the part of runtime/sandbox/contract.py SandboxChild this needs
    def poll(self) -> int | None: ...
    def wait_ready(self, timeout: float) -> None: ...
    def kill(self, grace: float = 0.0) -> None: ...


C = TypeVar("C", bound=Child)


class WarmChildren(Generic[C]):
    """`spawn` makes a child; `enabled` False means every run spawns its own, on demand."""

    def __init__(self, spawn: Callable[[], C], *, enabled: bool) -> None:
        self._spawn = spawn
        self._enabled = enabled
        self._waiting: C | None = None
        self._making: threading.Thread | None = None
        self._closed = False

    def put(self, child: C) -> None:
        """A child made by the owner itself (a start-up probe) becomes the waiting one."""
        self._waiting = child

    def replenish(self) -> None:
        """Make the next child on a helper thread (no-op when closing, disabled, or one is
        waiting or being made already)."""
        if not self._enabled or self._closed or self._waiting is not None:
            return
        if self._making is not None and self._making.is_alive():
            return

        def make() -> None:
            try:
                self._waiting = self._spawn()
            except Exception:  # the next run spawns its own child and reports the failure
                log.exception("could not pre-spawn the next sandbox interpreter")

        self._making = threading.Thread(target=make, name="herald-warm-spawn", daemon=True)
        self._making.start()

    def _join(self) -> None:
        if self._making is not None:
            self._making.join()
            self._making = None

    def take(self, ready_timeout: float, *, replenish: bool = True) -> C:
        """A ready child for a run: the waiting one if it is alive, else a new one. The next is
        started before this returns (unless `replenish` is False: the caller calls `replenish`
        once it has handed over the run; a child spawned here starts the next one anyway)."""
        self._join()
        child, self._waiting = self._waiting, None
        if child is None or child.poll() is not None:
            if child is not None:
                child.kill()
            child = self._spawn()
            replenish = True  # this one has its own start-up to wait for: make the next meanwhile
        if replenish:
            self.replenish()
        child.wait_ready(ready_timeout)
        return child

    def drop(self) -> None:
        """Kill the waiting child (it was made for what is no longer there); the next is made on demand."""
        self._join()
        child, self._waiting = self._waiting, None
        if child is not None:
            child.kill()

    def wait_ready(self, timeout: float) -> None:
        """Block until the waiting child is ready (benchmarks and tests use it)."""
        self._join()
        if self._waiting is not None:
            self._waiting.wait_ready(timeout)

    def close(self) -> None:
        self._closed = True
        self._join()
        if self._waiting is not None:
            self._waiting.kill()
            self._waiting = None
