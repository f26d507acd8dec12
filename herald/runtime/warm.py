"""The next sandbox child, made ahead of time so a run does not wait for one.

Policy: after a run takes the waiting child, the next one is made at once on a helper thread
(while the run goes on), so back-to-back runs find it ready and no run pays for a start-up on
its result path. A caller that has the run to hand over first (the Runtime's start frame) asks
for the next child just after that: what the helper sets going (a fork, an exec channel
opening in backend mode) would delay the hand-over. The helper is one thread for the owner's
life, woken for each child: starting a thread per child made the run wait for the new thread
to be scheduled (`Thread.start` waits until it runs), about a sixth of a warm `print(1)` on a
busy 2-core machine. A child that died while waiting is replaced when taken. Nothing is made
once the owner is closing; `close` kills the one that waits and ends the helper.
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
        self._cond = threading.Condition(threading.Lock())
        self._wanted = False  # a child was asked for and the helper has not started on it
        self._busy = False  # the helper is making one
        self._helper: threading.Thread | None = None
        self._closed = False

    def put(self, child: C) -> None:
        """A child made by the owner itself (a start-up probe) becomes the waiting one."""
        self._waiting = child

    def replenish(self) -> None:
        """Have the helper make the next child (no-op when closing, disabled, or one is waiting
        or being made already)."""
        if not self._enabled or self._closed or self._waiting is not None:
            return
        with self._cond:
            if self._wanted or self._busy or self._closed:
                return
            self._wanted = True
            if self._helper is None or not self._helper.is_alive():
                self._helper = threading.Thread(target=self._help, name="herald-warm-spawn", daemon=True)
                self._helper.start()  # once per owner, unless it died (of what only a thread can die of)
            else:
                self._cond.notify()

    def _help(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._wanted and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    self._wanted, self._busy = False, True
                child: C | None = None
                try:
                    child = self._spawn()
                except Exception:  # the next run spawns its own child and reports the failure
                    log.exception("could not pre-spawn the next sandbox interpreter")
                finally:
                    with self._cond:
                        if child is not None and self._closed:
                            child.kill()
                        elif child is not None:
                            self._waiting = child
                        self._busy = False
                        self._cond.notify_all()
        finally:  # however it ends, nobody waits for it any more (a later replenish starts another)
            with self._cond:
                self._wanted = self._busy = False
                self._cond.notify_all()

    def _join(self) -> None:
        """Wait until no child is asked for or being made."""
        with self._cond:
            while self._busy or (self._wanted and not self._closed):
                self._cond.wait()

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
        with self._cond:
            self._closed = True
            self._wanted = False
            self._cond.notify_all()
        self._join()
        if self._waiting is not None:
            self._waiting.kill()
            self._waiting = None
        helper = self._helper
        if helper is not None and helper is not threading.current_thread():
            helper.join()
