"""A local server that speaks Firecrawl's v2 API (`POST /v2/search`, `POST /v2/scrape`).

It serves a corpus of documents given to it, checks the bearer key like the real service, and
answers in the real wire format (camelCase JSON, `{"success": ..., "data": ...}`), so the real
firecrawl-py client can be pointed at it (`api_url`, or FIRECRAWL_API_URL). Scraping a URL outside
the corpus fails the way Firecrawl does for an unresolvable host; a corpus URL whose status is
not 200 comes back as a document with that `statusCode`, as Firecrawl reports a target's 404.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeDocument:
    url: str
    title: str
    markdown: str
    description: str = ""
    status: int = 200
    links: list[str] = field(default_factory=list)  # absolute URLs, as Firecrawl's "links" format gives them


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeFirecrawl) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length", "0"))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._reply(400, {"success": False, "error": "Bad Request", "details": "body is not JSON"})
        with fake.lock:
            fake.requests.append({"path": self.path, "body": body, "authorization": self.headers.get("Authorization")})
        if fake.latency:
            time.sleep(fake.latency)
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            return self._reply(401, {"success": False, "error": "Unauthorized: Invalid token"})
        if self.path == "/v2/search":
            return self._search(body)
        if self.path == "/v2/scrape":
            return self._scrape(body)
        return self._reply(404, {"success": False, "error": f"Cannot POST {self.path}"})

    def _search(self, body: dict[str, Any]) -> None:
        query = str(body.get("query", "")).strip()
        if not query:
            return self._reply(400, {"success": False, "error": "Bad Request", "details": "query is required"})
        limit = int(body.get("limit") or 5)
        terms = [t.lower() for t in query.split()]
        scored = []
        for doc in self.server.fake.corpus.values():
            text = f"{doc.title} {doc.description} {doc.markdown}".lower()
            score = sum(text.count(term) for term in terms)
            if score:
                scored.append((-score, doc.url, doc))
        scored.sort(key=lambda item: (item[0], item[1]))
        web = [
            {"url": doc.url, "title": doc.title, "description": doc.description, "position": i + 1}
            for i, (_, _, doc) in enumerate(scored[:limit])
        ]
        self._reply(200, {"success": True, "data": {"web": web}, "creditsUsed": len(web)})

    def _scrape(self, body: dict[str, Any]) -> None:
        url = str(body.get("url", ""))
        doc = self.server.fake.corpus.get(url)
        if doc is None:
            return self._reply(
                500,
                {
                    "success": False,
                    "code": "SCRAPE_DNS_RESOLUTION_ERROR",
                    "error": f"DNS resolution failed for hostname of {url}",
                },
            )
        metadata = {"title": doc.title, "sourceURL": url, "url": url, "statusCode": doc.status, "contentType": "text/html"}
        if doc.status >= 400:
            metadata["error"] = "Not Found" if doc.status == 404 else f"HTTP {doc.status}"
        data: dict[str, Any] = {"metadata": metadata}
        if "markdown" in (body.get("formats") or ["markdown"]):
            data["markdown"] = doc.markdown
        if "links" in (body.get("formats") or []):
            data["links"] = doc.links
        self._reply(200, {"success": True, "data": data})

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeFirecrawl:
    """Serve `documents` as Firecrawl v2 on 127.0.0.1 until `close()`; `url` is its api_url."""

    def __init__(self, documents: list[FakeDocument], *, api_key: str | None = "fc-test-key", latency: float = 0.0) -> None:
        self.corpus = {doc.url: doc for doc in documents}
        self.api_key = api_key
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server = _Server(self)
        # shutdown() waits for the loop to notice, up to one poll: 0.05 s, not the default 0.5 s per test
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-firecrawl", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def paths(self) -> list[str]:
        with self.lock:
            return [r["path"] for r in self.requests]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeFirecrawl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
