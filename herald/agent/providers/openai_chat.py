"""OpenAI Chat Completions through the official `openai` SDK, against any base URL (OpenAI,
OpenRouter, vLLM, Ollama, ...). The internal format is already this protocol's, so requests only
drop keys the API does not know."""

from __future__ import annotations

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

_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in messages:
        item = {k: v for k, v in message.items() if k in _KEYS}
        if item["role"] == "assistant" and not item.get("content") and item.get("tool_calls"):
            item["content"] = None
        out.append(item)
    return out


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage(calls=1)
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(
        input_tokens=getattr(raw, "prompt_tokens", 0) or 0,
        output_tokens=getattr(raw, "completion_tokens", 0) or 0,
        cache_read_tokens=cached,
        calls=1,
    )


def _max_tokens_key(provider: str) -> str:
    """OpenAI's own API wants `max_completion_tokens` (its reasoning models refuse the older
    `max_tokens`); the compatible servers (vLLM, Ollama, OpenRouter, ...) all read `max_tokens`,
    and some know nothing else."""
    return "max_completion_tokens" if provider == "openai" else "max_tokens"


class OpenAIChatProvider:
    def __init__(self, config: ProviderConfig) -> None:
        import openai

        self.config = config
        self._client = openai.OpenAI(
            api_key=config.api_key or "not-needed",  # local servers (Ollama, vLLM) take any key
            base_url=config.base_url or None,
            timeout=config.timeout,
            max_retries=0,  # Herald retries with its own classification and backoff
        )

    def _kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "messages": to_openai_messages(request.system, request.messages),
            _max_tokens_key(self.config.provider): self.config.max_tokens,
        }
        if request.tools:
            kwargs["tools"] = request.tools
            kwargs["tool_choice"] = request.tool_choice
        return kwargs

    def complete(self, request: ModelRequest, on_event: StreamHandler, cancel: threading.Event) -> ModelResponse:
        kwargs = self._kwargs(request)
        if not self.config.stream:
            completion = self._client.chat.completions.create(**kwargs)
            if cancel.is_set():
                raise ModelCallCancelled()
            choice = completion.choices[0]
            calls = [
                ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
                for c in (choice.message.tool_calls or [])
                if getattr(c, "function", None) is not None
            ]
            return ModelResponse(
                text=choice.message.content or "",
                tool_calls=calls,
                usage=_usage(completion.usage),
                stop_reason=choice.finish_reason or "",
                model=completion.model or self.config.model,
            )
        stream = self._client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        text: list[str] = []
        calls_acc = ToolCallAccumulator()
        usage = Usage(calls=1)
        stop_reason = ""
        model = self.config.model
        try:
            for chunk in stream:
                if cancel.is_set():
                    raise ModelCallCancelled()
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                model = chunk.model or model
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is not None and delta.content:
                        text.append(delta.content)
                        on_event(TextDelta(delta.content))
                    for piece in (delta.tool_calls if delta is not None else None) or []:
                        fn = piece.function
                        name = fn.name if fn is not None else None
                        args = (fn.arguments if fn is not None else None) or ""
                        calls_acc.feed(piece.index, piece.id, name, args)
                        on_event(ToolCallDelta(piece.index, piece.id, name, args))
                    if choice.finish_reason:
                        stop_reason = choice.finish_reason
        finally:
            stream.close()
        return ModelResponse("".join(text), calls_acc.calls(), usage, stop_reason, model)

    def close(self) -> None:
        self._client.close()
