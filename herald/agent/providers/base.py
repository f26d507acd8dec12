"""The provider seam: one internal message format, one request/response shape, stream events.

Messages are OpenAI-style dicts, whatever the wire protocol:

    {"role": "user", "content": "..."}
    {"role": "assistant", "content": "..." | None, "tool_calls": [{"id", "type": "function",
        "function": {"name", "arguments": "<JSON text>"}}]}
    {"role": "tool", "tool_call_id": "...", "content": "...", "is_error": True (failed calls only)}

The system prompt is not a message: it is passed separately, built once per session and never
changed, so providers that cache prompts (Anthropic) keep hitting the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Message = dict[str, Any]
ApiMode = Literal["chat_completions", "anthropic_messages"]
API_MODES: tuple[ApiMode, ...] = ("chat_completions", "anthropic_messages")


class ModelCallCancelled(Exception):
    """The model call was abandoned because the agent was interrupted."""


@dataclass(frozen=True)
class ProviderConfig:
    """Everything needed to talk to one model at one endpoint."""

    provider: str  # openai | anthropic | openrouter | ollama | vllm | custom | ...
    model: str
    api_mode: ApiMode
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 600.0
    stream: bool = True
    max_tokens: int = 8192  # output tokens per call (required by the Anthropic API)
    prompt_cache: bool = True  # Anthropic cache_control markers

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}"


@dataclass
class Usage:
    """Token counts as the provider reported them. `input_tokens` includes cached tokens."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.calls += other.calls

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "calls": self.calls,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        return cls(**{k: int(data.get(k, 0)) for k in cls().to_dict()})


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it (may be malformed)


@dataclass
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[dict[str, Any]]  # OpenAI function schemas ({"type": "function", "function": ...})
    tool_choice: Literal["auto", "none"] = "auto"


@dataclass
class ModelResponse:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = ""
    model: str = ""

    def as_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


@dataclass(frozen=True)
class TextDelta:
    """A piece of the model's text as it streams in."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call as it streams in: the name arrives first, then argument text."""

    index: int
    call_id: str | None
    name: str | None
    arguments: str


StreamEvent = TextDelta | ToolCallDelta
StreamHandler = Callable[[StreamEvent], None]


class Provider(Protocol):
    config: ProviderConfig

    def complete(self, request: ModelRequest, on_event: StreamHandler, cancel: threading.Event) -> ModelResponse:
        """One model call. Raises the SDK's own exceptions (classified by `errors.classify`), or
        ModelCallCancelled once `cancel` is set."""
        ...

    def close(self) -> None: ...


class ToolCallAccumulator:
    """Builds complete tool calls from streamed pieces keyed by position."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def feed(self, index: int, call_id: str | None, name: str | None, arguments: str) -> None:
        call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if call_id:
            call["id"] = call_id
        if name and not call["name"]:
            call["name"] = name
        call["arguments"] += arguments

    def calls(self) -> list[ToolCall]:
        out = []
        for index in sorted(self._calls):
            call = self._calls[index]
            out.append(ToolCall(id=call["id"] or f"call_{index}", name=call["name"], arguments=call["arguments"]))
        return out
