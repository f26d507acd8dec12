"""Local servers that speak the search APIs web_search uses, in their real wire formats:

- SearXNG: GET /search?q=...&format=json -> {"query", "results": [{"url", "title", "content", ...}],
  "answers", "corrections", "infoboxes", "suggestions", "unresponsive_engines"}; 403 (an HTML
  page) when the instance does not list json in search.formats.
- Brave Search: GET /res/v1/web/search?q=...&count=N, key in X-Subscription-Token ->
  {"type": "search", "query": {...}, "web": {"type": "search", "results": [{"url", "title",
  "description" (with <strong> markup), ...}]}}; a bad key is 422 SUBSCRIPTION_TOKEN_INVALID;
  errors are {"type": "ErrorResponse", "error": {"id", "status", "code", "detail", "meta"}}.
- Tavily: POST /search, JSON body {"query", "max_results", ...}, Authorization: Bearer ->
  {"query", "answer", "images", "results": [{"url", "title", "content", "score", ...}],
  "response_time"}; errors {"detail": {"error": ...}}, 432 for a plan's limit.
- Exa: POST /search, JSON body {"query", "numResults", "contents": {...}}, key in x-api-key ->
  {"requestId", "results": [{"id", "url", "title", "highlights" | "text" | "summary", ...}]};
  errors {"requestId", "error", "tag"}, 402 when the credits are gone.

Each serves a corpus (ranked by how often the query's words occur), checks the key as the
service does and records every request. `fail_with(...)` makes later answers a given failure;
`stall()` makes the handler wait (until `close()`) so a caller's deadline is what ends the call.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

KINDS = ("searxng", "brave", "tavily", "exa")
STALL_LIMIT = 120.0  # a stalled handler gives up by itself after this, whatever the test does
SEARXNG_PAGE = 10  # results SearXNG returns for one page


@dataclass
class Page:
    url: str
    title: str
    text: str


@dataclass
class Failure:
    status: int
    body: Any  # JSON-able, or str (sent as text/html)
    headers: dict[str, str]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeSearchAPI) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = {"method": method, "path": parts.path, "query": {k: v[-1] for k, v in parse_qs(parts.query).items()},
                   "body": body, "headers": {k.lower(): v for k, v in self.headers.items()}}
        with fake.lock:
            fake.requests.append(request)
            failure, stalling = fake.failure, fake.stalling
        if stalling:
            fake.stalled.set()
            fake.released.wait(STALL_LIMIT)
            return
        if failure is not None:
            return self._reply(failure.status, failure.body, failure.headers)
        handler = getattr(self, f"_{fake.kind}")
        handler(method, parts.path, request)

    # -- each API ---------------------------------------------------------------------------------

    def _searxng(self, method: str, path: str, request: dict[str, Any]) -> None:
        fake = self.server.fake
        if path != "/search":
            return self._reply(404, "<html><body><h1>Not Found</h1></body></html>")
        params = request["query"]
        if params.get("format") != "json" or not fake.json_format:
            return self._reply(403, "<!doctype html><html><title>403 Forbidden</title><h1>Forbidden</h1></html>")
        query = params.get("q", "")
        if not query:
            return self._reply(400, {"error": "No query"})
        found = [] if fake.unresponsive else fake.ranked(query)[:SEARXNG_PAGE]
        results = [{"url": p.url, "title": p.title, "content": p.text, "engine": "duckduckgo",
                    "parsed_url": list(urlsplit(p.url)), "template": "default.html", "engines": ["duckduckgo"],
                    "positions": [i + 1], "score": 1.0 / (i + 1), "category": "general"} for i, p in enumerate(found)]
        self._reply(200, {"query": query, "number_of_results": 0, "results": results, "answers": [],
                          "corrections": [], "infoboxes": [], "suggestions": [],
                          "unresponsive_engines": [[engine, "CAPTCHA"] for engine in fake.unresponsive]})

    def _brave(self, method: str, path: str, request: dict[str, Any]) -> None:
        fake = self.server.fake
        if method != "GET" or path != "/res/v1/web/search":
            return self._reply(404, brave_error(404, "RESOURCE_NOT_FOUND", "Resource not found"))
        if request["headers"].get("x-subscription-token") != fake.api_key:
            return self._reply(
                422, brave_error(422, "SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid.")
            )
        params = request["query"]
        count = int(params.get("count", 20))
        if not 1 <= count <= 20 or not params.get("q"):
            return self._reply(422, brave_error(422, "VALIDATION", "Unable to validate request parameter(s)"))
        query = params["q"]
        found = fake.ranked(query)[:count]
        answer: dict[str, Any] = {"type": "search", "query": {"original": query, "show_strict_warning": False,
                                                              "is_navigational": False, "spellcheck_off": True}}
        if found:  # Brave leaves out a section that has nothing
            answer["web"] = {"type": "search", "family_friendly": True, "results": [
                {"type": "search_result", "title": p.title, "url": p.url, "is_source_local": False,
                 "is_source_both": False, "description": strong(p.text, query), "language": "en",
                 "family_friendly": True, "profile": {"name": urlsplit(p.url).hostname, "url": p.url},
                 "meta_url": {"scheme": "https", "netloc": urlsplit(p.url).hostname, "path": urlsplit(p.url).path}}
                for p in found]}
            answer["mixed"] = {
                "type": "mixed",
                "main": [{"type": "web", "index": i, "all": False} for i in range(len(found))],
            }
        self._reply(200, answer)

    def _tavily(self, method: str, path: str, request: dict[str, Any]) -> None:
        fake = self.server.fake
        if method != "POST" or path != "/search":
            return self._reply(404, {"detail": "Not Found"})
        if request["headers"].get("authorization") != f"Bearer {fake.api_key}":
            return self._reply(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}})
        body = request["body"] if isinstance(request["body"], dict) else {}
        limit = int(body.get("max_results", 5))
        if not 0 <= limit <= 20 or not body.get("query"):
            return self._reply(400, {"detail": {"error": "Invalid request: max_results must be between 0 and 20."}})
        found = fake.ranked(str(body["query"]))[:limit]
        self._reply(200, {"query": body["query"], "follow_up_questions": None, "answer": None, "images": [],
                          "results": [{"url": p.url, "title": p.title, "content": p.text, "score": 0.9 - i / 100,
                                       "raw_content": None} for i, p in enumerate(found)],
                          "response_time": 0.42, "request_id": str(uuid.uuid4())})

    def _exa(self, method: str, path: str, request: dict[str, Any]) -> None:
        fake = self.server.fake
        request_id = uuid.uuid4().hex
        if method != "POST" or path != "/search":
            return self._reply(404, {"requestId": request_id, "error": "Not found", "tag": "NOT_FOUND"})
        if request["headers"].get("x-api-key") != fake.api_key:
            return self._reply(401, {"requestId": request_id, "error": "Invalid API key", "tag": "INVALID_API_KEY"})
        body = request["body"] if isinstance(request["body"], dict) else {}
        limit = int(body.get("numResults", 10))
        if not 1 <= limit <= 100 or not body.get("query"):
            return self._reply(400, {"requestId": request_id, "error": "numResults must be between 1 and 100",
                                     "tag": "INVALID_REQUEST_BODY"})
        contents = body.get("contents") or {}
        results = []
        for p in fake.ranked(str(body["query"]))[:limit]:
            result: dict[str, Any] = {
                "id": p.url,
                "url": p.url,
                "title": p.title,
                "publishedDate": None,
                "author": None,
            }
            if "highlights" in contents:
                result["highlights"], result["highlightScores"] = [p.text], [0.5]
            if "text" in contents:
                result["text"] = p.text
            if "summary" in contents:
                result["summary"] = p.text
            results.append(result)
        self._reply(200, {"requestId": request_id, "resolvedSearchType": "neural", "searchType": "auto",
                          "results": results, "costDollars": {"total": 0.005}})

    def _reply(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        if isinstance(payload, str):
            data, kind = payload.encode(), "text/html; charset=utf-8"
        else:
            data, kind = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def brave_error(status: int, code: str, detail: str, **meta: Any) -> dict[str, Any]:
    return {"type": "ErrorResponse", "error": {"id": str(uuid.uuid4()), "status": status, "code": code,
                                               "detail": detail, "meta": meta}, "time": 1767225600}


def strong(text: str, query: str) -> str:
    """Brave's description markup: the query's words in <strong>, with an HTML entity or two."""
    words = {w.lower() for w in query.split()}
    marked = " ".join(f"<strong>{w}</strong>" if w.lower().strip(".,") in words else w for w in text.split())
    return marked.replace("'", "&#x27;")


class FakeSearchAPI:
    """Serve `pages` as the search API `kind` on 127.0.0.1 until `close()`; `url` is its base URL."""

    def __init__(self, kind: str, pages: list[Page], *, api_key: str = "search-test-key") -> None:
        assert kind in KINDS, kind
        self.kind, self.api_key = kind, api_key
        self.pages = list(pages)
        self.json_format = True  # SearXNG: search.formats lists json
        self.unresponsive: list[str] = []  # SearXNG: engines that failed (and so no results)
        self.failure: Failure | None = None
        self.stalling = False
        self.stalled, self.released = threading.Event(), threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-{kind}", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def ranked(self, query: str) -> list[Page]:
        terms = [t.lower() for t in query.split()]
        scored = []
        for page in self.pages:
            text = f"{page.title} {page.text}".lower()
            score = sum(text.count(term) for term in terms)
            if score:
                scored.append((-score, page.url, page))
        return [page for _, _, page in sorted(scored, key=lambda item: (item[0], item[1]))]

    def fail_with(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.failure = Failure(status, body, headers or {})

    def rate_limited(self, retry_after: int = 7) -> None:
        """The provider's answer to too many requests, as it sends it."""
        bodies = {
            "searxng": "<html><title>429 Too Many Requests</title></html>",
            "brave": brave_error(
                429,
                "RATE_LIMITED",
                "Request rate limit exceeded for plan.",
                plan="Free",
                rate_limit=1,
                rate_current=2,
                quota_limit=2000,
                quota_current=12,
                component="rate_limiter",
            ),
            "tavily": {"detail": {"error": "Rate limit exceeded. Please slow down your requests."}},
            "exa": {"requestId": uuid.uuid4().hex, "error": "Rate limit exceeded", "tag": "RATE_LIMIT_EXCEEDED"},
        }
        self.fail_with(429, bodies[self.kind], {"Retry-After": str(retry_after)})

    def quota_used_up(self) -> None:
        """The provider's answer once the plan's credits are gone."""
        failures = {
            "brave": (
                429,
                brave_error(
                    429,
                    "QUOTA_LIMITED",
                    "Request quota limit exceeded for plan.",
                    plan="Free",
                    quota_limit=2000,
                    quota_current=2000,
                    component="quota_limiter",
                ),
            ),
            "tavily": (
                432,
                {"detail": {"error": "This request exceeds your plan's set usage limit. Please upgrade your plan."}},
            ),
            "exa": (
                402,
                {"requestId": uuid.uuid4().hex, "error": "You have run out of credits.", "tag": "NO_MORE_CREDITS"},
            ),
        }
        status, body = failures[self.kind]
        self.fail_with(status, body)

    def stall(self) -> None:
        """Hold every later request without answering (until close)."""
        with self.lock:
            self.stalling = True

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeSearchAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
