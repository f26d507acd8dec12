"""The native Anthropic Messages API through the official `anthropic` SDK.

Conversion from the internal (OpenAI-style) format: the system prompt becomes the top-level
`system` block; assistant tool calls become `tool_use` blocks; tool results become `tool_result`
blocks in a user turn; consecutive same-role turns are merged, as the API requires alternation.
Prompt caching: `cache_control` markers on the system prompt and on the last three turns (the
API's limit is four breakpoints), so each call re-reads the unchanged prefix from the cache.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from .base import (
    Message,
    ModelCallCancelled,
    ModelRequest,
    ModelResponse,
    ProviderConfig,
    StreamHandler,
    TextDelta,
    ToolCall,
    ToolCallAccumulator,
    ToolCallDelta,
    Usage,
)

CACHE_MARKER = {"type": "ephemeral"}
CACHED_TURNS = 3


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:  # the loop stores repaired JSON, so this is only a safety net
        return {}
    return value if isinstance(value, dict) else {}


def _blocks(message: Message) -> list[dict[str, Any]]:
    role = message["role"]
    if role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": message.get("content") or "(no output)",
        }
        if message.get("is_error"):
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks.extend(dict(part) for part in content)
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": _input(fn["arguments"])})
    return blocks


def to_anthropic_messages(messages: list[Message], *, cache: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "user" if message["role"] in ("user", "tool") else "assistant"
        blocks = _blocks(message)
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for turn in out:
        if not turn["content"]:
            turn["content"] = [{"type": "text", "text": "(empty)"}]
    if cache:
        for turn in out[-CACHED_TURNS:]:
            turn["content"][-1]["cache_control"] = dict(CACHE_MARKER)
    return out


def to_anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"]["parameters"],
        }
        for t in tools
    ]


def _usage(raw: Any, into: Usage) -> None:
    if raw is None:
        return
    fresh = getattr(raw, "input_tokens", None) or 0
    read = getattr(raw, "cache_read_input_tokens", None) or 0
    write = getattr(raw, "cache_creation_input_tokens", None) or 0
    if fresh or read or write:
        into.input_tokens = fresh + read + write
        into.cache_read_tokens = read
        into.cache_write_tokens = write
    output = getattr(raw, "output_tokens", None)
    if output:
        into.output_tokens = output


class AnthropicMessagesProvider:
    def __init__(self, config: ProviderConfig) -> None:
        import anthropic

        self.config = config
        self._client = anthropic.Anthropic(
            api_key=config.api_key or "not-needed",  # Anthropic-compatible local servers take any key
            base_url=config.base_url or None,
            timeout=config.timeout,
            max_retries=0,  # Herald retries with its own classification and backoff
        )

    def _kwargs(self, request: ModelRequest) -> dict[str, Any]:
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if self.config.prompt_cache:
            system["cache_control"] = dict(CACHE_MARKER)
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "system": [system],
            "messages": to_anthropic_messages(request.messages, cache=self.config.prompt_cache),
        }
        if request.tools:
            kwargs["tools"] = to_anthropic_tools(request.tools)
            kwargs["tool_choice"] = {"type": request.tool_choice}
        return kwargs

    def complete(self, request: ModelRequest, on_event: StreamHandler, cancel: threading.Event) -> ModelResponse:
        kwargs = self._kwargs(request)
        if not self.config.stream:
            reply = self._client.messages.create(**kwargs)
            if cancel.is_set():
                raise ModelCallCancelled()
            usage = Usage(calls=1)
            _usage(reply.usage, usage)
            reply_text = "".join(b.text for b in reply.content if b.type == "text")
            calls = [
                ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input, ensure_ascii=False))
                for b in reply.content
                if b.type == "tool_use"
            ]
            return ModelResponse(reply_text, calls, usage, reply.stop_reason or "", reply.model or self.config.model)
        stream = self._client.messages.create(**kwargs, stream=True)
        text: list[str] = []
        calls_acc = ToolCallAccumulator()
        tool_index: dict[int, int] = {}  # content block index -> tool call position
        usage = Usage(calls=1)
        stop_reason = ""
        model = self.config.model
        try:
            for event in stream:
                if cancel.is_set():
                    raise ModelCallCancelled()
                kind = event.type
                if kind == "message_start":
                    model = event.message.model or model
                    _usage(event.message.usage, usage)
                elif kind == "content_block_start" and event.content_block.type == "tool_use":
                    block = event.content_block
                    position = tool_index[event.index] = len(tool_index)
                    calls_acc.feed(position, block.id, block.name, "")
                    on_event(ToolCallDelta(position, block.id, block.name, ""))
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        text.append(delta.text)
                        on_event(TextDelta(delta.text))
                    elif delta.type == "input_json_delta" and event.index in tool_index:
                        position = tool_index[event.index]
                        calls_acc.feed(position, None, None, delta.partial_json)
                        on_event(ToolCallDelta(position, None, None, delta.partial_json))
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    _usage(event.usage, usage)
        finally:
            stream.close()
        return ModelResponse("".join(text), calls_acc.calls(), usage, stop_reason, model)

    def close(self) -> None:
        self._client.close()
