"""An agent session's execute_code runs, each recorded for `herald replay SESSION --run N`.

The session's transcript keeps a preview of each call; what a replay needs (the whole script,
every call's arguments and full result, and what the session got back) goes to one recording per
run, `<sessions_dir>/<session id>.runs/<N>.jsonl` (format.py, its header naming the session's
call id), and the transcript gets a `recording` record pointing at it (`run`, `number`, `path`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..calls import CallOutcome, ToolCall
from ..execute_code import EXECUTE_CODE
from .format import header
from .recorder import Recorder

log = logging.getLogger(__name__)
# What the end line keeps of the run's result: what the session got, to compare a replay with.
END_FIELDS = ("status", "exit_code", "output", "error", "tool_calls_made", "refused_calls")


def runs_dir(sessions_dir: Path, session_id: str) -> Path:
    return sessions_dir / f"{session_id}.runs"


def run_path(sessions_dir: Path, session_id: str, number: int) -> Path:
    return runs_dir(sessions_dir, session_id) / f"{number}.jsonl"


def recorded_runs(sessions_dir: Path, session_id: str) -> list[int]:
    """The numbers of the session's recorded runs, in order."""
    directory = runs_dir(sessions_dir, session_id)
    if not directory.is_dir():
        return []
    return sorted(int(p.stem) for p in directory.glob("*.jsonl") if p.stem.isdigit())


class SessionRecorder:
    """A `CallTap` (calls.py) that records each execute_code run of one session's Runtime
    (its runs are serialised: one recording is open at a time)."""

    def __init__(self, sessions_dir: Path, session_id: str, note: Callable[..., None], *, backend: str,
                 exec_mode: str, tools: list[str], max_tool_calls: int) -> None:
        self._sessions_dir, self._session_id = sessions_dir, session_id
        self._setup: dict[str, Any] = {"backend": backend, "exec_mode": exec_mode, "tools": tools,
                                       "max_tool_calls": max_tool_calls}
        self._note = note  # writes a record to the session's transcript
        existing = recorded_runs(sessions_dir, session_id)
        self._next = (existing[-1] if existing else 0) + 1
        self._current: Recorder | None = None

    def starting(self, call: ToolCall) -> None:
        if call.name != EXECUTE_CODE or not isinstance(call.args, dict):
            return
        code = call.args.get("code")
        if not isinstance(code, str):
            return
        number, self._next = self._next, self._next + 1
        path = run_path(self._sessions_dir, self._session_id, number)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            recorder = Recorder(path)
        except OSError as exc:  # the run goes on unrecorded; said once per run, in the log
            log.warning("could not record execute_code run %d of session %s: %s", number, self._session_id, exc)
            return
        recorder.start(header(code, **self._setup, extra={"session": self._session_id, "session_run": number,
                                                            "call_id": call.id, "script": code}))
        self._current = recorder
        self._note("recording", run=call.id, number=number, path=str(path))

    def answer(self, call: ToolCall) -> CallOutcome | None:
        return None

    def seen(self, call: ToolCall, outcome: CallOutcome) -> None:
        current = self._current
        if current is None:
            return
        if call.who == "script":
            current.seen(call, outcome)
            return
        if call.who != "direct" or call.name != EXECUTE_CODE:
            return
        self._current = None
        result = outcome.get("result")
        end = {k: result.get(k) for k in END_FIELDS} if isinstance(result, dict) else {"error": outcome.get("error")}
        problem = current.close(end)
        if problem is not None:
            log.warning("%s", problem)
            self._note("recording_failed", run=call.id, message=problem)
