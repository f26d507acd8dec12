"""A run's tool-call budget, as each process that counts it keeps it (`CallBudget`).

Stdlib only, Python >= 3.8 (the sandbox package). Three places count a run's calls, each its
own: Herald's CallScope (runtime/scope.py) every call it serves and every record of a call
answered next to the script; a supervisor's LocalTools every allowed call it sees
(beside/localtools.py); a host-mode script's SelfServe every allowed call it makes (child/selfserve.py).
They count with this one type, so "past the budget" means the same everywhere.
"""

from __future__ import annotations

import threading


class CallBudget:
    """How many calls a run may make, and how many it has made. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Count a call if the budget has room for it; False (and not counted) when it has none."""
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def count(self) -> None:
        """Count a call that was made whatever the budget says (one answered elsewhere)."""
        with self._lock:
            self.used += 1

    @property
    def spent(self) -> bool:
        """No call is left."""
        return self.used >= self.limit

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)
