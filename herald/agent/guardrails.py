"""Loop guardrails: stop a model from repeating itself.

Two patterns, both keyed by (tool, canonical JSON of the arguments):
- the same call failing again and again;
- a read-only call returning the very same result again and again (no progress).
At `warn_after` repetitions the result gets a note telling the model to change course; from
`block_after` on, the call is not run and the model gets an error saying why. A success resets
the failure count of that call; a different result, or any successful call that may change
things (not read-only), resets the repeat counts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Literal

Action = Literal["allow", "warn", "block"]


def signature(tool: str, args: dict[str, Any]) -> str:
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return tool + ":" + hashlib.sha256(canonical.encode("utf-8", "backslashreplace")).hexdigest()


@dataclass(frozen=True)
class GuardDecision:
    action: Action
    message: str = ""
    count: int = 0

    @property
    def allows_execution(self) -> bool:
        return self.action != "block"


ALLOW = GuardDecision("allow")


@dataclass
class _Track:
    failures: int = 0
    repeats: int = 0  # consecutive identical results of a read-only call
    last_result: str | None = None


class LoopGuard:
    def __init__(self, *, warn_after: int = 2, block_after: int = 4) -> None:
        self.warn_after = max(1, warn_after)
        self.block_after = max(self.warn_after + 1, block_after)
        self._tracks: dict[str, _Track] = {}
        self._lock = threading.Lock()

    def before_call(self, tool: str, args: dict[str, Any]) -> GuardDecision:
        with self._lock:
            track = self._tracks.get(signature(tool, args))
        if track is None:
            return ALLOW
        if track.failures >= self.block_after - 1:
            return GuardDecision(
                "block",
                f"Blocked: {tool} was called with these exact arguments {track.failures} times and failed "
                "every time, so Herald did not run it again. Read the earlier error, then change the "
                "arguments or take a different approach.",
                track.failures + 1,
            )
        if track.repeats >= self.block_after - 1:
            return GuardDecision(
                "block",
                f"Blocked: {tool} with these exact arguments already returned the same result "
                f"{track.repeats} times; running it again cannot tell you anything new. Use the "
                "result you have, or call something else.",
                track.repeats + 1,
            )
        return ALLOW

    def after_call(
        self, tool: str, args: dict[str, Any], result: str, *, failed: bool, read_only: bool
    ) -> GuardDecision:
        key = signature(tool, args)
        with self._lock:
            track = self._tracks.setdefault(key, _Track())
            if failed:
                track.failures += 1
                track.repeats, track.last_result = 0, None
                count = track.failures
                if count >= self.warn_after:
                    return GuardDecision(
                        "warn",
                        f"[Herald: this exact {tool} call has now failed {count} times. Do not repeat it "
                        f"unchanged: fix the arguments or try another way. Identical calls are blocked "
                        f"after {self.block_after - 1} failures.]",
                        count,
                    )
                return ALLOW
            track.failures = 0
            if not read_only:
                # Something may have changed: identical reads are progress again.
                for other in self._tracks.values():
                    other.repeats, other.last_result = 0, None
                return ALLOW
            digest = hashlib.sha256(result.encode("utf-8", "backslashreplace")).hexdigest()
            track.repeats = track.repeats + 1 if track.last_result == digest else 1
            track.last_result = digest
            count = track.repeats
        if count >= self.warn_after:
            return GuardDecision(
                "warn",
                f"[Herald: {tool} returned exactly the same result {count} times in a row. Nothing has "
                f"changed; use what you have or do something different. Identical calls are blocked "
                f"after {self.block_after - 1} repeats.]",
                count,
            )
        return ALLOW
