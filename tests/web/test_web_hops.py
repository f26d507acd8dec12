"""web_extract follows redirects itself and every hop passes the session's URL policy, the way the
Dispatcher runs it (the policy reaches the tool as ToolContext.web_policy); a fetch ends by the
run's deadline. Servers listen on 127.0.0.1 only: "localhost" is the allowed name, 127.0.0.1 the
host the policy does not allow (a second server, whose hits must stay at 0)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.backends.local import LocalBackend
from herald.deadlines import call_deadline
from herald.policy import Policy
from herald.policy.domains import WebAddressPolicy
from herald.runtime.dispatcher import Dispatcher
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.webguard import Refused, checked_addresses
from tests.web.hops import HopServer

Extract = Callable[..., dict[str, Any]]


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
def make_extract(local_backend: LocalBackend, settings: Settings) -> Callable[..., Extract]:
    """`make_extract(**policy settings)` -> `extract(*urls)`: web_extract called directly through a
    Dispatcher with that policy; returns the reply ({'result': ...} or {'error': ...})."""

    def factory(**overrides: Any) -> Extract:
        session = settings.with_overrides({"web.extract": "direct", **overrides})
        dispatcher = Dispatcher(default_registry(), ToolContext(backend=local_backend, settings=session),
                                policy=Policy.from_settings(session))

        def extract(*urls: str) -> dict[str, Any]:
            return dispatcher.call_direct("web_extract", {"urls": list(urls)})

        return extract

    return factory


def page(reply: dict[str, Any]) -> dict[str, Any]:
    assert "result" in reply, reply
    results: list[dict[str, Any]] = reply["result"]["results"]
    assert len(results) == 1
    return results[0]


def test_redirect_to_a_host_outside_allowed_domains_is_refused_and_never_reached(
        make_extract: Callable[..., Extract], site: HopServer, elsewhere: HopServer) -> None:
    extract = make_extract(**{"policy.allowed_domains": ["localhost"]})
    target = elsewhere.url() + "/secret"
    for code in (301, 302, 303, 307, 308):
        result = page(extract(f"{site.url('localhost')}/redirect?code={code}&to={target}"))
        assert "refused the redirect from http://localhost:" in result["error"]
        assert f"to {target}" in result["error"]
        assert "127.0.0.1 is not in policy.allowed_domains (localhost)" in result["error"]
    assert elsewhere.hits == []
    assert len(site.hits) == 5


def test_allowed_redirect_chains_and_relative_locations_are_followed(
        make_extract: Callable[..., Extract], site: HopServer) -> None:
    extract = make_extract(**{"policy.allowed_domains": ["localhost"]})
    result = page(extract(f"{site.url('localhost')}/chain/4"))
    assert "You reached /page on this server." in result["content"], result
    result = page(extract(f"{site.url('localhost')}/relative"))
    assert "You reached /page on this server." in result["content"], result
    assert site.hits[-1] == "/page?from=relative"


def test_a_redirect_loop_ends_with_a_clear_error(make_extract: Callable[..., Extract], site: HopServer) -> None:
    result = page(make_extract()(f"{site.url()}/loop"))
    assert "a redirect loop: more than 10 redirects" in result["error"]
    assert site.hits.count("/loop") == 11
    result = page(make_extract()(f"{site.url()}/chain/30"))
    assert "too many redirects: more than 10 redirects" in result["error"]


def test_redirect_to_the_metadata_address_is_refused_without_allowed_domains(
        make_extract: Callable[..., Extract], site: HopServer) -> None:
    extract = make_extract()  # the default profile, no allowed_domains
    for metadata in ("http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://2852039166/",
                     "http://metadata.google.internal/computeMetadata/v1/", "http://[::ffff:169.254.169.254]/"):
        result = page(extract(f"{site.url()}/redirect?to={metadata}"))
        # Refused by the check on the hop, before any connection: the message names the rule.
        assert f"refused the redirect from {site.url()}/redirect" in result["error"], result
        assert "cloud metadata" in result["error"] and "full profile" in result["error"]


def test_the_full_profile_follows_any_redirect(make_extract: Callable[..., Extract], site: HopServer,
                                               elsewhere: HopServer) -> None:
    extract = make_extract(**{"policy.profile": "full", "policy.allowed_domains": ["localhost"]})
    result = page(extract(f"{site.url('localhost')}/redirect?to={elsewhere.url()}/page"))
    assert "You reached /page" in result["content"]
    assert elsewhere.hits == ["/page"]


def test_resolved_addresses_are_checked() -> None:
    policy = WebAddressPolicy()
    # A real resolver answer: localhost's addresses are loopback, allowed.
    found = checked_addresses("localhost", 80, policy, 10)
    assert found and all(str(sockaddr[0]) in ("127.0.0.1", "::1") for _, sockaddr in found)
    # A literal (and its IPv4-mapped spelling) is the address itself: link-local refused.
    for literal in ("169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "fd00:ec2::254"):
        with pytest.raises(Refused, match="link-local / cloud metadata address"):
            checked_addresses(literal, 80, policy, 10)
    # No policy (the full profile): nothing refused.
    assert checked_addresses("169.254.169.254", 80, None, 10)


def test_a_stalling_page_ends_at_the_run_deadline(make_extract: Callable[..., Extract], site: HopServer) -> None:
    extract = make_extract()
    started = time.monotonic()
    with call_deadline(started + 2):
        reply = extract(f"{site.url()}/stall")
    took = time.monotonic() - started
    assert reply["error"]["type"] == "Timeout", reply
    assert "the run's time limit was reached" in reply["error"]["message"]
    assert took < 2 + 3, took  # web.fetch_timeout is 30 s: the deadline ended it
    assert site.stalled.is_set()


def test_herald_exec_timeout_ends_a_stalling_web_extract(site: HopServer, tmp_path: Path) -> None:
    script = tmp_path / "stall.py"
    script.write_text("from hermes_tools import web_extract\n"
                      f"print(web_extract({site.url() + '/stall'!r}))\n")
    env = {"HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_CONFIG": str(tmp_path / "none.toml"),
           "HERALD_WEB_EXTRACT": "direct"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "herald", "exec", str(script), "--timeout", "5", "--cwd", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_environ(), **env},
    )
    took = time.monotonic() - started
    grace = Settings().sandbox.kill_grace
    print(f"herald exec --timeout 5 with a stalling web_extract exited after {took:.2f} s (kill grace {grace:g} s)")
    assert proc.returncode != 0
    assert site.stalled.is_set()
    assert took < 5 + grace + 5, (took, proc.stdout, proc.stderr)


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("FIRECRAWL_", "HERALD_"))}


def test_localhost_resolves_here() -> None:
    """The tests above name the allowed server "localhost": it must resolve to 127.0.0.1 here."""
    assert "127.0.0.1" in {info[4][0] for info in socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)}
