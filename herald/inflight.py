"""A run's cap on the bytes Herald holds at once for its tool calls in flight.

A script can make Herald hold what it sends (frames of up to 64 MiB, sixteen calls at once, more
from threads) and what its calls load (a patch holds the file, its new text and a diff). Each run
gets one `InflightBytes` (setting `sandbox.max_inflight_bytes`): a frame's bytes are taken when
its length is read, before its body is (rpc/server.py; three times its length: reading and
decoding it holds that much at the peak), a reply's before it is queued, a file a
tool loads once it is loaded (`hold_bytes`, under the call's `charged_inflight`), and all are
given back when the call ends. What does not fit is refused with `InflightLimit`, whose message
tells the script what to do: send smaller pieces, or fewer calls at once.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from ._sandbox.toolcore.base import ToolError
from .scoped import scoped

MIB = 1024 * 1024
# What a call frame holds at its peak per byte of its body: the bytes read, and decoding them
# (orjson or the stdlib alike) holds twice as much again (measured on a 60 MiB frame: 3.0).
FRAME_HELD_PER_BYTE = 3
# Frames and replies up to this size are not counted: the cap on calls at once bounds them, and
# counting them would put a lock on every small call's path.
FREE_BYTES = 64 * 1024


class InflightLimit(ToolError):
    """Holding what a call needs would pass the run's cap; the message says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "InflightLimit")


class InflightBytes:
    """The bytes a run's calls hold now, against its cap (0: no cap)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Count `size` more bytes held; False (nothing counted) when they would pass the cap."""
        with self._lock:
            if self.cap and self.held + size > self.cap:
                return False
            self.held += size
            self.peak = max(self.peak, self.held)
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.held -= size

    def refusal(self, size: int, what: str) -> str:
        """Why `what` (needing `size` bytes) was refused, and what to do instead."""
        if self.cap and size > self.cap:
            why = f"it alone needs {_mib(size)} held in Herald at once, more than this run's cap of {_mib(self.cap)}"
            instead = "Send it in smaller pieces (or work on the file with terminal commands)."
        else:
            why = (f"it needs {_mib(size)} held in Herald while this run's calls in flight already hold "
                   f"{_mib(self.held)} of the {_mib(self.cap)} allowed")
            instead = "Make fewer calls at once (or send smaller pieces), then try again."
        return (f"{what} was not run: {why} (setting sandbox.max_inflight_bytes). {instead}")


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


class CallCharge:
    """What one call has taken from its run's `InflightBytes`; given back at the call's end."""

    __slots__ = ("budget", "taken")

    def __init__(self, budget: InflightBytes) -> None:
        self.budget = budget
        self.taken = 0

    def release(self) -> None:
        taken, self.taken = self.taken, 0
        if taken:
            self.budget.give(taken)


_charge: contextvars.ContextVar[CallCharge | None] = contextvars.ContextVar("herald_inflight", default=None)


class charged_inflight:
    """`with charged_inflight(budget):` — what `hold_bytes` takes in the block counts against
    `budget` and is given back when the block ends (None: nothing is counted)."""

    __slots__ = ("_charge", "_scope")

    def __init__(self, budget: InflightBytes | None) -> None:
        self._charge = CallCharge(budget) if budget is not None else None
        self._scope = scoped(_charge, self._charge, keep_on_none=True)

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._scope.__exit__(*exc)
        if self._charge is not None:
            self._charge.release()


def hold_bytes(size: int, what: str) -> None:
    """Count `size` bytes held by the current call until it ends; InflightLimit past its run's cap.
    Outside a charged call (a direct call by the model), nothing is counted."""
    charge = _charge.get()
    if charge is None or size <= 0:
        return
    if not charge.budget.take(size):
        raise InflightLimit(charge.budget.refusal(size, what))
    charge.taken += size
