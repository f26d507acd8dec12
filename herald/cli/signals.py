"""SIGINT, SIGTERM and SIGHUP stop a running script the same way: the whole tree is killed, the
Runtime closes (temp dirs and sockets removed) and herald exits 128 + the signal's number
(130, 143, 129). A second Ctrl-C raises KeyboardInterrupt (the person wants out now; the Runtime
still kills the tree as it unwinds); a repeated SIGTERM or SIGHUP only repeats the interrupt, so a
process manager's double signal never leaves the script's tree behind."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived before there was a script to interrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class StopSignals:
    """Which stop signal arrived (if any) and whom to tell: `interrupt` is set once a script runs."""

    interrupt: Callable[[], None] | None = None
    signum: int | None = None

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    state = StopSignals()
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handler(signum: int, frame: FrameType | None) -> None:
        state.signum = signum
        if signum == signal.SIGINT:
            signal.signal(signum, previous[signum])
        if state.interrupt is None:
            raise Stopped(signum)  # nothing runs yet: unwind, closing what was opened
        state.interrupt()

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield state
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
