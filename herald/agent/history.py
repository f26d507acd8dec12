"""What keeps a conversation history valid for the providers: every tool call has a result.

A run stopped part-way (interrupt, budget, a crash, a session saved mid-turn) can leave an
assistant message whose tool calls have no results; every provider rejects such a history, so
the calls get a "not run" result before the next request or a resume.
"""

from __future__ import annotations

from collections.abc import Callable

from .providers.base import Message

NOT_RUN = "Not run: the session stopped before this call finished."


def is_final(message: Message) -> bool:
    return message.get("role") == "assistant" and not message.get("tool_calls")


def close_dangling_calls(messages: list[Message], record: Callable[[Message], None] | None = None) -> list[Message]:
    """Give every tool call without a result a "not run" result, so the history is valid."""
    out: list[Message] = []
    pending: list[str] = []
    for message in [*messages, None]:
        if message is None or message.get("role") != "tool":
            for call_id in pending:
                filler: Message = {"role": "tool", "tool_call_id": call_id, "content": NOT_RUN, "is_error": True}
                out.append(filler)
                if record is not None:
                    record(filler)
            pending = []
        if message is None:
            break
        if message.get("role") == "tool" and message.get("tool_call_id") in pending:
            pending.remove(message["tool_call_id"])
        out.append(message)
        if message.get("role") == "assistant":
            pending = [c["id"] for c in message.get("tool_calls") or []]
    return out
