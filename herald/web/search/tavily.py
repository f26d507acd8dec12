"""Tavily's search API: POST /search with a JSON body and the key as a Bearer token; hits in
results[] (url, title, content). Errors carry {"detail": {"error": ...}}; 432 and 433 mean the
plan's or the pay-as-you-go limit is used up. One search returns at most 20 results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import Settings
from .base import Endpoint, Hit, Kind, SearchFailure, hit, keyed_endpoint
from .http import request_json

if TYPE_CHECKING:
    import httpx

TAVILY_URL = "https://api.tavily.com"
ENV = ("TAVILY_API_KEY",)
NEEDS = "TAVILY_API_KEY (or web.tavily_api_key)"
MAX_RESULTS = 20


def tavily_endpoint(settings: Settings) -> Endpoint | None:
    return keyed_endpoint(settings, "tavily", "Tavily", TAVILY_URL, ENV)


def _classify(status: int, payload: Any) -> Kind | None:
    return Kind.QUOTA if status in (432, 433) else None


class TavilySearch:
    max_results: int | None = MAX_RESULTS

    def __init__(self, endpoint: Endpoint, http: httpx.Client) -> None:
        self.endpoint, self._http = endpoint, http

    def search(self, query: str, limit: int, timeout: float) -> list[Hit]:
        body = {"query": query, "max_results": min(limit, MAX_RESULTS), "search_depth": "basic",
                "include_answer": False, "include_raw_content": False, "include_images": False}
        data = request_json(self._http, self.endpoint, "POST", "/search", timeout=timeout, body=body,
                            headers={"Authorization": f"Bearer {self.endpoint.key}"}, classify=_classify)
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise SearchFailure(self.endpoint, Kind.SETUP, "the answer has no 'results' list")
        hits = [hit(r.get("url"), r.get("title"), r.get("content")) for r in results if isinstance(r, dict)]
        return [h for h in hits if h][:limit]
