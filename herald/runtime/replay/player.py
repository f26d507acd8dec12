"""Replaying a recording (format.py): a `CallTap` (calls.py) that answers every call of a
script from the recorded outcomes; no tool runs, so no backend, browser or network is reached.

A call takes the first recorded call not yet used with the same tool and the same arguments
(`canonical`), so threads and `parallel()` that finish in another order still replay. The first
call that matches nothing stops the replay: it and every later call get a `ReplayMismatch`
error naming the call, its number, and the nearest recorded call of that tool (or the next one
not used), and `mismatch` keeps the message for the command line.
"""

from __future__ import annotations

import collections
import difflib
import threading

from ..calls import CallOutcome, ToolCall, error
from .format import RecordedCall, Recording, canonical, describe, script_sha256

MISMATCH = "ReplayMismatch"
NEAREST_SCAN = 500  # recorded calls of the tool compared with a call that matches none


class Player:
    def __init__(self, recording: Recording, script: str) -> None:
        self.recording = recording
        self._changed = script_sha256(script) != recording.header.get("script_sha256")
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str], collections.deque[RecordedCall]] = collections.defaultdict(
            collections.deque)
        for recorded in recording.calls:
            self._waiting[(recorded.tool, canonical(recorded.args))].append(recorded)
        self._used: set[int] = set()
        self._calls = 0
        self.mismatch: str | None = None

    # -- CallTap ---------------------------------------------------------------------------

    def starting(self, call: ToolCall) -> None:
        pass

    def seen(self, call: ToolCall, outcome: CallOutcome) -> None:
        pass

    def answer(self, call: ToolCall) -> CallOutcome | None:
        if call.who != "script":
            return None
        with self._lock:
            self._calls += 1
            if self.mismatch is not None:
                return error(MISMATCH, f"Not replayed: the replay stopped at an earlier call. {self.mismatch}")
            waiting = self._waiting.get((str(call.name), canonical(call.args)))
            if not waiting:
                self.mismatch = self._no_match(call)
                return error(MISMATCH, self.mismatch)
            recorded = waiting.popleft()
            self._used.add(recorded.number)
        return recorded.outcome

    # -- what is left ----------------------------------------------------------------------

    def unused(self) -> list[RecordedCall]:
        """The recorded calls this run has not made (yet)."""
        with self._lock:
            return [c for c in self.recording.calls if c.number not in self._used]

    def unused_note(self) -> str | None:
        left = self.unused()
        if not left:
            return None
        shown = ", ".join(c.describe() for c in left[:3]) + (", ..." if len(left) > 3 else "")
        return (f"Replay: {len(left)} of the {len(self.recording.calls)} recorded call(s) were not made "
                f"by this run: {shown}.")

    def _no_match(self, call: ToolCall) -> str:
        tool = str(call.name)
        where = f"the recording {self.recording.path}"
        text = (f"Replay mismatch at call {self._calls}: {describe(tool, call.args)} is not in {where} "
                "(no recorded call not yet used has this tool and these arguments).")
        left = [c for c in self.recording.calls if c.number not in self._used]
        same_tool = [c for c in left if c.tool == tool][:NEAREST_SCAN]
        if same_tool:
            wanted = canonical(call.args)
            nearest = max(same_tool, key=lambda c: difflib.SequenceMatcher(None, wanted, canonical(c.args)).ratio())
            text += f" Nearest recorded {tool} call: {nearest.describe()}."
        elif left:
            text += f" The recording has no unused {tool} call; the next unused call is {left[0].describe()}."
        elif self.recording.calls:
            text += f" Every one of the {len(self.recording.calls)} recorded call(s) has been used."
        else:
            text += " The recording has no calls."
        if self._changed:
            text += " The script is not the one recorded (its sha256 differs)."
        return text + " Record the run again (herald exec --record FILE) or change the script back."
