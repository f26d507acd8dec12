"""When a long tool call must be over: its `timeout` argument, or the moment its caller stops it.

Stdlib only, Python >= 3.8 (the sandbox package). A tool with a `timeout` parameter gets it cut
to the time the run that made the call has left (by Herald's dispatcher, or in backend mode by
the supervisor from its grant), and the run's end sets the call's cancel event. `Deadline` joins
the two, so a tool that works in steps (a search going file by file, a command after a command)
asks one object whether to go on.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from .base import ToolError


class Deadline:
    """`seconds` from now, or sooner once `cancel` is set; `expired_error` says what to do."""

    def __init__(self, tool: str, seconds: float, advice: str, cancel: Optional[threading.Event] = None) -> None:
        self.tool = tool
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.advice = advice
        self.cancel = cancel

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def over(self) -> bool:
        return self.cancelled or self.left() <= 0

    def check(self) -> None:
        """Raise `expired_error()` once the time is up or the call was cancelled."""
        if self.over():
            raise self.expired_error()

    def expired_error(self) -> ToolError:
        if self.cancelled:
            return ToolError(
                "%s: stopped: the run that made this call is over (interrupted or out of time)." % self.tool,
                "Interrupted",
            )
        return ToolError(
            "%s: stopped after %s s, its time limit. %s" % (self.tool, format(self.seconds, "g"), self.advice),
            "Timeout",
        )
