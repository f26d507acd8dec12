"""Shrink the history when it no longer fits the model's context window.

Deterministic and free (no extra model call), in two passes:
1. Old tool results (everything before the latest turn) are replaced by a one-line stand-in
   naming the tool, its arguments and the size that was dropped.
2. If that is not enough, the middle of the conversation is dropped: the first user message (the
   task) and the latest turn are kept, and a digest of what happened in between (tool calls with
   their outcome, the assistant's notes, the todo list) is appended to the task message.
Invariants: an assistant message with tool calls is never separated from its results; the last
user message is always kept; the system prompt is never touched (it is not in the history).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from .providers.base import Message

CHARS_PER_TOKEN = 4
STUB_MAX = 300
DIGEST_MAX_LINES = 60


def estimate_tokens(messages: list[Message], *extra: str) -> int:
    chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages) + sum(len(e) for e in extra)
    return chars // CHARS_PER_TOKEN


@dataclass(frozen=True)
class Compaction:
    messages: list[Message]
    before_tokens: int
    after_tokens: int
    dropped_messages: int

    @property
    def effective(self) -> bool:
        """At least 10 % smaller: anything less and compressing again would only thrash."""
        return self.after_tokens <= self.before_tokens * 0.9


def _tail_start(messages: list[Message]) -> int:
    """Index where the latest turn begins: the last assistant message and what follows it,
    moved back so that no tool result is separated from the call that produced it."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            return i
    return len(messages)


def _calls_by_id(messages: list[Message]) -> dict[str, tuple[str, str]]:
    calls: dict[str, tuple[str, str]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            calls[call["id"]] = (call["function"]["name"], call["function"]["arguments"])
    return calls


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stub(name: str, arguments: str, content: str) -> str:
    return _short(
        f"[compacted: result of {name}({_short(arguments, 120)}), {len(content):,} characters, "
        "removed to fit the context window; call the tool again if you need it]",
        STUB_MAX,
    )


def prune_tool_results(messages: list[Message]) -> list[Message]:
    tail = _tail_start(messages)
    calls = _calls_by_id(messages)
    out = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if i < tail and message["role"] == "tool" and isinstance(content, str) and len(content) > STUB_MAX:
            name, arguments = calls.get(message.get("tool_call_id", ""), ("tool", ""))
            message = {**message, "content": _stub(name, arguments, content)}
        out.append(message)
    return out


def _digest(middle: list[Message], todo_text: str) -> str:
    calls = _calls_by_id(middle)
    lines: list[str] = []
    for message in middle:
        if message["role"] == "assistant" and message.get("content"):
            lines.append(f"- assistant: {_short(message['content'], 200)}")
        elif message["role"] == "tool":
            name, arguments = calls.get(message.get("tool_call_id", ""), ("tool", ""))
            outcome = "error" if message.get("is_error") else "ok"
            lines.append(
                f"- {name}({_short(arguments, 100)}) -> {outcome}: {_short(message.get('content') or '', 120)}"
            )
        elif message["role"] == "user" and message.get("content"):
            lines.append(f"- user: {_short(str(message['content']), 200)}")
    if len(lines) > DIGEST_MAX_LINES:
        skipped = len(lines) - DIGEST_MAX_LINES
        lines = [*lines[:DIGEST_MAX_LINES // 2], f"- ... {skipped} more steps ...", *lines[-DIGEST_MAX_LINES // 2:]]
    text = (
        "\n\n[Herald: earlier turns of this session were compacted to fit the context window. "
        "This digest is reference only; the task above and the messages below are current.]\n"
        + "\n".join(lines)
    )
    if todo_text:
        text += "\n\nTodo list:\n" + todo_text
    return text


def compress(
    messages: list[Message], *, target_tokens: int, extra: str = "", todo_text: Callable[[], str] = str
) -> Compaction:
    """Compress `messages` towards `target_tokens` (counting `extra`, e.g. the system prompt)."""
    before = estimate_tokens(messages, extra)
    pruned = prune_tool_results(messages)
    if estimate_tokens(pruned, extra) <= target_tokens or len(pruned) < 3:
        return Compaction(pruned, before, estimate_tokens(pruned, extra), 0)
    first_user = next((i for i, m in enumerate(pruned) if m["role"] == "user"), None)
    tail = _tail_start(pruned)
    last_user = max((i for i, m in enumerate(pruned) if m["role"] == "user"), default=None)
    if last_user is not None and last_user > (first_user or 0):
        tail = min(tail, last_user)
    if first_user is None or tail <= first_user + 1:
        return Compaction(pruned, before, estimate_tokens(pruned, extra), 0)
    head = dict(pruned[first_user])
    middle = pruned[first_user + 1 : tail]
    head["content"] = str(head.get("content") or "") + _digest(middle, todo_text())
    result = [*pruned[:first_user], head, *pruned[tail:]]
    if result[first_user + 1 :] and result[first_user + 1]["role"] == "user":
        # Two user messages in a row: fold the next one into the task message.
        following = result.pop(first_user + 1)
        head["content"] += "\n\n" + str(following.get("content") or "")
    return Compaction(result, before, estimate_tokens(result, extra), len(middle))
