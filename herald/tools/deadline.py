"""When a long tool call must be over: its `timeout` argument, or the moment its caller stops it.

A tool with a `timeout` parameter gets it cut by the dispatcher to the time the run that made
the call has left (a direct call keeps the tool's default), and the run's end sets the call's
cancel event (`current_cancel()`). `Deadline` joins the two, so a tool that works in steps (a
search going file by file, a command after a command) asks one object whether to go on.
"""

from __future__ import annotations

import threading
import time

from ..backends.shell import current_cancel
from .registry import ToolError


class Deadline:
    """`seconds` from now, or sooner if the call is cancelled; `expired_error` says what to do."""

    def __init__(self, tool: str, seconds: float, advice: str) -> None:
        self.tool = tool
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.advice = advice
        self.cancel: threading.Event | None = current_cancel()

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
            return ToolError(f"{self.tool}: stopped: the run that made this call is over (interrupted or out of time).", "Interrupted")
        return ToolError(f"{self.tool}: stopped after {self.seconds:g} s, its time limit. {self.advice}", "Timeout")
