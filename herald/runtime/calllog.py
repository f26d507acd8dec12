"""What the transcript keeps of each call the Dispatcher handles (never the model's context):
the call, its size and time, and the policy's decisions. A record that cannot be written is
logged here; it never turns a call that ran into an error."""

from __future__ import annotations

import logging
from typing import Any

from ..policy import Verdict
from ..tools.registry import Tool
from ..transcript import Transcript, preview
from .calls import CallOutcome

log = logging.getLogger(__name__)


class CallLog:
    """The records of one Dispatcher's calls, in its transcript (None: nothing kept)."""

    def __init__(self, transcript: Transcript | None) -> None:
        self.transcript = transcript

    def policy(self, run_id: str, name: str, args: Any, verdict: Verdict, profile: str) -> None:
        if self.transcript is None:
            return
        try:
            self.transcript.write({"type": "policy", "run": run_id, "tool": name, "args": preview(args),
                                   "decision": verdict.decision, "rule": verdict.rule,
                                   "profile": profile})
        except Exception:
            log.exception("could not write the transcript record of a policy decision on %s", name)

    def call(
        self, run_id: str, kind: str, name: Any, args: Any, reply: CallOutcome, size: int, seconds: float,
        extra: dict[str, Any] | None = None, *, previewed: bool = False,
    ) -> None:
        if self.transcript is None:
            return
        try:
            self._write(run_id, kind, name, args if previewed else preview(args), reply, size, seconds, extra or {})
        except Exception:  # the call already ran: a logging failure must not turn it into an error
            log.exception("could not write the transcript record of a %s call", name)

    def _write(
        self, run_id: str, kind: str, name: Any, args: Any, reply: CallOutcome, size: int, seconds: float,
        extra: dict[str, Any],
    ) -> None:
        assert self.transcript is not None
        record: dict[str, Any] = {
            "type": kind,
            "run": run_id,
            "tool": name,
            "args": args,
            "duration_ms": round(seconds * 1000, 3),
        }
        if "error" in reply:
            record["error"] = reply["error"]
        record.update(extra)
        record["reply_bytes"] = size  # the reply as encoded for the wire (UTF-8 JSON)
        self.transcript.write(record)



def script_fields(tool: Tool | None, reply: CallOutcome) -> dict[str, Any]:
    """What the transcript keeps of a script run beside the call: its status and how many
    calls the script made (each also has its own sandbox_tool_call record)."""
    result = reply.get("result")
    if tool is None or not tool.runs_scripts or not isinstance(result, dict):
        return {}
    return {"status": result.get("status"), "inner_calls": result.get("tool_calls_made", 0)}
