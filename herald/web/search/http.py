"""One JSON request to a search API over httpx, and its HTTP failures sorted into what to do.

Redirects are not followed: a provider's headers carry its key (X-Subscription-Token, x-api-key),
which httpx would send on to wherever a redirect points. A redirect is reported with its target,
for the user to put that address in the setting instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .base import Endpoint, Kind, SearchFailure, default_advice

if TYPE_CHECKING:
    import httpx

MAX_ANSWER_BYTES = 5_000_000  # a page of results is kilobytes; more is not a search API talking
USER_AGENT = "HeraldAgent/0.1 (+web_search)"
# (status, parsed body or None) -> the kind of failure, or None for the usual reading of the status.
Classify = Callable[[int, Any], Kind | None]


def new_client() -> httpx.Client:
    """The client web_search's HTTP providers share in a session. It honours HTTP(S)_PROXY, as an
    API client behind a proxy must; the provider's address is the user's setting, not the script's."""
    import httpx

    return httpx.Client(follow_redirects=False, headers={"User-Agent": USER_AGENT, "Accept": "application/json"})


def request_json(http: httpx.Client, endpoint: Endpoint, method: str, path: str, *, timeout: float,
                 headers: Mapping[str, str] | None = None, params: Mapping[str, Any] | None = None,
                 body: Any = None, classify: Classify | None = None) -> Any:
    """The JSON answer of `method endpoint.base+path`; SearchFailure for anything else."""
    import httpx

    end = time.monotonic() + timeout
    try:
        with http.stream(method, endpoint.base + path, headers=headers, params=params, json=body,
                         timeout=httpx.Timeout(timeout)) as response:
            data = _read(endpoint, response, end)
            status, reason = response.status_code, response.reason_phrase
            location = response.headers.get("location")
            retry_after = response.headers.get("retry-after")
    except httpx.TimeoutException:
        raise SearchFailure(endpoint, Kind.TIMEOUT, f"no answer within {timeout:.3g} s") from None
    except httpx.HTTPError as exc:
        raise SearchFailure(endpoint, Kind.DOWN, f"could not reach it ({type(exc).__name__}: {exc})") from None
    parsed = _parsed(data)
    if 300 <= status < 400:
        raise SearchFailure(endpoint, Kind.SETUP, f"HTTP {status}: it redirects to {location or 'nowhere'}",
                            f"Set {endpoint.url_from} to the address it redirects to (Herald does not follow "
                            "redirects with an API key).")
    if status >= 400:
        kind = (classify(status, parsed) if classify else None) or status_kind(status)
        said = error_detail(parsed) or _first_line(data)
        repeated = bool(reason) and said.lower().startswith(reason.lower())  # "401 Unauthorized: Unauthorized: ..."
        detail = f"HTTP {status}" if repeated or not reason else f"HTTP {status} {reason}"
        if said:
            detail += f": {said}"
        retry = retry_after if retry_after and retry_after.strip().isdigit() else None
        raise SearchFailure(endpoint, kind, detail, default_advice(endpoint, kind, retry), status)
    if parsed is None:
        raise SearchFailure(endpoint, Kind.SETUP, f"the answer is not JSON ({_first_line(data) or 'empty'})")
    return parsed


def status_kind(status: int) -> Kind:
    if status in (401, 403):
        return Kind.AUTH
    if status == 402:
        return Kind.QUOTA
    if status == 429:
        return Kind.RATE
    if status in (400, 413, 414, 422):
        return Kind.REQUEST
    if status in (404, 405):
        return Kind.SETUP
    return Kind.DOWN


def error_detail(payload: Any) -> str:
    """What an API's error body says, in the shapes providers use: {"error": "..."} (Exa,
    SearXNG), {"error": {"detail": ..., "code": ...}} (Brave), {"detail": {"error": ...}}
    (Tavily), {"detail": "..."}, {"message": "..."}."""
    if not isinstance(payload, dict):
        return ""
    for key in ("error", "detail", "message"):
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, dict):
            inner = error_detail(value)
            if inner:
                return inner
    return ""


def error_code(payload: Any) -> str:
    """The machine-readable code of an error body ({"error": {"code": ...}}, {"tag": ...}), or ""."""
    if not isinstance(payload, dict):
        return ""
    inner = payload.get("error")
    code = inner.get("code") if isinstance(inner, dict) else payload.get("tag") or payload.get("code")
    return code if isinstance(code, str) else ""


def _read(endpoint: Endpoint, response: httpx.Response, end: float) -> bytes:
    """The answer's bytes; each read waits at most the request's timeout, and an answer sent so
    slowly that the whole would take longer is given up on at the next chunk."""
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise SearchFailure(endpoint, Kind.SETUP, f"the answer is larger than {MAX_ANSWER_BYTES:,} bytes")
        if time.monotonic() > end:
            raise SearchFailure(endpoint, Kind.TIMEOUT, "the answer was still arriving when the time was up")
    return bytes(body)


def _parsed(data: bytes) -> Any:
    try:
        return json.loads(data) if data.strip() else None
    except ValueError:
        return None


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    line = text.splitlines()[0].strip() if text else ""
    return "" if line.startswith("<") else line[:200]  # an HTML error page's first line says nothing
