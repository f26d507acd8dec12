"""A local server that speaks Firecrawl's v2 API (`POST /v2/search`, `POST /v2/scrape`, and the
crawl: `POST /v2/crawl` starts a job, `GET /v2/crawl/{id}` its status and pages, `DELETE
/v2/crawl/{id}` cancels it).

It serves a corpus of documents given to it, checks the bearer key like the real service, and
answers in the real wire format (camelCase JSON, `{"success": ..., "data": ...}`), so the real
firecrawl-py client can be pointed at it (`api_url`, or FIRECRAWL_API_URL). Scraping a URL outside
the corpus fails the way Firecrawl does for an unresolvable host; a corpus URL whose status is
not 200 comes back as a document with that `statusCode`, as Firecrawl reports a target's 404.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass
class FakeDocument:
    url: str
    title: str
    markdown: str
    description: str = ""
    status: int = 200
    links: list[str] = field(default_factory=list)  # absolute URLs, as Firecrawl's "links" format gives them


@dataclass
class FakeCrawl:
    id: str
    pages: list[FakeDocument]
    formats: list[str]
    status: str = "scraping"
    polls: int = 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeFirecrawl) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _accepted(self, body: dict[str, Any]) -> bool:
        """Record the request; False (after answering 401) when its key is wrong."""
        fake = self.server.fake
        with fake.lock:
            fake.requests.append({"method": self.command, "path": self.path, "body": body,
                                  "authorization": self.headers.get("Authorization")})
        if fake.latency:
            time.sleep(fake.latency)
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            self._reply(401, {"success": False, "error": "Unauthorized: Invalid token"})
            return False
        return True

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._reply(400, {"success": False, "error": "Bad Request", "details": "body is not JSON"})
        if not self._accepted(body):
            return None
        if self.path == "/v2/search":
            return self._search(body)
        if self.path == "/v2/scrape":
            return self._scrape(body)
        if self.path == "/v2/crawl":
            return self._start_crawl(body)
        return self._reply(404, {"success": False, "error": f"Cannot POST {self.path}"})

    def do_GET(self) -> None:
        if not self._accepted({}):
            return None
        job = self._job()
        if job is None:
            return self._reply(404, {"success": False, "error": "Job not found"})
        with self.server.fake.lock:
            job.polls += 1
            if job.status == "scraping" and job.polls > self.server.fake.crawl_polls:
                job.status = "completed"
            done = job.status != "scraping"
        pages = job.pages if done else []
        self._reply(200, {"success": True, "status": job.status, "total": len(job.pages), "completed": len(pages),
                          "creditsUsed": len(pages), "expiresAt": "2030-01-01T00:00:00.000Z", "next": None,
                          "data": [self._document(doc, job.formats) for doc in pages]})

    def do_DELETE(self) -> None:
        if not self._accepted({}):
            return None
        job = self._job()
        if job is None:
            return self._reply(404, {"success": False, "error": "Job not found"})
        with self.server.fake.lock:
            if job.status != "scraping":
                return self._reply(409, {"success": False, "error": f"Crawl job is already {job.status}"})
            job.status = "cancelled"
        self._reply(200, {"success": True, "status": "cancelled"})

    def _job(self) -> FakeCrawl | None:
        match = re.fullmatch(r"/v2/crawl/([0-9a-f-]+)", self.path)
        return self.server.fake.crawls.get(match.group(1)) if match else None

    def _start_crawl(self, body: dict[str, Any]) -> None:
        """Breadth-first through the corpus by its documents' links, as the real crawl would: the
        start's host only (unless allowExternalLinks), includePaths as regexes on the path (the
        start page always), at most `limit` pages; a URL outside the corpus is skipped."""
        fake = self.server.fake
        start = str(body.get("url", ""))
        if not start:
            return self._reply(400, {"success": False, "error": "Bad Request", "details": "url is required"})
        limit = int(body.get("limit") or 10000)
        include = [re.compile(p) for p in body.get("includePaths") or []]
        host = urlsplit(start).netloc
        pages: list[FakeDocument] = []
        seen, queue = {start}, [start]
        while queue and len(pages) < limit:
            url = queue.pop(0)
            doc = fake.corpus.get(url)
            if doc is None:
                continue
            path = urlsplit(url).path or "/"
            if url == start or not include or any(p.search(path) for p in include):
                pages.append(doc)
            for link in doc.links:
                if link not in seen and (body.get("allowExternalLinks") or urlsplit(link).netloc == host):
                    seen.add(link)
                    queue.append(link)
        formats = (body.get("scrapeOptions") or {}).get("formats") or ["markdown"]
        job = FakeCrawl(str(uuid.uuid4()), pages, [f if isinstance(f, str) else f.get("type", "") for f in formats])
        with fake.lock:
            fake.crawls[job.id] = job
        self._reply(200, {"success": True, "id": job.id, "url": f"{fake.url}/v2/crawl/{job.id}"})

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
        self._reply(200, {"success": True, "data": self._document(doc, body.get("formats") or ["markdown"])})

    @staticmethod
    def _document(doc: FakeDocument, formats: list[str]) -> dict[str, Any]:
        metadata = {
            "title": doc.title,
            "sourceURL": doc.url,
            "url": doc.url,
            "statusCode": doc.status,
            "contentType": "text/html",
        }
        if doc.status >= 400:
            metadata["error"] = "Not Found" if doc.status == 404 else f"HTTP {doc.status}"
        data: dict[str, Any] = {"metadata": metadata}
        if "markdown" in formats:
            data["markdown"] = doc.markdown
        if "links" in formats:
            data["links"] = doc.links
        return data

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeFirecrawl:
    """Serve `documents` as Firecrawl v2 on 127.0.0.1 until `close()`; `url` is its api_url."""

    def __init__(self, documents: list[FakeDocument], *, api_key: str | None = "fc-test-key", latency: float = 0.0,
                 crawl_polls: int = 1) -> None:
        self.corpus = {doc.url: doc for doc in documents}
        self.crawls: dict[str, FakeCrawl] = {}
        self.crawl_polls = crawl_polls  # status requests a crawl answers "scraping" before it completes
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
