"""Clients of one `herald mcp serve --http` kept apart: kernel sessions, MCP sessions, limits, audit.

Driven by the SDK's own client with two tokens (alice, bob). What a run is doing is read from the
server's status file (what `herald mcp sessions` shows), never guessed from time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

from tests.mcp.fakeservers import first_text
from tests.mcp.httpserve import Served, client, herald_env, http_herald, token_file, tokens_in

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# Blocks until the test creates `release` in the workspace; logs its name before and after.
WAITS = """
import os, time
open("order.log", "a").write("{name} start\\n")
while not os.path.exists("release"):
    time.sleep(0.02)
open("order.log", "a").write("{name} end\\n")
"""


def _tokens(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = token_file(tmp_path / "tokens", alice="", bob="")
    return path, tokens_in(path)


def _status(served: Served) -> dict[str, Any]:
    for path in (served.data_dir / "mcp").glob("serve-*.json"):
        return dict(json.loads(path.read_text()))
    return {}


async def _until(served: Served, what: str, check: Callable[[dict[str, Any]], bool]) -> None:
    """Wait (at most 60 s) until the server's status shows `what`."""
    with anyio.fail_after(60):
        while True:
            try:
                if check(_status(served)):
                    return
            except (ValueError, KeyError):  # read as it was being replaced
                pass
            await anyio.sleep(0.02)
    raise AssertionError(what)


def _in_flight(status: dict[str, Any], identity: str) -> list[dict[str, Any]]:
    return [run for c in status.get("clients", []) if c["identity"] == identity for run in c["in_flight"]]


def _transcript(served: Served) -> list[dict[str, Any]]:
    records = []
    for path in (served.data_dir / "transcripts").glob("*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def test_kernel_sessions_belong_to_their_client(workspace: Path, tmp_path: Path) -> None:
    path, tokens = _tokens(tmp_path)
    with http_herald(workspace, tmp_path / "home", "--token-file", str(path)) as served:

        async def main() -> None:
            async with client(served.url, tokens["alice"], mode="legacy") as alice, \
                    client(served.url, tokens["bob"], mode="legacy") as bob:
                await alice.call_tool("execute_code", {"code": "secret = 'alice-only'", "session": "k"})
                mine = await alice.call_tool("execute_code", {"code": "print(secret)", "session": "k"})
                assert mine.structured_content["output"].strip() == "alice-only"
                assert mine.structured_content["session"] == "k"  # the client's own name for it
                theirs = await bob.call_tool("execute_code", {"code": "print(secret)", "session": "k"})
                assert "NameError" in theirs.structured_content["error"]
            # A new MCP session with the same token is another client.
            async with client(served.url, tokens["alice"], mode="legacy") as alice_later:
                later = await alice_later.call_tool("execute_code", {"code": "print(secret)", "session": "k"})
                assert "NameError" in later.structured_content["error"]
            # The 2026-07-28 protocol has no MCP session: its client is its token, here and later.
            async with client(served.url, tokens["bob"]) as bob_modern:
                await bob_modern.call_tool("execute_code", {"code": "mine = 'bob'", "session": "k"})
            async with client(served.url, tokens["bob"]) as bob_again:
                again = await bob_again.call_tool("execute_code", {"code": "print(mine)", "session": "k"})
                assert again.structured_content["output"].strip() == "bob"

        anyio.run(main)

        async def settled() -> None:  # the status file follows within 0.2 s
            await _until(served, "six calls", lambda s: sum(c["runs"] for c in s["clients"]) == 6)

        anyio.run(settled)
        sessions = subprocess.run([sys.executable, "-m", "herald", "mcp", "sessions", "--json"],
                                  env=herald_env(tmp_path / "home"), capture_output=True, text=True, timeout=60)
        listed = json.loads(sessions.stdout)
        assert [s["url"] for s in listed] == [served.url]
        clients = {c["identity"]: c for c in listed[0]["clients"]}
        assert set(clients) == {"alice", "bob"}
        assert clients["alice"]["runs"] == 3 and len(clients["alice"]["mcp_sessions"]) == 2
        assert clients["bob"]["runs"] == 3
        text = subprocess.run([sys.executable, "-m", "herald", "mcp", "sessions"], env=herald_env(tmp_path / "home"),
                              capture_output=True, text=True, timeout=60).stdout
        assert served.url in text and "kernel sessions per client" in text
        assert "alice: 2 MCP session(s), 3 call(s), 0 refused" in text
    gone = subprocess.run([sys.executable, "-m", "herald", "mcp", "sessions"], env=herald_env(tmp_path / "home"),
                          capture_output=True, text=True, timeout=60).stdout
    assert "No herald mcp serve --http is running" in gone  # the stopped server's file is gone
    calls = [r["client"] for r in _transcript(served) if r.get("type") == "mcp_call"]
    assert calls == ["alice", "alice", "bob", "alice", "bob", "bob"]


def test_an_mcp_session_cannot_be_taken_with_another_token(workspace: Path, tmp_path: Path) -> None:
    path, tokens = _tokens(tmp_path)
    with http_herald(workspace, tmp_path / "home", "--token-file", str(path)) as served:
        opened = httpx.post(served.url, headers=dict(ACCEPT, Authorization=f"Bearer {tokens['alice']}"), json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "a", "version": "0"}}},
                            timeout=30)
        assert opened.status_code == 200
        session_id = opened.headers["mcp-session-id"]
        stolen = httpx.post(served.url, timeout=30, headers=dict(
            ACCEPT, Authorization=f"Bearer {tokens['bob']}", **{"mcp-session-id": session_id}), json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "execute_code", "arguments": {"code": "print(1)"}}})
        assert stolen.status_code == 404  # as if it did not exist


def test_sharing_kernel_sessions_is_a_setting(workspace: Path, tmp_path: Path) -> None:
    path, tokens = _tokens(tmp_path)
    for scope, bob_sees, alice_later_sees in (("identity", False, True), ("shared", True, True)):
        home = tmp_path / scope
        with http_herald(workspace, home, "--token-file", str(path), "-c", f"serve.session_scope={scope}") as served:

            async def main() -> tuple[bool, bool]:
                async with client(served.url, tokens["alice"], mode="legacy") as alice:
                    await alice.call_tool("execute_code", {"code": "secret = 1", "session": "k"})
                async with client(served.url, tokens["alice"], mode="legacy") as alice_later, \
                        client(served.url, tokens["bob"], mode="legacy") as bob:
                    later = await alice_later.call_tool("execute_code", {"code": "print(secret)", "session": "k"})
                    other = await bob.call_tool("execute_code", {"code": "print(secret)", "session": "k"})
                return "NameError" not in other.structured_content["error"], \
                    "NameError" not in later.structured_content["error"]

            assert anyio.run(main) == (bob_sees, alice_later_sees), scope


def test_a_flooding_client_is_limited_while_another_is_served(workspace: Path, tmp_path: Path) -> None:
    path, tokens = _tokens(tmp_path)
    with http_herald(workspace, tmp_path / "home", "--token-file", str(path),
                     "-c", "serve.max_concurrent_runs=2") as served:

        async def main() -> None:
            results: dict[str, Any] = {}
            async with client(served.url, tokens["alice"]) as alice, client(served.url, tokens["bob"]) as bob, \
                    anyio.create_task_group() as tasks:

                async def call(who: Any, name: str) -> None:
                    results[name] = await who.call_tool("execute_code", {"code": WAITS.format(name=name)})

                tasks.start_soon(call, alice, "A1")
                await _until(served, "A1 running",
                             lambda s: [r["state"] for r in _in_flight(s, "alice")] == ["running"])
                tasks.start_soon(call, alice, "A2")
                await _until(served, "A2 waiting", lambda s: len(_in_flight(s, "alice")) == 2)
                flood = await alice.call_tool("execute_code", {"code": "print('third')"})
                assert flood.is_error and "serve.max_concurrent_runs = 2" in first_text(flood)
                listed = await bob.list_tools()  # bob is answered while alice's runs hold the Runtime
                assert listed.tools[0].name == "execute_code"
                tasks.start_soon(call, bob, "B1")
                await _until(served, "B1 waiting", lambda s: len(_in_flight(s, "bob")) == 1)
                (workspace / "release").write_text("")
            assert all(not r.is_error for r in results.values()), results
            # Turns go round: bob's run came before alice's second, though alice asked first.
            assert (workspace / "order.log").read_text().split() == \
                ["A1", "start", "A1", "end", "B1", "start", "B1", "end", "A2", "start", "A2", "end"]

        anyio.run(main)
    refused = [r for r in _transcript(served) if r.get("type") == "mcp_refused"]
    assert [r["client"] for r in refused] == ["alice"]


def test_runs_per_minute_and_request_size(workspace: Path, tmp_path: Path) -> None:
    path, tokens = _tokens(tmp_path)
    with http_herald(workspace, tmp_path / "home", "--token-file", str(path), "-c", "serve.max_runs_per_minute=3",
                     "-c", "serve.max_request_bytes=100000") as served:

        async def main() -> tuple[Any, float]:
            async with client(served.url, tokens["alice"]) as alice, client(served.url, tokens["bob"]) as bob:
                started = time.monotonic()
                for _ in range(3):
                    assert not (await alice.call_tool("execute_code", {"code": "print(1)"})).is_error
                fourth = await alice.call_tool("execute_code", {"code": "print(1)"})
                elapsed = time.monotonic() - started
                served_bob = await bob.call_tool("execute_code", {"code": "print('bob')"})
                assert served_bob.structured_content["output"].strip() == "bob"
            return fourth, elapsed

        fourth, elapsed = anyio.run(main)
        if elapsed >= 60:
            pytest.skip("three tiny runs took a minute here: the per-minute window had moved on")
        assert fourth.is_error and "serve.max_runs_per_minute = 3" in first_text(fourth)
        assert "Call again in" in first_text(fourth)
        big = httpx.post(served.url, headers=dict(ACCEPT, Authorization=f"Bearer {tokens['bob']}"), timeout=30,
                         content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": "' + b"x" * 200_000 + b'"}')
        assert big.status_code == 413
