"""Exa's search API: POST /search with a JSON body and the key in x-api-key; hits in results[]
(url, title and the contents asked for). Herald asks for highlights (the passages that answer
the query, a few hundred characters) as each hit's description; a summary or text is used when
that is what came back. Errors carry {"error": ..., "tag": ...}; 402 means the credits are gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import Settings
from .base import Endpoint, Hit, Kind, SearchFailure, hit, keyed_endpoint
from .http import request_json

if TYPE_CHECKING:
    import httpx

EXA_URL = "https://api.exa.ai"
ENV = ("EXA_API_KEY",)
NEEDS = "EXA_API_KEY (or web.exa_api_key)"
MAX_RESULTS = 100
DESCRIPTION_CHARS = 400


def exa_endpoint(settings: Settings) -> Endpoint | None:
    return keyed_endpoint(settings, "exa", "Exa", EXA_URL, ENV)


def _description(result: dict[str, Any]) -> object:
    highlights = result.get("highlights")
    if isinstance(highlights, list) and highlights:
        return " … ".join(h for h in highlights if isinstance(h, str))
    text = result.get("summary") or result.get("text") or ""
    return text[:DESCRIPTION_CHARS] if isinstance(text, str) else ""


class ExaSearch:
    max_results: int | None = MAX_RESULTS

    def __init__(self, endpoint: Endpoint, http: httpx.Client) -> None:
        self.endpoint, self._http = endpoint, http

    def search(self, query: str, limit: int, timeout: float) -> list[Hit]:
        body = {"query": query, "numResults": min(limit, MAX_RESULTS), "type": "auto",
                "contents": {"highlights": {"maxCharacters": DESCRIPTION_CHARS}}}
        data = request_json(self._http, self.endpoint, "POST", "/search", timeout=timeout, body=body,
                            headers={"x-api-key": self.endpoint.key or ""})
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise SearchFailure(self.endpoint, Kind.SETUP, "the answer has no 'results' list")
        hits = [hit(r.get("url"), r.get("title"), _description(r)) for r in results if isinstance(r, dict)]
        return [h for h in hits if h][:limit]
