"""What an Agent reports while it runs (for the live view, or any `on_event` callback), and
what it returns. Events may arrive from worker threads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .providers.base import Message, TextDelta, ToolCallDelta, Usage

Status = Literal["completed", "budget_exhausted", "interrupted", "error"]


@dataclass(frozen=True)
class ModelCallStarted:
    turn: int
    provider: str
    model: str


@dataclass(frozen=True)
class ModelCallFinished:
    turn: int
    usage: Usage
    seconds: float
    text: str
    tool_calls: int


@dataclass(frozen=True)
class ToolStarted:
    call_id: str
    name: str
    arguments: dict[str, Any]
    runs_script: bool = False  # the tool runs arguments["code"] (Tool.runs_scripts): inner calls follow


@dataclass(frozen=True)
class InnerToolCall:
    """A tool call made from inside a running script (execute_code)."""

    tool: str
    ok: bool
    count: int  # calls made by the running script so far


@dataclass(frozen=True)
class ToolFinished:
    call_id: str
    name: str
    ok: bool
    seconds: float
    summary: str  # one line for a UI
    inner_calls: int = 0


@dataclass(frozen=True)
class Notice:
    """Something the person watching should know: a retry, a fallback, a compaction, a guardrail."""

    kind: Literal["retry", "fallback", "compaction", "guardrail", "budget", "repair", "interrupt"]
    text: str


AgentEvent = (
    TextDelta
    | ToolCallDelta
    | ModelCallStarted
    | ModelCallFinished
    | ToolStarted
    | InnerToolCall
    | ToolFinished
    | Notice
)


@dataclass(frozen=True)
class ToolCallRecord:
    call_id: str
    name: str
    arguments: dict[str, Any]
    ok: bool
    seconds: float
    inner_calls: int = 0  # a tool that runs scripts (execute_code): tool calls the script made
    blocked: bool = False  # refused by a guardrail, the budget or an interrupt; not run


@dataclass
class AgentResult:
    final_text: str
    status: Status
    session_id: str
    messages: list[Message]  # the whole history (without the system prompt)
    usage: Usage  # this run's model usage, summed over calls
    turns: int  # model calls this run
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    error: str | None = None  # why the run stopped, when status is "error"
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "completed"
