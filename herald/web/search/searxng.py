"""A self-hosted SearXNG through its JSON API: GET /search?q=...&format=json.

The instance must serve the JSON format (`search: formats: [html, json]` in its settings.yml);
without it SearXNG answers 403, and the error says so. SearXNG takes no result count: one page
comes back (about ten to twenty results) and is cut to the limit asked. Credentials in the URL
(https://user:password@host/) are sent as basic auth and never shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config import Settings
from .base import Endpoint, Hit, Kind, SearchFailure, hit, shown_url
from .http import request_json

if TYPE_CHECKING:
    import httpx

SETTING = "the setting web.searxng_url"
NEEDS = "web.searxng_url (a SearXNG instance with the JSON format on)"


def searxng_endpoint(settings: Settings) -> Endpoint | None:
    url = settings.web.searxng_url.strip()
    if not url:
        return None
    return Endpoint("searxng", "SearXNG", shown_url(url), base=url.rstrip("/"), url_from=SETTING)


class SearxngSearch:
    max_results: int | None = None

    def __init__(self, endpoint: Endpoint, http: httpx.Client) -> None:
        self.endpoint, self._http = endpoint, http

    def search(self, query: str, limit: int, timeout: float) -> list[Hit]:
        try:
            data = request_json(self._http, self.endpoint, "GET", "/search", timeout=timeout,
                                params={"q": query, "format": "json"})
        except SearchFailure as exc:
            if exc.status == 403:
                raise SearchFailure(self.endpoint, Kind.SETUP, exc.detail + " (the instance does not serve JSON)",
                                    "The user must add json to search.formats in the instance's settings.yml "
                                    "(formats: [html, json]) and restart it.") from None
            raise
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise SearchFailure(self.endpoint, Kind.SETUP, "the answer has no 'results' list")
        hits = [
            h
            for h in (hit(r.get("url"), r.get("title"), r.get("content")) for r in results if isinstance(r, dict))
            if h
        ]
        unresponsive = data.get("unresponsive_engines") or []
        if not hits and unresponsive:
            # Nothing found because its engines failed (a CAPTCHA, a ban), not because nothing exists.
            said = "; ".join(
                " ".join(str(part) for part in e) if isinstance(e, list) else str(e) for e in unresponsive[:5]
            )
            raise SearchFailure(self.endpoint, Kind.DOWN, f"its engines did not answer ({said})",
                                "Try again later; the instance's engines are failing, not the query.")
        return hits[:limit]
