"""`herald mcp serve --http` as an OAuth resource server (serve.auth = "oauth"), against a local
issuer over real HTTP, reached by the SDK's own client with its client-credentials OAuth provider
(discovery from the 401's WWW-Authenticate, the issuer's metadata, a token for this resource)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tests.fakes.oauth_issuer import FakeIssuer
from tests.mcp.httpserve import Served, client, free_port, herald_env, http_herald

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


class Memory:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.info = client_info


@pytest.fixture
def issuer() -> Iterator[FakeIssuer]:
    fake = FakeIssuer(clients={"alice": "alice-secret-0123456789"},
                      resource_servers={"herald": "herald-secret-0123456789"}).start()
    try:
        yield fake
    finally:
        fake.stop()


def _oauth_herald(workspace: Path, home: Path, issuer: FakeIssuer, *flags: str) -> AbstractContextManager[Served]:
    return http_herald(workspace, home, "-c", "serve.auth=oauth", "-c", f"serve.oauth_issuer={issuer.url}",
                       "-c", f"serve.oauth_introspection_url={issuer.url}/introspect",
                       "-c", "serve.oauth_client_id=herald", *flags,
                       env={"HERALD_SERVE_OAUTH_CLIENT_SECRET": "herald-secret-0123456789"})


def _post(url: str, token: str | None) -> httpx.Response:
    headers = dict(ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {}))
    return httpx.post(url, json=PING, headers=headers, timeout=30)


def test_sdk_client_gets_a_token_from_the_issuer_and_runs_code(workspace: Path, tmp_path: Path,
                                                               issuer: FakeIssuer) -> None:
    with _oauth_herald(workspace, tmp_path, issuer) as served:
        assert f"OAuth tokens of {issuer.url}" in served.said()
        challenge = _post(served.url, None)
        assert challenge.status_code == 401
        assert "resource_metadata=" in challenge.headers["www-authenticate"]  # where to learn the issuer
        metadata = httpx.get(served.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"), timeout=30)
        assert metadata.json()["authorization_servers"] == [issuer.url]
        provider = ClientCredentialsOAuthProvider(server_url=served.url, storage=Memory(), client_id="alice",
                                                  client_secret="alice-secret-0123456789", issuer=issuer.url,
                                                  scope="mcp")

        async def main() -> None:
            async with client(served.url, None, auth=provider) as alice:
                result = await alice.call_tool("execute_code", {"code": "print(6 * 7)", "session": "k"})
                assert result.structured_content["output"].strip() == "42"

        anyio.run(main)
        issued = list(issuer.tokens.values())
        assert [(t.client_id, t.audience) for t in issued] == [("alice", served.url)]  # RFC 8707: for Herald
        status = next((served.data_dir / "mcp").glob("serve-*.json"))
        deadline = time.monotonic() + 60  # the status file is rewritten within 0.2 s of a change
        while not json.loads(status.read_text())["clients"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [c["identity"] for c in json.loads(status.read_text())["clients"]] == ["oauth:alice"]


def test_tokens_for_another_resource_revoked_or_unknown_are_refused(workspace: Path, tmp_path: Path,
                                                                   issuer: FakeIssuer) -> None:
    with _oauth_herald(workspace, tmp_path, issuer) as served:
        good = issuer.issue("alice", served.url)
        assert _post(served.url, good).status_code == 200
        elsewhere = issuer.issue("alice", "http://127.0.0.1:1/mcp")  # a token meant for another server
        assert _post(served.url, elsewhere).status_code == 401
        assert _post(served.url, issuer.issue("alice", None)).status_code == 401  # no audience at all
        assert _post(served.url, "made-up-token-0123456789").status_code == 401
        issuer.revoke(good)
        assert _post(served.url, good).status_code == 401
        assert issuer.introspections >= 5  # each was asked of the issuer, with Herald's credentials


def test_oauth_without_an_issuer_is_a_usage_error(workspace: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "herald", "mcp", "serve", "--http", f"127.0.0.1:{free_port()}",
                           "-c", "serve.auth=oauth", "--cwd", str(workspace)], env=herald_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "serve.oauth_issuer" in proc.stderr and "serve.oauth_introspection_url" in proc.stderr
