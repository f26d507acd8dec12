"""Local HTTP servers on 127.0.0.1 for the hop tests: redirects (absolute, relative, chains,
loops), a page that embeds another origin, and a page that sends its headers and then stalls.
Every request is counted, so a test can tell that a refused hop never reached a server."""

from __future__ import annotations

import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PAGE = "<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>"


def embeds(other: str) -> str:
    """A page that reaches `other` every way a page can: a frame, an image, fetch(), a worker's
    fetch, a WebSocket, a stylesheet; and says when its own script has run."""
    ws = other.replace("http://", "ws://")
    worker = f"fetch('{other}/from-worker').catch(() => 0)"
    return PAGE.format(title="Embeds", body=(
        f"<iframe src='{other}/frame'></iframe><img src='{other}/img.png'>"
        f"<link rel='stylesheet' href='{other}/style.css'>"
        "<p id='done'>waiting</p><script>"
        f"fetch('{other}/xhr').catch(() => 0);"
        f"try {{ new WebSocket('{ws}/ws'); }} catch (e) {{}}"
        f"new Worker(URL.createObjectURL(new Blob([\"{worker}\"], {{type: 'text/javascript'}})));"
        "setTimeout(() => { document.getElementById('done').textContent = 'script ran'; }, 300);"
        "</script>"))


class _Handler(BaseHTTPRequestHandler):
    server: HopServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with self.server.lock:
            self.server.hits.append(self.path)
            self.server.arrived.set()
        if url.path == "/redirect":
            return self._redirect(query["to"], int(query.get("code", "302")))
        if url.path.startswith("/chain/"):
            left = int(url.path.rsplit("/", 1)[1])
            return self._redirect(f"/chain/{left - 1}" if left > 0 else "/page", 302)
        if url.path == "/relative":
            return self._redirect("page?from=relative", 301)
        if url.path == "/loop":
            return self._redirect("/loop", 302)
        if url.path == "/embeds":
            return self._send(200, embeds(query["other"]))
        if url.path == "/stall":
            return self._stall()
        self._send(200, PAGE.format(title="Hop page", body=f"<p>You reached {url.path} on this server.</p>"))

    def _redirect(self, location: str, code: int) -> None:
        self.send_response(code)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stall(self) -> None:
        """Headers and the start of a page, then nothing until the client hangs up (or 10 min)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b"<!doctype html><html><head><title>Stalling</title></head><body><p>more soon")
        self.wfile.flush()
        with self.server.lock:
            self.server.stalled.set()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 0.5)
            if readable:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return
                except OSError:
                    return
                time.sleep(0.05)


class HopServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: list[str] = []
        self.lock = threading.Lock()
        self.arrived = threading.Event()
        self.stalled = threading.Event()
        self.port: int = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()
