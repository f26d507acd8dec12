"""Brave Search's web search API: GET /res/v1/web/search?q=...&count=N with the key in
X-Subscription-Token; hits in web.results[] (url, title, description with <strong> markup).

Brave answers a bad key with 422 and the code SUBSCRIPTION_TOKEN_INVALID (not 401), and a used-up
plan with 429 and a QUOTA code; both are told apart from a plain rate limit here. One search
returns at most 20 results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import Settings
from .base import Endpoint, Hit, Kind, SearchFailure, hit, keyed_endpoint
from .http import error_code, request_json

if TYPE_CHECKING:
    import httpx

BRAVE_URL = "https://api.search.brave.com"
ENV = ("BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY")
NEEDS = "BRAVE_API_KEY (or BRAVE_SEARCH_API_KEY, or web.brave_api_key)"
MAX_RESULTS = 20


def brave_endpoint(settings: Settings) -> Endpoint | None:
    return keyed_endpoint(settings, "brave", "Brave Search", BRAVE_URL, ENV)


def _classify(status: int, payload: Any) -> Kind | None:
    code = error_code(payload).upper()
    if "TOKEN" in code:  # SUBSCRIPTION_TOKEN_INVALID, and a missing one
        return Kind.AUTH
    if "QUOTA" in code:
        return Kind.QUOTA
    return None


class BraveSearch:
    max_results: int | None = MAX_RESULTS

    def __init__(self, endpoint: Endpoint, http: httpx.Client) -> None:
        self.endpoint, self._http = endpoint, http

    def search(self, query: str, limit: int, timeout: float) -> list[Hit]:
        data = request_json(self._http, self.endpoint, "GET", "/res/v1/web/search", timeout=timeout,
                            headers={"X-Subscription-Token": self.endpoint.key or ""},
                            params={"q": query, "count": min(limit, MAX_RESULTS)}, classify=_classify)
        if not isinstance(data, dict):
            raise SearchFailure(self.endpoint, Kind.SETUP, "the answer is not a search response")
        web = data.get("web") or {}  # no "web" section: nothing found
        results = web.get("results") if isinstance(web, dict) else None
        hits = [hit(r.get("url"), r.get("title"), r.get("description")) for r in results or [] if isinstance(r, dict)]
        return [h for h in hits if h][:limit]
