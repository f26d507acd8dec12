"""The current tool call's deadline: when the run that made it must be over.

The dispatcher sets it around every call a script makes (the run's deadline, moved by the time a
person took to approve) and around a direct call that has one. Any tool that waits (a browser
navigation, a web fetch, an MCP call, a lock) asks `time_left()` and waits no longer, so every
call of a run ends by the run's deadline whatever it does. The deadline may be live (a function
read at each ask): while a person is asked to approve a call, the run's deadline moves on with
the clock, and every call of the run sees it move.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable

from .scoped import scoped

# A time.monotonic() value, or a function giving it now (None: no deadline).
Deadline = float | Callable[[], float | None] | None
_deadline: contextvars.ContextVar[Deadline] = contextvars.ContextVar("herald_call_deadline", default=None)


class DeadlinePassed(TimeoutError):
    """The run's deadline has passed: the call must stop now (its message says so for the model)."""


def call_deadline(deadline: Deadline) -> scoped[Deadline]:
    """`with call_deadline(t):` — calls in the block end by `t` (time.monotonic(), or a function
    returning it when asked); None leaves whatever deadline is already in force."""
    return scoped(_deadline, deadline, keep_on_none=True)


def current_deadline() -> float | None:
    """The monotonic time the current call must end by, or None when it has no deadline."""
    deadline = _deadline.get()
    return deadline() if callable(deadline) else deadline


def time_left(limit: float | None = None) -> float | None:
    """Seconds the current call may still take: `limit` cut to what is left before the deadline
    (never below 0); `limit` itself when there is no deadline (None: no limit at all)."""
    deadline = current_deadline()
    if deadline is None:
        return limit
    left = max(0.0, deadline - time.monotonic())
    return left if limit is None else min(limit, left)


def check_deadline(what: str) -> None:
    """Raise DeadlinePassed when the current call's deadline has passed (before starting `what`)."""
    deadline = current_deadline()
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlinePassed(f"the run's time limit was reached before {what} could start")
