"""Classify a failed model call into a reason with recovery flags, and compute retry delays.

The loop never looks at exceptions itself: it reads the flags of `ClassifiedError`.

Order of evidence: the HTTP status, refined by the error body and message (a 400 that says the
prompt is too long is a context overflow, a 429 that talks about credits is billing, a 402 that
says "try again in" is a rate limit); then transport failures by exception type (a refused
connection is its own reason: nothing listens at the URL, so waiting will not help); else
unknown, which is retried with backoff.

The server's own advice wins over the status: `x-should-retry: true|false` decides whether the
call is retried, and `Retry-After` (seconds or an HTTP date) or `retry-after-ms` sets the wait.
"""

from __future__ import annotations

import dataclasses
import email.utils
import enum
import random
import time
from dataclasses import dataclass
from typing import Any


class FailoverReason(enum.StrEnum):
    auth = "auth"
    billing = "billing"
    rate_limit = "rate_limit"
    overloaded = "overloaded"
    server_error = "server_error"
    timeout = "timeout"
    connection_refused = "connection_refused"
    context_overflow = "context_overflow"
    payload_too_large = "payload_too_large"
    model_not_found = "model_not_found"
    format_error = "format_error"
    unknown = "unknown"


@dataclass(frozen=True)
class ClassifiedError:
    reason: FailoverReason
    retryable: bool  # the same request may succeed after a wait
    should_compress: bool  # shrink the history and retry; never a reason to switch provider
    should_fallback: bool  # try the next provider in the chain (at once, or once retries run out)
    message: str
    status_code: int | None = None
    retry_after: float | None = None  # seconds, when the provider said
    max_retries: int | None = None  # a cap below the configured retries for this reason

    def describe(self) -> str:
        status = f"HTTP {self.status_code} " if self.status_code else ""
        return f"{self.reason.value} ({status}{self.message[:300]})"


# (reason, retryable, compress, fallback)
_POLICY: dict[FailoverReason, tuple[bool, bool, bool]] = {
    FailoverReason.auth: (False, False, True),
    FailoverReason.billing: (False, False, True),
    FailoverReason.rate_limit: (True, False, True),
    FailoverReason.overloaded: (True, False, True),
    FailoverReason.server_error: (True, False, True),
    FailoverReason.timeout: (True, False, True),
    FailoverReason.connection_refused: (True, False, True),
    FailoverReason.context_overflow: (False, True, False),
    FailoverReason.payload_too_large: (False, True, False),
    FailoverReason.model_not_found: (False, False, True),
    FailoverReason.format_error: (False, False, False),
    FailoverReason.unknown: (True, False, True),
}

_CONTEXT_PATTERNS = (
    "context length", "context_length", "context window", "maximum context", "prompt is too long",
    "too many tokens", "input is too long", "exceeds the context", "reduce the length",
    "max_tokens_exceeded", "string too long", "input too long", "token limit",
)
_BILLING_PATTERNS = ("insufficient_quota", "billing", "credit balance", "credits", "payment", "quota exceeded")
_TRANSIENT_PATTERNS = ("try again", "retry after", "resets at", "per minute", "temporarily")
_OVERLOAD_PATTERNS = ("overloaded", "capacity", "unavailable")
_MODEL_PATTERNS = ("model", "does not exist", "not found", "no such")
_TIMEOUT_TYPES = (
    "APITimeoutError",
    "TimeoutException",
    "ReadTimeout",
    "ConnectTimeout",
    "WriteTimeout",
    "PoolTimeout",
    "TimeoutError",
)
_TRANSPORT_TYPES = (
    "APIConnectionError",
    "ConnectError",
    "RemoteProtocolError",
    "ReadError",
    "ConnectionError",
    "ProtocolError",
)


# A refused connection gets one quick retry (a local server that is just starting), then the
# next provider or a clear error: the full backoff would only make someone wait to be told.
REFUSED_RETRIES = 1
REFUSED_DELAY = 0.5


def _make(
    reason: FailoverReason, message: str, status: int | None = None, retry_after: float | None = None
) -> ClassifiedError:
    retryable, compress, fallback = _POLICY[reason]
    return ClassifiedError(reason, retryable, compress, fallback, message, status, retry_after)


def _headers(exc: BaseException) -> Any:
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None)


def _body_text(exc: BaseException) -> str:
    body: Any = getattr(exc, "body", None)
    parts = [str(exc)]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts += [str(error.get(k, "")) for k in ("type", "code", "message")]
        else:
            parts.append(str(error))
    elif body is not None:
        parts.append(str(body))
    return " ".join(p for p in parts if p).lower()


def retry_after_seconds(value: str, now: float | None = None) -> float | None:
    """A Retry-After value, seconds or an HTTP date, as seconds from `now` (never negative);
    None when it is neither."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT; a date without a zone is taken as such
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _retry_after(exc: BaseException) -> float | None:
    headers = _headers(exc)
    if headers is None:
        return None
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    return retry_after_seconds(value) if isinstance(value, str) and value else None


def _should_retry(exc: BaseException) -> bool | None:
    """The server's `x-should-retry` verdict, when it gave one."""
    headers = _headers(exc)
    value = headers.get("x-should-retry") if headers is not None else None
    if not isinstance(value, str):
        return None
    return {"true": True, "false": False}.get(value.strip().lower())


def _refused(exc: BaseException) -> bool:
    """Whether the connection was refused somewhere down the exception's chain (the SDKs wrap
    httpx's ConnectError, which wraps the socket's ConnectionRefusedError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or "connection refused" in str(current).lower():
            return True
        current = current.__cause__ or current.__context__
    return False


def _url(exc: BaseException) -> str:
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    return str(url) if url is not None else ""


def refused_message(url: str) -> str:
    where = url or "the provider's base URL"
    return (
        f"connection refused by {where}: nothing is listening there. Start the server (for Ollama: "
        "`ollama serve`; for vLLM: `vllm serve MODEL`) or point --base-url / agent.base_url at "
        "where it runs"
    )


def classify(exc: BaseException) -> ClassifiedError:
    error = _classify(exc)
    verdict = _should_retry(exc)
    if verdict is not None and verdict != error.retryable:
        error = dataclasses.replace(error, retryable=verdict)
    return error


def _classify(exc: BaseException) -> ClassifiedError:
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    text = _body_text(exc)
    message = str(exc)
    wait = _retry_after(exc)
    if status is not None:
        return _make(_by_status(status, text), message, status, wait)
    if _refused(exc):
        error = _make(FailoverReason.connection_refused, refused_message(_url(exc)), retry_after=REFUSED_DELAY)
        return dataclasses.replace(error, max_retries=REFUSED_RETRIES)
    name = type(exc).__name__
    if "overloaded" in text:
        return _make(FailoverReason.overloaded, message)
    if any(p in text for p in _CONTEXT_PATTERNS):
        return _make(FailoverReason.context_overflow, message)
    if name in _TIMEOUT_TYPES or "timed out" in text or "timeout" in text:
        return _make(FailoverReason.timeout, message)
    if name in _TRANSPORT_TYPES or isinstance(exc, ConnectionError):
        return _make(FailoverReason.timeout, message)  # transport hiccup: rebuild and retry
    if any(p in text for p in ("api key", "api_key", "authentication")):
        return _make(FailoverReason.auth, message)  # the SDK refused before sending: no credentials
    return _make(FailoverReason.unknown, message)


def _by_status(status: int, text: str) -> FailoverReason:
    if status in (401, 403):
        return FailoverReason.auth
    if status == 402:
        transient = any(p in text for p in _TRANSIENT_PATTERNS)
        return FailoverReason.rate_limit if transient else FailoverReason.billing
    if status == 429:
        if any(p in text for p in _BILLING_PATTERNS) and not any(p in text for p in _TRANSIENT_PATTERNS):
            return FailoverReason.billing
        return FailoverReason.rate_limit
    if status == 413:
        return FailoverReason.payload_too_large
    if status in (400, 422):
        if any(p in text for p in _CONTEXT_PATTERNS):
            return FailoverReason.context_overflow
        if "model" in text and any(p in text for p in ("not found", "does not exist", "invalid model")):
            return FailoverReason.model_not_found
        return FailoverReason.format_error
    if status == 404:
        return FailoverReason.model_not_found if any(p in text for p in _MODEL_PATTERNS) else FailoverReason.unknown
    if status in (408, 504, 524):
        return FailoverReason.timeout
    if status in (503, 529) or any(p in text for p in _OVERLOAD_PATTERNS):
        return FailoverReason.overloaded
    if status >= 500:
        return FailoverReason.server_error
    return FailoverReason.unknown


_tick = 0


def jittered_backoff(attempt: int, *, base: float, cap: float, jitter_ratio: float = 0.5) -> float:
    """Delay before retry number `attempt` (1-based): exponential, capped, plus random jitter so
    many sessions hitting the same limit do not retry in lock-step."""
    global _tick
    _tick += 1
    delay: float = min(base * 2.0 ** max(0, attempt - 1), cap)
    rng = random.Random(time.time_ns() ^ (_tick * 0x9E3779B9))
    jitter: float = rng.uniform(0, jitter_ratio * delay)
    return delay + jitter
