"""Every connection the session's Chromium makes passes the URL policy: redirects of a navigation,
a page's frames, images, stylesheets, fetch(), a worker's fetch, WebSockets. Real Chromium,
called through a Dispatcher with the policy as a session has it; servers on 127.0.0.1 only:
"localhost" is the allowed name, 127.0.0.1 (a second server, whose hits must stay 0) is not.
Also: browser calls end by the run's deadline, and closing does not wait for a stuck navigation."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.backends.local import LocalBackend
from herald.browser.errors import BrowserError
from herald.browser.guard import GuardProxy, RefusalLog
from herald.browser.session import CLOSE_WAIT, BrowserSession
from herald.deadlines import call_deadline
from herald.policy import Policy
from herald.policy.domains import WebAddressPolicy
from herald.runtime.dispatcher import Dispatcher
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from tests.web.hops import HopServer

Call = Callable[..., dict[str, Any]]


@pytest.fixture
def site() -> Iterator[HopServer]:
    server = HopServer()
    yield server
    server.close()


@pytest.fixture
def elsewhere() -> Iterator[HopServer]:
    server = HopServer()
    yield server
    server.close()


@pytest.fixture
def make_session(chromium: str, workspace: Path, settings: Settings) -> Iterator[Callable[..., Call]]:
    """`make_session(**settings)` -> `call(tool, **args)`: direct calls through a Dispatcher (one
    browser session per factory call, closed at the end)."""
    made: list[tuple[ToolContext, LocalBackend]] = []

    def factory(**overrides: Any) -> Call:
        session = settings.with_overrides(overrides)
        backend = LocalBackend(str(workspace), settings=session)
        ctx = ToolContext(backend=backend, settings=session)
        made.append((ctx, backend))
        dispatcher = Dispatcher(default_registry(), ctx, policy=Policy.from_settings(session))

        def call(name: str, **args: Any) -> dict[str, Any]:
            return dispatcher.call_direct(name, args)

        return call

    yield factory
    for ctx, backend in made:
        ctx.close()
        backend.close()


def test_navigation_redirected_to_a_host_outside_allowed_domains_is_refused(
        make_session: Callable[..., Call], site: HopServer, elsewhere: HopServer) -> None:
    call = make_session(**{"policy.allowed_domains": ["localhost"]})
    reply = call("browser_navigate", url=f"{site.url('localhost')}/page")
    assert reply["result"]["title"] == "Hop page", reply
    for code in (302, 307):
        reply = call(
            "browser_navigate", url=f"{site.url('localhost')}/redirect?code={code}&to={elsewhere.url()}/secret"
        )
        error = reply["error"]
        assert error["type"] == "PolicyRefused", reply
        assert f"refused {elsewhere.url()}/secret" in error["message"]
        assert "127.0.0.1 is not in policy.allowed_domains (localhost)" in error["message"]
    # https is a CONNECT to the proxy: refused the same way, the host and rule named.
    reply = call("browser_navigate", url=f"{site.url('localhost')}/redirect?to=https://127.0.0.1:{elsewhere.port}/x")
    assert reply["error"]["type"] == "PolicyRefused", reply
    assert "127.0.0.1 is not in policy.allowed_domains" in reply["error"]["message"]
    assert elsewhere.hits == []
    # Allowed redirects, chains and relative ones, still work.
    reply = call("browser_navigate", url=f"{site.url('localhost')}/chain/3")
    assert reply["result"]["url"] == f"{site.url('localhost')}/page", reply
    reply = call("browser_navigate", url=f"{site.url('localhost')}/relative")
    assert reply["result"]["url"] == f"{site.url('localhost')}/page?from=relative", reply


def test_a_pages_frames_subresources_fetches_and_websockets_never_reach_a_refused_host(
        make_session: Callable[..., Call], site: HopServer, elsewhere: HopServer) -> None:
    call = make_session(**{"policy.allowed_domains": ["localhost"]})
    reply = call("browser_navigate", url=f"{site.url('localhost')}/embeds?other={elsewhere.url()}")
    assert reply["result"]["title"] == "Embeds", reply
    for _ in range(50):  # the page's script, its worker and its socket run after load
        snapshot = call("browser_snapshot")["result"]
        if "script ran" in snapshot["snapshot"]:
            break
        time.sleep(0.1)
    assert "script ran" in snapshot["snapshot"]
    time.sleep(0.5)
    assert elsewhere.hits == []
    # The same page with the other server allowed: the page does reach it (the test can see hits).
    call = make_session(**{"policy.allowed_domains": ["localhost", "127.0.0.1"]})
    call("browser_navigate", url=f"{site.url('localhost')}/embeds?other={elsewhere.url()}")
    deadline = time.monotonic() + 10
    while (
        len(set(elsewhere.hits) & {"/frame", "/img.png", "/xhr", "/from-worker", "/ws"}) < 5
        and time.monotonic() < deadline
    ):
        call("browser_snapshot")
        time.sleep(0.1)
    assert {"/frame", "/img.png", "/xhr", "/from-worker", "/ws"} <= set(elsewhere.hits), elsewhere.hits


def test_the_metadata_address_is_refused_as_a_redirect_or_a_frame_without_allowed_domains(
        make_session: Callable[..., Call], site: HopServer) -> None:
    call = make_session()
    for metadata in ("http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/",
                     "https://169.254.169.254/"):
        reply = call("browser_navigate", url=f"{site.url()}/redirect?to={metadata}")
        assert reply["error"]["type"] == "PolicyRefused", reply
        assert "cloud metadata" in reply["error"]["message"] and "full profile" in reply["error"]["message"]
    # A page that frames the metadata address: the frame holds Herald's refusal, not the service.
    reply = call("browser_navigate", url=f"{site.url()}/embeds?other=http://169.254.169.254")
    assert reply["result"]["title"] == "Embeds", reply
    snapshot = call("browser_snapshot")["result"]["snapshot"]
    assert "Herald refused this request: 169.254.169.254 is a link-local / cloud metadata address" in snapshot


def test_herald_exec_timeout_ends_a_stalling_navigation(chromium: str, site: HopServer, tmp_path: Path) -> None:
    script = tmp_path / "stall.py"
    script.write_text("from hermes_tools import browser_navigate\n"
                      f"print(browser_navigate({site.url() + '/stall'!r}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update({"HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_CONFIG": str(tmp_path / "none.toml")})
    grace = Settings().sandbox.kill_grace
    for navigation_timeout in ("30", "60"):
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "herald", "exec", str(script), "--timeout", "5", "--cwd", str(tmp_path),
             "-c", f"browser.navigation_timeout={navigation_timeout}"],
            capture_output=True, text=True, timeout=180, env=env)
        took = time.monotonic() - started
        print(f"herald exec --timeout 5, browser.navigation_timeout={navigation_timeout}, a stalling page: "
              f"exited after {took:.2f} s (kill grace {grace:g} s)")
        assert proc.returncode != 0
        assert site.stalled.is_set()
        assert took < 5 + grace + 5, (took, proc.stdout, proc.stderr)


def test_a_call_under_a_deadline_stops_at_it(chromium: str, site: HopServer, settings: Settings) -> None:
    session = BrowserSession(settings.browser, settings.spill_dir)
    try:
        session.navigate(f"{site.url()}/page")  # launched: the time below is the navigation's
        started = time.monotonic()
        with call_deadline(started + 2), pytest.raises(BrowserError) as caught:
            session.navigate(f"{site.url()}/stall")
        assert time.monotonic() - started < 2 + 3
        assert caught.value.kind == "Timeout"
        assert "the run's time limit was reached" in str(caught.value)
        # The session goes on: the next call works.
        assert session.navigate(f"{site.url()}/page")["title"] == "Hop page"
    finally:
        session.close()


def test_close_does_not_wait_for_a_navigation_in_flight(chromium: str, site: HopServer, settings: Settings) -> None:
    session = BrowserSession(settings.with_overrides({"browser.navigation_timeout": 120}).browser, settings.spill_dir)
    failed: list[BaseException] = []

    def navigate() -> None:
        try:
            session.navigate(f"{site.url()}/stall")
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=navigate, daemon=True)
    thread.start()
    assert site.stalled.wait(60), "the navigation never reached the server"
    started = time.monotonic()
    session.close()
    took = time.monotonic() - started
    thread.join(30)
    print(f"closing with a navigation in flight took {took:.2f} s")
    assert took < CLOSE_WAIT * 2 + 5, took
    assert not thread.is_alive()
    assert failed  # the navigation failed rather than finished


def test_an_attached_browser_routes_frames_subresources_and_websockets_through_the_check(
        make_session: Callable[..., Call], cdp_chromium: Any, site: HopServer, elsewhere: HopServer) -> None:
    """A browser reached over CDP cannot be given the proxy: its context's routing checks what it
    sees (every first hop; redirect hops are Playwright's, see README)."""
    call = make_session(**{"policy.allowed_domains": ["localhost"], "browser.cdp_url": cdp_chromium.url})
    reply = call("browser_navigate", url=f"{site.url('localhost')}/embeds?other={elsewhere.url()}")
    assert reply["result"]["title"] == "Embeds", reply
    for _ in range(50):
        snapshot = call("browser_snapshot")["result"]
        if "script ran" in snapshot["snapshot"]:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    call("browser_snapshot")  # routing answers while a call runs: let it see the last requests
    assert elsewhere.hits == []


def _through_proxy(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def test_the_proxy_checks_each_request_as_chromium_sends_it(site: HopServer, elsewhere: HopServer) -> None:
    """What Chromium sends the guard proxy, sent by hand: a CONNECT (https, wss) and an
    absolute-form request (http, ws), allowed and refused."""
    refusals = RefusalLog()
    proxy = GuardProxy(WebAddressPolicy(("localhost",)), refusals)
    try:
        answer = _through_proxy(proxy.port, f"GET {site.url('localhost')}/page HTTP/1.1\r\nHost: localhost\r\n"
                                            "Proxy-Connection: keep-alive\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer
        assert site.hits == ["/page"]
        for request in (f"GET {elsewhere.url()}/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                        f"CONNECT 127.0.0.1:{elsewhere.port} HTTP/1.1\r\nHost: 127.0.0.1:{elsewhere.port}\r\n\r\n",
                        "CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n",
                        "CONNECT [::ffff:a9fe:a9fe]:80 HTTP/1.1\r\nHost: x\r\n\r\n"):
            answer = _through_proxy(proxy.port, request.encode())
            assert answer.startswith(b"HTTP/1.1 403 Forbidden"), (request, answer)
            assert b"X-Herald-Refused: " in answer
        assert elsewhere.hits == []
        reasons = [r.reason for r in refusals.since(0)]
        assert "127.0.0.1 is not in policy.allowed_domains (localhost)" in reasons[0]
        assert all("link-local / cloud metadata" in reason for reason in reasons[2:]), reasons
        # A CONNECT to an allowed name is tunnelled to the address checked for it.
        answer = _through_proxy(
            proxy.port, f"CONNECT localhost:{site.port} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
        )
        assert answer.startswith(b"HTTP/1.1 200 Connection established"), answer
    finally:
        proxy.close()
