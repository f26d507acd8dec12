"""Every connection the launched Chromium makes passes the session's URL policy: a forward proxy on
127.0.0.1 that Chromium must use for everything, loopback included.

Why a proxy and not Playwright's `route()`: Playwright continues a request's redirect hops itself
without asking the route handler (a 302 to a refused host would be followed), and routing sees
no WebSocket of a worker nor a `<link rel=preconnect>`. Chromium sends the proxy every
connection instead: a CONNECT for https and wss (the host and port in clear), an absolute-form
request for http and ws. Each is checked with `WebPolicy.url_refusal`, the name is resolved here
and refused if any address is link-local / metadata, and the upstream connection is made to an
address that was checked (herald/webguard.py); Chromium resolves nothing itself. A refused
request gets a 403 carrying `X-Herald-Refused`; the proxy keeps the latest refusals so a tool
can name the host and the rule. An http request is forwarded with `Connection: close`, so one
proxied connection carries one origin's request (a reused one could only reach the checked
upstream anyway: bytes are never sent anywhere but there).

Tunnelled bytes are copied, not read: TLS stays between Chromium and the site.

Where the upstream connection leaves from is the session's `dial` (webguard.checked_dial): this
machine, or the backend (`browser.network = "backend"`: Backend.open_tcp, the name resolved and
checked there). Since the proxy may then lead into a network this machine's other users cannot
reach (a network-less container's loopback, an SSH host's), it serves only connections whose
socket the kernel says is owned by Herald's own user (`peer_uid`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..webguard import Dial, Refused, WebPolicy, checked_dial

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, ProxySettings, Route, WebSocketRoute

log = logging.getLogger(__name__)
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 30.0  # a client that opens a connection and says nothing
CONNECT_TIMEOUT = 30.0
REFUSED_HEADER = "X-Herald-Refused"
_HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"keep-alive", b"connection"}


@dataclass(frozen=True)
class Refusal:
    seq: int
    url: str
    reason: str


class RefusalLog:
    """The latest requests the policy refused, for the tool that caused them to name."""

    def __init__(self) -> None:
        self._refusals: deque[Refusal] = deque(maxlen=50)
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, url: str, reason: str) -> None:
        with self._lock:
            self._refusals.append(Refusal(next(self._seq), url, reason))

    def mark(self) -> int:
        """A point in the log: `since(mark)` are the refusals made after it."""
        with self._lock:
            return self._refusals[-1].seq if self._refusals else 0

    def since(self, mark: int) -> list[Refusal]:
        with self._lock:
            return [r for r in self._refusals if r.seq > mark]


class GuardProxy:
    """The proxy for one browser session; `close()` stops accepting (tunnels end with Chromium).
    `dial` makes the upstream connections (webguard.checked_dial: here, or from the backend);
    without a policy (the full profile) nothing is refused, but every connection still goes
    where `dial` makes it (the backend's network)."""

    def __init__(self, policy: WebPolicy | None, refusals: RefusalLog, dial: Dial | None = None) -> None:
        self.policy = policy
        self.refusals = refusals
        self._dial = dial or checked_dial(policy)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="herald-browser-guard", daemon=True).start()

    @property
    def chromium_args(self) -> list[str]:
        # <-loopback>: Chromium otherwise sends localhost and 127.0.0.1 around the proxy. WebRTC's
        # UDP cannot go through an HTTP proxy: it is turned off rather than let around it.
        return [f"--proxy-server=http://127.0.0.1:{self.port}", "--proxy-bypass-list=<-loopback>",
                "--force-webrtc-ip-handling-policy=disable_non_proxied_udp"]

    @property
    def context_proxy(self) -> ProxySettings:
        """The proxy for a browser context (Playwright's `new_context(proxy=...)`: CDP's
        Target.createBrowserContext proxyServer), for a browser that was not launched with it."""
        return {"server": f"http://127.0.0.1:{self.port}", "bypass": "<-loopback>"}

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    # -- connections ---------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name="herald-browser-guard-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            if peer_uid(client) != os.getuid():
                # Another user's process on this machine: the proxy is the session's way into
                # the backend's network (a container's loopback, an SSH host's), not theirs.
                _answer(client, 403, "Forbidden", "this proxy serves its own user's browser only")
                return
            head, rest = _read_head(client)
            if head is None:
                return
            upstream, first = self._open(client, head)
            if upstream is None:
                return
            if first:
                upstream.sendall(first + rest)
            elif rest:  # bytes after a CONNECT's head: the start of the tunnel
                upstream.sendall(rest)
            _pipe(client, upstream)
        except OSError:
            pass
        except Exception:
            log.exception("the browser's proxy failed on a connection")
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def _open(self, client: socket.socket, head: bytes) -> tuple[socket.socket | None, bytes]:
        """The checked upstream connection for this request, and the head to send it first
        (empty for a CONNECT, which is answered here)."""
        request_line, _, headers = head.partition(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ", 2)
        except ValueError:
            _answer(client, 400, "Bad Request", "not an HTTP request")
            return None, b""
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            url = f"https://{host}:{port_text}/" if ":" not in host else f"https://[{host}]:{port_text}/"
            port = int(port_text) if port_text.isdigit() else 443
        else:
            parts = urlsplit(target)
            if parts.scheme not in ("http", "ws") or not parts.hostname:
                _answer(client, 400, "Bad Request", f"{target[:100]} is not an absolute http URL")
                return None, b""
            host, port, url = parts.hostname, parts.port or 80, target
        refusal = self.policy.url_refusal(url) if self.policy is not None else None
        try:
            if refusal is not None:
                raise Refused(refusal)
            upstream = self._dial(host, port, CONNECT_TIMEOUT)
        except Refused as exc:
            self._refuse(client, url, str(exc))
            return None, b""
        except OSError as exc:
            _answer(client, 502, "Bad Gateway", f"could not connect to {host}:{port}: {exc}")
            return None, b""
        if method.upper() == "CONNECT":
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            return upstream, b""
        return upstream, _origin_form(method, target, version, headers)

    def _refuse(self, client: socket.socket, url: str, reason: str) -> None:
        self.refusals.add(url, reason)
        _answer(client, 403, "Forbidden", f"Herald refused this request: {reason}", refused=reason)


ELSEWHERE_NOTE = ("the attached browser (browser.cdp_url) is not on this machine, so it reaches pages over its own "
                  "network, not the backend's (browser.network = \"backend\"): the backend's localhost is not "
                  "reachable from it.")


def session_guard(cdp_url: str, policy: WebPolicy | None, refusals: RefusalLog | None,
                  dial: Dial | None) -> tuple[GuardProxy | None, str | None]:
    """The proxy a session's browser goes through (None: none), and a note for the model.
    A launched Chromium: whenever there is a policy to check or a backend to dial through. An
    attached one only to reach the backend's network (its policy is checked by routing,
    route_context), and only if it runs on this machine: a proxy on our loopback is out of
    reach of a browser elsewhere."""
    if dial is None and (cdp_url or policy is None):
        return None, None
    if cdp_url and not _on_this_machine(cdp_url):
        return None, ELSEWHERE_NOTE
    return GuardProxy(policy, refusals or RefusalLog(), dial), None


def _on_this_machine(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def peer_uid(client: socket.socket) -> int | None:
    """The user owning the other end of a loopback TCP connection to us: the kernel's record of
    that socket (/proc/net/tcp, tcp6: the established entry whose local port is the peer's and
    whose remote port is ours); None when it cannot be found."""
    try:
        peer, ours = client.getpeername()[1], client.getsockname()[1]
    except OSError:
        return None
    local, remote = f":{peer:04X}", f":{ours:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as entries:
                next(entries, None)
                for line in entries:
                    fields = line.split()
                    if (
                        len(fields) > 7
                        and fields[3] == "01"
                        and fields[1].endswith(local)
                        and fields[2].endswith(remote)
                    ):
                        return int(fields[7])
        except OSError:
            continue
    return None


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    client.settimeout(HEAD_TIMEOUT)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk or len(data) > HEAD_LIMIT:
            return None, b""
        data += chunk
    client.settimeout(None)
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _origin_form(method: str, target: str, version: str, headers: bytes) -> bytes:
    """The request as the site expects it: its path only, no proxy headers, `Connection: close`
    unless it is an upgrade (a WebSocket keeps its connection)."""
    parts = urlsplit(target)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = []
    upgrade = False
    for line in headers.split(b"\r\n"):
        name = line.split(b":", 1)[0].strip().lower()
        if name == b"upgrade":
            upgrade = True
        if name in _HOP_HEADERS:
            if name == b"connection" and b"upgrade" in line.lower():
                kept.append(line)
            continue
        kept.append(line)
    if not upgrade:
        kept.append(b"Connection: close")
    return f"{method} {path} {version}".encode("latin-1") + b"\r\n" + b"\r\n".join(kept) + b"\r\n\r\n"


def _answer(client: socket.socket, status: int, phrase: str, text: str, refused: str | None = None) -> None:
    body = f"<!doctype html><title>{phrase}</title><p>{text}</p>".encode()
    extra = f"{REFUSED_HEADER}: {refused.encode('ascii', 'replace').decode()}\r\n" if refused else ""
    head = (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/html; charset=utf-8\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with contextlib.suppress(OSError):
        client.sendall(head.encode("latin-1") + body)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until one side closes."""
    peers = {a: b, b: a}
    while True:
        readable, _, _ = select.select([a, b], [], [])
        for sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            peers[sock].sendall(data)



def route_context(context: BrowserContext, policy: WebPolicy, refusals: RefusalLog) -> None:
    """For a browser that cannot be given the proxy (attached over CDP): the context's requests and
    WebSockets pass the same check. Weaker: Playwright continues redirect hops without asking,
    and the browser resolves names itself."""

    def refusal(url: str) -> str | None:
        if url.startswith(("data:", "blob:", "about:")):  # never reach the network
            return None
        return policy.url_refusal("http" + url[2:] if url.startswith(("ws://", "wss://")) else url)

    def route(request_route: Route) -> None:
        url = request_route.request.url
        reason = refusal(url)
        if reason is None:
            request_route.fallback()
            return
        refusals.add(url, reason)
        request_route.abort("blockedbyclient")

    def route_socket(socket_route: WebSocketRoute) -> None:
        reason = refusal(socket_route.url)
        if reason is None:
            socket_route.connect_to_server()
            return
        refusals.add(socket_route.url, reason)
        socket_route.close(code=1008, reason="refused by Herald's URL policy")

    context.route("**/*", route)
    context.route_web_socket("**/*", route_socket)
