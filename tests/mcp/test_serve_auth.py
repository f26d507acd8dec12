"""`herald mcp serve --http` authentication, tried as an outsider would: no token, a wrong one, a
token file others can read, a network bind without auth, another local user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

from herald import Runtime, Settings
from tests.fixtures.accounts import ensure_user
from tests.fixtures.users import USER
from tests.mcp.httpserve import client, free_port, herald_env, http_herald, token_file, tokens_in

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "outsider", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _post(url: str, token: str | None) -> httpx.Response:
    headers = dict(ACCEPT, **({"Authorization": f"Bearer {token}"} if token is not None else {}))
    return httpx.post(url, json=INITIALIZE, headers=headers, timeout=30)


def _refused(reply: httpx.Response) -> None:
    assert reply.status_code == 401, reply.text
    assert reply.headers["www-authenticate"].startswith("Bearer ")  # the MCP spec's challenge
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]


def test_generated_token_is_required_and_printed_once(workspace: Path, tmp_path: Path) -> None:
    with http_herald(workspace, tmp_path) as served:
        path = served.data_dir / "mcp" / "tokens"
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        token = tokens_in(path)["default"]
        assert f"Authorization: Bearer {token}" in served.said()
        _refused(_post(served.url, None))
        _refused(_post(served.url, token[:-1] + ("a" if token[-1] != "a" else "b")))
        _refused(_post(served.url, "x" * len(token)))
        assert _post(served.url, token).status_code == 200

        async def main() -> None:
            async with client(served.url, token) as herald:
                result = await herald.call_tool("execute_code", {"code": "print(6 * 7)"})
                assert result.structured_content["output"].strip() == "42"
            with pytest.raises(Exception) as refused:
                async with client(served.url, "not-the-token-at-all"):
                    pass
            assert "Server returned an error response" in repr(refused.value)

        anyio.run(main)
    with http_herald(workspace, tmp_path) as again:  # the same file; the token is not printed again
        assert token not in again.said()
        assert _post(again.url, token).status_code == 200


def test_token_file_names_clients_and_must_be_private(workspace: Path, tmp_path: Path) -> None:
    tokens = token_file(tmp_path / "tokens", alice="", bob="")
    secrets_ = tokens_in(tokens)
    with http_herald(workspace, tmp_path / "home", "--token-file", str(tokens)) as served:
        assert "(alice, bob)" in served.said()
        assert secrets_["alice"] not in served.said()
        for token in secrets_.values():
            assert _post(served.url, token).status_code == 200
        _refused(_post(served.url, secrets_["alice"] + secrets_["bob"]))
    tokens.chmod(0o644)
    proc = subprocess.run([sys.executable, "-m", "herald", "mcp", "serve", "--http", f"127.0.0.1:{free_port()}",
                           "--token-file", str(tokens), "--cwd", str(workspace)], env=herald_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"chmod 600 {tokens}" in proc.stderr


def test_network_bind_without_auth_is_refused_and_loopback_says_so(workspace: Path, tmp_path: Path) -> None:
    # 127.0.0.2 is loopback, but the SDK's DNS-rebinding guard covers 127.0.0.1, localhost and ::1 only.
    for host in ("0.0.0.0", "127.0.0.2"):
        proc = subprocess.run([sys.executable, "-m", "herald", "mcp", "serve", "--http", f"{host}:{free_port()}",
                               "--no-auth", "--cwd", str(workspace)], env=herald_env(tmp_path),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, host
        assert "without authentication" in proc.stderr and "drop --no-auth" in proc.stderr
    with http_herald(workspace, tmp_path / "open", "--no-auth") as served:
        assert "authentication is OFF (--no-auth)" in served.said()
        assert _post(served.url, None).status_code == 200


def test_another_local_user_can_neither_read_the_token_nor_connect(workspace: Path) -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or shutil.which("setpriv") is None or python is None:
        pytest.skip("needs root, setpriv and /usr/bin/python3 to try as another user")
    other = ensure_user(USER)
    home = Path(tempfile.mkdtemp(prefix="herald-mcp-auth-"))  # walkable by anyone: only the file's mode protects
    try:
        home.chmod(0o755)
        with http_herald(workspace, home) as served:
            path = served.data_dir / "mcp" / "tokens"
            for parent in (served.data_dir, path.parent):
                parent.chmod(0o755)
            attack = f"""
import json, os, urllib.request, urllib.error
out = {{"size": os.stat({str(path)!r}).st_size > 0}}
try:
    open({str(path)!r}).read(); out["read"] = "yes"
except OSError as exc:
    out["read"] = type(exc).__name__
request = urllib.request.Request({served.url!r}, data=json.dumps({INITIALIZE!r}).encode(), headers={ACCEPT!r})
try:
    urllib.request.urlopen(request, timeout=30); out["status"] = 200
except urllib.error.HTTPError as exc:
    out["status"] = exc.code
print(json.dumps(out))
"""
            proc = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--init-groups",
                                   "--", python, "-c", attack], capture_output=True, text=True, timeout=120,
                                  cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": other.pw_dir})
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout) == {"size": True, "read": "PermissionError", "status": 401}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_herald_client_reaches_herald_server_with_a_token(workspace: Path, tmp_path: Path, settings: Settings) -> None:
    # As the README registers it: [mcp_servers.NAME] url + headers = { Authorization = "Bearer TOKEN" }.
    with http_herald(workspace, tmp_path / "server") as served:
        token = tokens_in(served.data_dir / "mcp" / "tokens")["default"]
        for header, works in ((f"Bearer {token}", True), ("Bearer not-the-token-0123456789", False)):
            client_settings = settings.with_overrides(
                {"mcp_servers": {"remote": {"url": served.url, "headers": {"Authorization": header}}}})
            with Runtime(settings=client_settings, transcript=False) as rt:
                result = rt.execute("""
from hermes_tools import mcp_remote_execute_code as remote
print(remote("print(6 * 7)")["output"].strip())
""")
            if works:
                assert result.output.strip() == "42", result.error
            else:  # refused at listing: the server's tools are withheld
                assert "no tool or helper named 'mcp_remote_execute_code'" in result.error
