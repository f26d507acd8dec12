"""Run the tool calls of one model turn and turn them into tool-result messages.

Per call: repair the argument JSON (unrepairable: `{}` in the history and an error result, the
tool is not run); refuse unknown tools; ask the loop guard (a blocked call is not run); run it
through the dispatcher's direct path (execute_code too: the Runtime's tool runs the script there
and returns its ExecutionResult, which fails the call unless the script succeeded); let the guard
append a warning; cut an oversized result (head + tail, full text in a spill file).

Several calls in one turn run concurrently only when no two touch the same thing (a file or a
directory holding it, the shell, the browser, tool-wide state: `Tool.touches`, the question the
dispatcher's locks ask too); otherwise in order. Results always keep the order of the calls.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..capture import CappedCapture
from ..config import Settings
from ..runtime import Runtime
from ..tools.registry import Tool
from ..tools.resources import Resource, conflicts
from ..transcript import preview
from .events import AgentEvent, InnerToolCall, Notice, ToolCallRecord, ToolFinished, ToolStarted
from .guardrails import LoopGuard
from .jsonrepair import repair_arguments
from .providers.base import Message, ToolCall

MAX_PARALLEL = 8


@dataclass(frozen=True)
class PreparedCall:
    id: str
    name: str
    arguments: dict[str, Any]
    error: str | None  # the arguments could not be repaired: not run

    def as_history(self) -> dict[str, Any]:
        text = json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": text}}


@dataclass(frozen=True)
class ToolOutcome:
    message: Message
    record: ToolCallRecord


class ToolExecutor:
    def __init__(
        self,
        *,
        runtime: Runtime,
        tools: list[Tool],
        settings: Settings,
        guard: LoopGuard,
        emit: Callable[[AgentEvent], None],
        record: Callable[..., None],
        cancel: threading.Event,
    ) -> None:
        self.runtime = runtime
        self._tools = {t.name: t for t in tools}  # what the model may call; the dispatcher runs them all
        self.settings = settings
        self.guard = guard
        self._emit = emit
        self._record = record
        self._cancel = cancel  # set by the agent's interrupt(): direct calls stop, none start
        self._inner = 0
        self._inner_lock = threading.Lock()
        runtime.dispatcher.on_script_call = self._on_inner_call

    # -- preparing ---------------------------------------------------------------------------

    def prepare(self, calls: list[ToolCall]) -> list[PreparedCall]:
        prepared = []
        for n, call in enumerate(calls):
            repaired = repair_arguments(call.arguments)
            if repaired.repaired:
                what = "could not be repaired" if repaired.error else "was repaired"
                self._emit(Notice("repair", f"{call.name}: malformed argument JSON {what}"))
            call_id = call.id or f"call_{secrets.token_hex(4)}_{n}"
            prepared.append(PreparedCall(call_id, call.name or "(no name)", repaired.arguments, repaired.error))
        return prepared

    def refunds_turn(self, name: str) -> bool:
        """A turn whose only call is to this tool is not charged (Tool.refunds_turn)."""
        tool = self._tool(name)
        return tool is not None and tool.refunds_turn

    def _tool(self, name: str) -> Tool | None:
        return self._tools.get(name)

    # -- running -----------------------------------------------------------------------------

    def execute(self, calls: list[PreparedCall]) -> list[ToolOutcome]:
        if self._concurrent(calls):
            with ThreadPoolExecutor(
                max_workers=min(MAX_PARALLEL, len(calls)), thread_name_prefix="herald-tool"
            ) as pool:
                return list(pool.map(self._one, calls))
        return [self._one(call) for call in calls]

    def _concurrent(self, calls: list[PreparedCall]) -> bool:
        """Whether a turn's calls may run at once: no call is malformed or unknown and no two
        touch the same thing (tools/resources.py), so running them together cannot change what
        any of them sees compared with running them in the model's order."""
        if len(calls) < 2:
            return False
        touched: list[list[Resource]] = []
        for call in calls:
            tool = self._tool(call.name)
            if call.error or tool is None:
                return False
            resources = tool.resources(call.arguments, self.runtime.dispatcher.ctx)
            if any(conflicts(resources, earlier) for earlier in touched):
                return False
            touched.append(resources)
        return True

    def _one(self, call: PreparedCall) -> ToolOutcome:
        started = time.monotonic()
        tool = self._tool(call.name)
        runs_script = tool is not None and tool.runs_scripts
        self._emit(ToolStarted(call.id, call.name, call.arguments, runs_script))
        if self._cancel.is_set():
            return self._refused(call, "Not run: the session was interrupted before this call started.", started)
        if call.error:
            return self._refused(call, call.error, started)
        if tool is None:
            known = ", ".join(sorted(self._tools))
            withheld = self.runtime.dispatcher.offer.withheld
            if call.name in withheld:
                what = f"is not available in this session: {withheld[call.name]}"
            else:
                what = "is not enabled in this session" if call.name in self.runtime.registry else "does not exist"
            return self._refused(call, f"Tool '{call.name}' {what}. Available tools: {known}.", started)
        decision = self.guard.before_call(call.name, call.arguments)
        if not decision.allows_execution:
            self._emit(Notice("guardrail", decision.message))
            return self._refused(call, decision.message, started)
        if runs_script:
            with self._inner_lock:  # the live count of InnerToolCall starts again with this script
                self._inner = 0
        reply = self.runtime.dispatcher.call_direct(call.name, call.arguments, call_id=call.id, cancel=self._cancel)
        result = reply.get("result")
        failed = "error" in reply or (isinstance(result, dict) and result.get("interrupted") is True)
        text = _render_error(reply["error"]) if "error" in reply else _render(result)
        inner = 0
        if runs_script and isinstance(result, dict):  # an ExecutionResult: ok only if the script succeeded
            failed = failed or result.get("status") != "success"
            inner = int(result.get("tool_calls_made") or 0)
        decision = self.guard.after_call(call.name, call.arguments, text, failed=failed, read_only=tool.read_only)
        if decision.action == "warn":
            self._emit(Notice("guardrail", decision.message))
            text = text + "\n\n" + decision.message
        return self._finish(call, self._cap(text, call.id), ok=not failed, started=started, inner=inner,
                            runs_script=runs_script)

    def _on_inner_call(self, tool: str, error: str | None) -> None:
        with self._inner_lock:
            self._inner += 1
            count = self._inner
        self._emit(InnerToolCall(tool, error is None, count))

    # -- results -----------------------------------------------------------------------------

    def _cap(self, text: str, call_id: str) -> str:
        limit = self.settings.agent.max_tool_result_bytes
        data = text.encode("utf-8", "backslashreplace")
        if len(data) <= limit:
            return text
        name = f"tool-{call_id}-{secrets.token_hex(3)}.txt".replace("/", "_")
        capture = CappedCapture(limit, spill_dir=self.settings.spill_dir, spill_name=name)
        try:
            capture.feed(data)
        finally:
            capture.close()
        return capture.text("tool result")

    def _refused(self, call: PreparedCall, message: str, started: float) -> ToolOutcome:
        self._record(
            "tool_call", run=call.id, tool=call.name, args=preview(call.arguments), blocked=True, error=message
        )
        return self._finish(call, message, ok=False, started=started, blocked=True)

    def _finish(
        self, call: PreparedCall, text: str, *, ok: bool, started: float, inner: int = 0, blocked: bool = False,
        runs_script: bool = False,
    ) -> ToolOutcome:
        seconds = time.monotonic() - started
        summary = _summary(text, runs_script) if ok else (text.strip().splitlines() or ["error"])[0][:200]
        self._emit(ToolFinished(call.id, call.name, ok, seconds, summary, inner))
        message: Message = {"role": "tool", "tool_call_id": call.id, "content": text}
        if not ok:
            message["is_error"] = True
        record = ToolCallRecord(call.id, call.name, call.arguments, ok, round(seconds, 6), inner, blocked)
        return ToolOutcome(message, record)


def _render(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=repr)


def _render_error(error: Any) -> str:
    if isinstance(error, dict):
        return f"Error ({error.get('type', 'ToolError')}): {error.get('message', '')}"
    return f"Error: {error}"


def _summary(text: str, runs_script: bool) -> str:
    """One line for the live view: a script's first output line, else the result's start."""
    if runs_script:
        try:
            output = str(json.loads(text).get("output") or "").strip()
        except (ValueError, AttributeError):  # cut to size: no longer JSON
            output = ""
        first = output.splitlines()[0] if output else "(no output)"
        return first[:120]
    flat = " ".join(text.split())
    return flat if len(flat) <= 120 else flat[:119] + "…"
