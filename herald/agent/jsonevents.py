"""`herald run --json`: the agent's events as JSON lines on stdout, as they happen, then the result.

One object per line, each with `event` (its kind) and `elapsed` (seconds since the run started):

    model_call_started   turn, provider, model
    text                 text                     (streamed model text, several deltas per line)
    tool_call_delta      index, id, name, arguments (a tool call being streamed, likewise)
    model_call_finished  turn, usage, seconds, text, tool_calls
    tool_started         call_id, name, arguments, runs_script (true: inner_tool_call events follow)
    inner_tool_call      tool, ok, count          (a call made by a running execute_code script)
    tool_finished        call_id, name, ok, seconds, summary, inner_calls
    notice               kind, text               (retry, fallback, compaction, guardrail, ...)
    result               status, final_text, session_id, turns, usage, tool_calls, error, seconds

The result is always the last line. Streamed deltas are coalesced so a reader is not sent one
line per token: they are held until a line break, a few hundred characters, a quarter of a
second (a timer, so a stalled stream still shows what it had), or any other event, whichever
comes first. Events arrive from several threads; a lock keeps lines whole and in order.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import IO, Any

from .events import (
    AgentEvent,
    AgentResult,
    InnerToolCall,
    ModelCallFinished,
    ModelCallStarted,
    Notice,
    ToolFinished,
    ToolStarted,
)
from .providers.base import TextDelta, ToolCallDelta

FLUSH_CHARS = 400
FLUSH_SECONDS = 0.25

_KINDS: dict[type, str] = {
    ModelCallStarted: "model_call_started",
    ModelCallFinished: "model_call_finished",
    ToolStarted: "tool_started",
    InnerToolCall: "inner_tool_call",
    ToolFinished: "tool_finished",
    Notice: "notice",
}


def result_record(result: AgentResult) -> dict[str, Any]:
    """The result object of `herald run --json` (without the history, which the session keeps)."""
    return {
        "status": result.status,
        "final_text": result.final_text,
        "session_id": result.session_id,
        "turns": result.turns,
        "usage": result.usage.to_dict(),
        "tool_calls": [dataclasses.asdict(c) for c in result.tool_calls],
        "error": result.error,
        "seconds": result.seconds,
    }


class JsonEvents:
    """An `on_event` handler that writes JSON lines to `out`; `finish(result)` writes the last."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._text = ""
        self._calls: dict[int, dict[str, Any]] = {}  # tool calls being streamed, by index
        self._timer: threading.Timer | None = None
        self._broken = False

    def handle(self, event: AgentEvent) -> None:
        with self._lock:
            if isinstance(event, TextDelta | ToolCallDelta):
                self._hold(event)
                return
            self._flush()
            kind = _KINDS.get(type(event))
            if kind is not None:
                self._write({"event": kind, **dataclasses.asdict(event)})

    def finish(self, result: AgentResult) -> None:
        with self._lock:
            self._flush()
            self._write({"event": "result", **result_record(result)})

    # -- coalescing ----------------------------------------------------------------------------

    def _hold(self, event: TextDelta | ToolCallDelta) -> None:
        # Keep the order: what another kind of delta held so far comes out first.
        if (self._calls if isinstance(event, TextDelta) else self._text):
            self._flush()
        if isinstance(event, TextDelta):
            self._text += event.text
        else:
            held = self._calls.setdefault(
                event.index, {"index": event.index, "id": None, "name": None, "arguments": ""}
            )
            held["id"] = held["id"] or event.call_id
            held["name"] = held["name"] or event.name
            held["arguments"] += event.arguments
        size = len(self._text) + sum(len(c["arguments"]) for c in self._calls.values())
        if "\n" in self._text or size >= FLUSH_CHARS:
            self._flush()
        elif self._timer is None:
            self._timer = threading.Timer(FLUSH_SECONDS, self._flush_held)
            self._timer.daemon = True
            self._timer.start()

    def _flush_held(self) -> None:  # on the timer's thread
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._text:
            self._write({"event": "text", "text": self._text})
        for held in self._calls.values():
            self._write({"event": "tool_call_delta", **held})
        self._text, self._calls = "", {}

    def _write(self, record: dict[str, Any]) -> None:
        if self._broken:
            return
        record["elapsed"] = round(time.monotonic() - self._started, 3)
        try:
            self._out.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._out.flush()
        except BrokenPipeError:  # `herald run --json | head`: stop writing, let the run finish
            self._broken = True
