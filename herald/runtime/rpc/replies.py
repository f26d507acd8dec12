"""Calls and replies between the wire and the Dispatcher: a script's call frame made a ToolCall,
its CallOutcome made the reply frame (wire/frames.py ResultFrame / ErrorFrame) that is sent.

`script_reply` is the one way a script's call is served (host mode's socket, rpc/server.py; backend
mode's exec channel): the Dispatcher sizes the reply through the call's `FrameReply`, which keeps
the frame it encoded, so what is recorded and budgeted is what is sent, and a reply is encoded
once. A direct call's reply is measured the same way (`MEASURED`) for the transcript, not kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..._sandbox.wire.framing import HEADER, body_size, reply_frame
from ..calls import CallOutcome, ToolCall, script_call
from ..scope import CallScope

Handle = Callable[[ToolCall], CallOutcome]


class FrameReply:
    """The reply frame of one call (`message`), with its `echo` keys (the call id, ...)."""

    __slots__ = ("echo", "frame", "message")

    def __init__(self, message: Mapping[str, Any], echo: Iterable[str]) -> None:
        self.message, self.echo, self.frame = message, echo, b""

    def size(self, outcome: CallOutcome) -> int:
        self.frame = reply_frame(self.message, outcome, self.echo)
        return len(self.frame) - HEADER.size


class _Measured:
    """A direct call's reply, measured as the wire would carry it (the transcript's reply_bytes)."""

    __slots__ = ()

    def size(self, outcome: CallOutcome) -> int:
        return body_size(outcome)  # what the frame would hold, without making it


MEASURED = _Measured()


def script_reply(handle: Handle, scope: CallScope, message: dict[str, Any], echo: tuple[str, ...] = ("id",)) -> bytes:
    """Serve one call a script sent (`message`, a call frame as decoded) in `scope`: its reply
    frame, with `echo` keys copied from the request. Never raises for what the call holds: the
    Dispatcher answers a bad tool name or arguments with an error the script can act on."""
    wire = FrameReply(message, echo)
    handle(script_call(scope, message.get("tool"), message.get("args"), wire, message.get("past_budget") is True))
    return wire.frame
