"""The iteration budget: how many model turns a run may take.

Every model call consumes one turn. A turn whose only tool call was `execute_code` is refunded:
a script that does fifty tool calls is the behaviour Herald wants to encourage, so it should not
cost more than one direct call. Refunds cannot make a run endless: the total number of model
calls is capped at `HARD_CAP_FACTOR` times the budget.
"""

from __future__ import annotations

import threading

HARD_CAP_FACTOR = 3


class IterationBudget:
    def __init__(self, max_turns: int) -> None:
        self.max_turns = max(1, max_turns)
        self.hard_cap = self.max_turns * HARD_CAP_FACTOR
        self.used = 0  # turns charged (after refunds)
        self.calls = 0  # model calls made
        self.refunded = 0
        self._lock = threading.Lock()

    def consume(self) -> bool:
        """Charge one turn; False (and nothing charged) when the budget or the cap is spent."""
        with self._lock:
            if self.used >= self.max_turns or self.calls >= self.hard_cap:
                return False
            self.used += 1
            self.calls += 1
            return True

    def refund(self) -> None:
        with self._lock:
            if self.used > 0:
                self.used -= 1
                self.refunded += 1

    @property
    def remaining(self) -> int:
        with self._lock:
            return max(0, min(self.max_turns - self.used, self.hard_cap - self.calls))

    def describe(self) -> str:
        return (
            f"{self.used}/{self.max_turns} turns charged, {self.calls} model calls"
            + (f", {self.refunded} execute_code turns refunded" if self.refunded else "")
        )
