"""A local web site on 127.0.0.1 for the cache, politeness and crawl tests, whose pages a test
sets up (body, status, caching headers, ETag, Last-Modified, a redirect) and which answers
conditional requests the way a server does (304 when the validator matches).

It speaks HTTP/1.1 with keep-alive, and tells a test what it saw: every request with its
headers, the connections opened and still open, and (for pages marked `hold`) how many requests
were in flight at once; held requests wait until `release()`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HTML = "<!doctype html><html><head><title>{title}</title></head><body><main><h1>{title}</h1>{body}</main></body></html>"


@dataclass
class Page:
    body: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    last_modified: str | None = None
    location: str | None = None
    hold: bool = False
    content_type: str = "text/html; charset=utf-8"


def html(title: str, text: str = "", links: Sequence[tuple[str, str]] = (), nav: Sequence[tuple[str, str]] = ()) -> str:
    """A page with a heading, a paragraph, content links and a navigation block."""
    content = f"<p>{text or f'This page is about {title}.'}</p>"
    content += "".join(f"<p>Read <a href='{href}'>{label}</a> next.</p>" for href, label in links)
    menu = "".join(f"<li><a href='{href}'>{label}</a></li>" for href, label in nav)
    page = HTML.format(title=title, body=content)
    return page.replace("<body>", f"<body><nav><ul>{menu}</ul></nav>") if nav else page


class _Handler(BaseHTTPRequestHandler):
    server: Site
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections_opened += 1
            self.server.connections_open += 1

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.changed:
                self.server.connections_open -= 1
                self.server.changed.notify_all()

    def do_GET(self) -> None:
        site = self.server
        path = urlsplit(self.path).path
        with site.lock:
            site.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            site.hits[path] += 1
            page = site.pages.get(path)
        if page is None:
            return self._send(404, {}, HTML.format(title="Not found", body="<p>No such page.</p>"), "text/html")
        if page.hold:
            self._held()
        if page.location is not None:
            return self._send(page.status, {"Location": page.location, **page.headers}, "", "")
        validators = {"ETag": page.etag, "Last-Modified": page.last_modified}
        kept = {k: v for k, v in validators.items() if v}
        if (page.etag and self.headers.get("If-None-Match") == page.etag) or (
                page.last_modified and self.headers.get("If-Modified-Since") == page.last_modified):
            with site.lock:
                site.not_modified += 1
            return self._send(304, {**page.headers, **kept}, None, "")
        self._send(page.status, {**page.headers, **kept}, page.body, page.content_type)

    def _held(self) -> None:
        site = self.server
        with site.changed:
            site.in_flight += 1
            site.most_in_flight = max(site.most_in_flight, site.in_flight)
            site.changed.notify_all()
        site.released.wait(60)
        with site.changed:
            site.in_flight -= 1
            site.changed.notify_all()

    def _send(self, status: int, headers: dict[str, str], body: str | None, content_type: str) -> None:
        data = (body or "").encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if content_type:
            self.send_header("Content-Type", content_type)
        if body is not None:  # a 304 has no body and no length
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Site(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages: dict[str, Page] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.hits: Counter[str] = Counter()
        self.not_modified = 0
        self.connections_opened = 0
        self.connections_open = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.released = threading.Event()
        self.port: int = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def url(self, path: str = "", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def add(self, path: str, page: Page | str) -> str:
        self.pages[path] = page if isinstance(page, Page) else Page(page)
        return self.url(path)

    def headers_of(self, path: str) -> list[dict[str, str]]:
        """The headers of every request for `path`, in order."""
        with self.lock:
            return [headers for seen, headers in self.requests if urlsplit(seen).path == path]

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds (checked whenever the site's counters change)."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()
