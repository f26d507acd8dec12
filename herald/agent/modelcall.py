"""One model turn, made robust: interruptible, retried, failed over, compressed.

Policy for a failed call (read from `ClassifiedError`, never from the exception):
- context overflow / payload too large: compress the history and retry (at most
  MAX_COMPACTIONS times per turn); never a reason to switch provider;
- retryable (rate limit, overload, 5xx, timeout, unknown, or whatever the server's
  `x-should-retry: true` says): wait (the provider's Retry-After, else jittered exponential
  backoff) and retry, up to `agent.max_retries` times per provider (a refused connection: once,
  after half a second: nothing listens there, so it fails fast);
- then, or at once for auth / billing / unknown model: the next provider in the fallback chain,
  which keeps the conversation;
- otherwise (a malformed request, or the chain is used up): `ModelCallFailed`.
The HTTP call runs on a worker thread so `interrupt()` returns control at once; the abandoned
call stops at its next stream chunk and its result is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..config import AgentSettings
from .events import AgentEvent, Notice
from .providers.base import (
    ModelCallCancelled,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderConfig,
    StreamEvent,
)
from .providers.errors import ClassifiedError, classify, jittered_backoff
from .providers.resolve import make_provider

MAX_COMPACTIONS = 3
POLL_SECONDS = 0.05


class ModelCallFailed(Exception):
    def __init__(self, error: ClassifiedError, detail: str = "") -> None:
        super().__init__(error.describe() + (f"; {detail}" if detail else ""))
        self.error = error


class ModelCaller:
    def __init__(
        self,
        chain: list[ProviderConfig],
        settings: AgentSettings,
        *,
        emit: Callable[[AgentEvent], None],
        record: Callable[..., None],
    ) -> None:
        self.chain = chain
        self.settings = settings
        self._emit = emit
        self._record = record
        self._index = 0
        self._providers: dict[int, Provider] = {}
        self._cancel = threading.Event()
        self._interrupted = threading.Event()

    @property
    def config(self) -> ProviderConfig:
        return self.chain[self._index]

    def _provider(self) -> Provider:
        if self._index not in self._providers:
            self._providers[self._index] = make_provider(self.config)
        return self._providers[self._index]

    def reset_interrupt(self) -> None:
        self._interrupted.clear()

    def interrupt(self) -> None:
        self._interrupted.set()
        self._cancel.set()

    def _sleep(self, seconds: float) -> None:
        if self._interrupted.wait(seconds):
            raise ModelCallCancelled()

    def _call_once(self, request: ModelRequest) -> ModelResponse:
        cancel = self._cancel = threading.Event()
        if self._interrupted.is_set():
            raise ModelCallCancelled()
        provider = self._provider()
        box: dict[str, Any] = {}
        done = threading.Event()

        def on_stream(event: StreamEvent) -> None:
            if not cancel.is_set():
                self._emit(event)

        def work() -> None:
            try:
                box["response"] = provider.complete(request, on_stream, cancel)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="herald-model-call", daemon=True).start()
        while not done.wait(POLL_SECONDS):
            if cancel.is_set():
                raise ModelCallCancelled()
        if cancel.is_set():
            raise ModelCallCancelled()
        if "error" in box:
            raise box["error"]
        response: ModelResponse = box["response"]
        return response

    def call(self, build: Callable[[], ModelRequest], compress: Callable[[ClassifiedError], bool]) -> ModelResponse:
        """Make one model turn; `build` makes the request afresh after each compaction."""
        attempt = 0
        compactions = 0
        while True:
            try:
                return self._call_once(build())
            except ModelCallCancelled:
                raise
            except Exception as exc:
                error = classify(exc)
            config = self.config
            fields = {"provider": config.provider, "model": config.model, "reason": error.reason.value,
                      "status": error.status_code, "message": error.message[:500]}
            if error.should_compress:
                if compactions < MAX_COMPACTIONS and compress(error):
                    compactions += 1
                    self._record("model_error", **fields, action="compress")
                    continue
                self._record("model_error", **fields, action="give_up")
                raise ModelCallFailed(error, "compressing the history could not make it fit") from None
            retries = (
                self.settings.max_retries
                if error.max_retries is None
                else min(error.max_retries, self.settings.max_retries)
            )
            if error.retryable and attempt < retries:
                attempt += 1
                delay = error.retry_after if error.retry_after is not None else jittered_backoff(
                    attempt, base=self.settings.retry_base_delay, cap=self.settings.retry_max_delay
                )
                delay = min(max(0.0, delay), self.settings.retry_max_delay)
                self._record("model_error", **fields, action="retry", attempt=attempt, delay=round(delay, 3))
                self._emit(Notice("retry", f"{config.label}: {error.describe()}; retry {attempt}/"
                                  f"{retries} in {delay:.1f} s"))
                self._sleep(delay)
                continue
            if error.should_fallback and self._index + 1 < len(self.chain):
                self._index += 1
                attempt = 0
                self._record("model_error", **fields, action="fallback", to=self.config.label)
                self._emit(Notice("fallback", f"{config.label}: {error.describe()}; switching to {self.config.label}"))
                continue
            self._record("model_error", **fields, action="give_up")
            raise ModelCallFailed(error) from None

    def close(self) -> None:
        for provider in self._providers.values():
            try:
                provider.close()
            except Exception:  # closing an HTTP client must not hide the run's result
                pass
        self._providers.clear()


def failure_text(error: ClassifiedError) -> str:
    """The final text of a run the model call ended: what failed and what to do about it."""
    hints = {
        "auth": "Check the API key (and that it belongs to this provider).",
        "billing": "The account is out of credit: top it up, or configure agent.fallback.",
        "model_not_found": "Check the model name (--model / agent.model).",
        "format_error": "The provider rejected the request as malformed.",
        "context_overflow": "The conversation no longer fits the model's context window; start a new session.",
        "payload_too_large": "The request is too large for the provider; start a new session.",
    }
    if error.reason.value == "connection_refused":  # the message itself says where and what to do
        return f"Stopped: the model call failed: {error.message}."
    hint = hints.get(error.reason.value, "Retries and fallbacks were used up; try again later.")
    return f"Stopped: the model call failed: {error.describe()}. {hint}"
