"""A run's view of the tools (`CallScope`): its allow-list budget, deadline, cancel event, caps,
and the calls of it running now, which `stop` ends when the run is over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._sandbox.beside.budget import CallBudget
from ..inflight import InflightBytes
from ..policy.budgets import Budgets
from ..spill import SpillBudget

log = logging.getLogger(__name__)
# How long the end of a run waits for its cancelled calls to return: those that honour their
# cancel event or deadline (terminal, lock waits, MCP, ...) are gone within a poll or two.
STOP_CALLS_SECONDS = 0.5
# Error types of a script's calls that Herald refused to run (ExecutionResult.refused_calls).
REFUSALS = frozenset({"ToolCallLimit", "BudgetExhausted", "PolicyRefused"})


@dataclass
class CallScope:
    """One script run's (or kernel session's) view of the tools: allow-list and call budget."""

    run_id: str
    max_calls: int
    deadline: float | None = None  # time.monotonic() at which the run is stopped
    refused: int = 0  # calls refused past `max_calls`
    # Calls refused for another reason, by error type (BudgetExhausted, PolicyRefused): the
    # result says how many of the script's calls did not run, in a field it can check.
    refusals: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set when the run is over (interrupted, timed out): calls still running are asked to stop.
    cancel: threading.Event = field(default_factory=threading.Event)
    spill: SpillBudget | None = None  # what its spill files (output, tool calls) may still take
    budgets: Budgets | None = None  # reply bytes, tool seconds, web calls, ... (policy/budgets.py)
    # Bytes its calls in flight hold in Herald (frames, arguments, replies, loaded files), capped.
    inflight: InflightBytes | None = None
    # Seconds of the wait on a person going on now (PausedTime.begin sets it): the run's kill
    # clock moves on meanwhile, and so does `live_deadline`.
    pausing: Callable[[], float] | None = None
    running: int = 0  # calls of this scope the dispatcher is running now (`stop` waits for them)

    def __post_init__(self) -> None:
        self._idle = threading.Condition(self.lock)
        # Every call of the run: those Herald serves and those answered next to the script.
        self.budget = CallBudget(self.max_calls)

    @property
    def calls(self) -> int:
        """The calls counted so far."""
        return self.budget.used

    def take(self, past_budget: bool = False) -> bool:
        """Count a call; False (and counted as refused) past the budget, or when the script's
        side already counted it past (`past_budget`: its answers' records may still be on the way).
        A call taken counts as running until `done`."""
        with self.lock:
            if past_budget or not self.budget.take():
                self.refused += 1
                return False
            self.running += 1
            return True

    def count_refusal(self, kind: str) -> None:
        """A call of this run was refused (`kind`: its error type) after `take` let it through."""
        with self.lock:
            self.refusals[kind] = self.refusals.get(kind, 0) + 1

    @property
    def refused_calls(self) -> int:
        """Every call of this run that Herald refused: past the call limit, a budget, the policy."""
        with self.lock:
            return self.refused + sum(self.refusals.values())

    def done(self) -> None:
        """A call `take` let through has ended (whatever it returned)."""
        with self.lock:
            self.running -= 1
            if not self.running and self.cancel.is_set():
                self._idle.notify_all()

    def live_deadline(self) -> float | None:
        """The run's deadline as of now: moved by the approval being waited on, if any."""
        deadline, pausing = (
            self.deadline,
            self.pausing,
        )  # deadline first: a wait ending between the two reads errs early
        if deadline is None:
            return None
        return deadline + pausing() if pausing is not None else deadline

    def stop(self, wait: float) -> bool:
        """The run is over: cancel its calls (those not started are refused, running ones asked
        to stop) and wait up to `wait` seconds for every one to have returned. False when some
        still run (a tool that honours neither its cancel event nor its deadline)."""
        self.cancel.set()
        end = time.monotonic() + wait
        with self.lock:
            while self.running:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True


def stop_calls(scope: CallScope, wait: float = STOP_CALLS_SECONDS) -> None:
    """End a run's calls (`CallScope.stop`), and say so in the log when one would not stop."""
    if not scope.stop(wait):
        log.warning("%s: %d tool call(s) still running %.1f s after the run ended; they were asked to stop",
                    scope.run_id, scope.running, wait)
