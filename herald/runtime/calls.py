"""A tool call as the Dispatcher takes it (`ToolCall`) and what comes of it (`CallOutcome`).

Every call goes through `Dispatcher.handle(call) -> CallOutcome`, whoever makes it (`Who`):
- "direct": a model's tool call (the agent, the MCP server, Python): any offered tool, no budget;
- "script": a call a script sent over RPC (host mode's socket, backend mode's exec channel): the
  run's allow-list, call budget, other budgets, deadline, cancel and caps (its `scope`);
- "record": a call already answered next to the script (by a backend-mode supervisor or a host-mode
  script's own process: runtime/backend_tools.py): counted in its run and logged, nothing run.

The wire is not the Dispatcher's: a script call comes with its `wire` (`ReplyWire`, the RPC
layer's encoder of its reply frame: runtime/rpc/replies.py), which the Dispatcher asks for the size
of what is sent (the transcript's `reply_bytes`, the reply-bytes budget). The frame it encoded is
what the RPC layer sends, so a reply is encoded once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Protocol, TypedDict

from .._sandbox.wire.frames import ErrorInfo
from .scope import CallScope

Who = Literal["direct", "script", "record"]


class CallOutcome(TypedDict):
    """A call's reply: its result, or an error the caller can act on (never both)."""

    result: NotRequired[Any]
    error: NotRequired[ErrorInfo]


class ReplyWire(Protocol):
    """How a call's reply travels back: encoded once, its size told to the Dispatcher."""

    def size(self, outcome: CallOutcome) -> int:
        """Encode `outcome` as it will be sent; the bytes it takes (the frame's body)."""
        ...


@dataclass(slots=True)
class Answered:
    """What the script's side says of a call it answered (a record frame, or a terminal call
    whose output Herald capped: backend_tools.py)."""

    error: ErrorInfo | None
    reply_bytes: int
    seconds: float
    in_script: bool  # answered by the script's own process (host mode), not by a supervisor
    previewed: bool = True  # `args` is already the transcript's preview


@dataclass(slots=True)
class ToolCall:
    """One call for `Dispatcher.handle`. `name` and `args` are as they came (a script's may be
    anything): the Dispatcher checks them."""

    who: Who
    name: Any
    args: Any
    id: str  # the transcript's "run": the call's id (direct) or its run's (script, record)
    scope: CallScope | None = None  # script and record calls: their run's
    cancel: threading.Event | None = None  # direct calls: set to stop it (a scope has its own)
    past_budget: bool = False  # the script's side already counted it past the run's budget
    wire: ReplyWire | None = None
    answered: Answered | None = None  # record calls
    # Made by Herald inside another call of the script (a transaction's verify): a recording
    # keeps it as part of that call, whose replay answers for both.
    inner: bool = False


class CallTap(Protocol):
    """Record and replay (runtime/replay/): what sees every call the Dispatcher handles and, in a
    replay, answers a script's calls from a recording instead of the tools."""

    def starting(self, call: ToolCall) -> None:
        """A direct call is about to run (an execute_code run starts with one)."""
        ...

    def answer(self, call: ToolCall) -> CallOutcome | None:
        """A script's call: its outcome served from a recording, or None to run it as usual."""
        ...

    def seen(self, call: ToolCall, outcome: CallOutcome) -> None:
        """A direct or script call and the outcome its caller gets."""
        ...


def direct_call(name: str, args: Any, call_id: str = "direct", cancel: threading.Event | None = None,
                wire: ReplyWire | None = None) -> ToolCall:
    return ToolCall("direct", name, args, call_id, cancel=cancel, wire=wire)


def script_call(scope: CallScope, name: Any, args: Any, wire: ReplyWire, past_budget: bool = False,
                inner: bool = False) -> ToolCall:
    return ToolCall("script", name, args, scope.run_id, scope, scope.cancel, past_budget, wire, inner=inner)


def recorded_call(scope: CallScope, name: str, args: Any, answered: Answered) -> ToolCall:
    return ToolCall("record", name, args, scope.run_id, scope, answered=answered)


def error(kind: str, message: str) -> CallOutcome:
    return {"error": {"type": kind, "message": message}}
