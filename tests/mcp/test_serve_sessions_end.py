"""A client's kernel sessions end with its MCP session: once the session has gone idle (the SDK
closes it after 30 minutes), the next call of any client sweeps it, and the Runtime kills the
kernels named after it, so a server with many short-lived clients does not keep their children.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

from herald.cli.mcplimits import Clients, Run
from herald.cli.mcpserve import end_kernels, kernel_name
from herald.runtime import Runtime


def _later_than(moment: float) -> None:
    """Wait for the wall clock to pass `moment` (the sweep compares wall times)."""
    while time.time() <= moment:
        time.sleep(0.001)


def test_an_idle_mcp_session_is_told_once_by_the_next_call_of_any_client() -> None:
    told: list[tuple[str, str]] = []
    clients = Clients(max_concurrent=0, per_minute=0, idle=0.0)
    clients.on_idle = lambda identity, session: told.append((identity, session))
    first = clients.admit("alice", "s1", "execute_code", "k")
    assert isinstance(first, Run)
    clients.finish(first)
    _later_than(time.time())
    second = clients.admit("bob", "s2", "execute_code", None)  # alice never calls again
    assert isinstance(second, Run)
    assert told == [("alice", "s1")], "the session that went idle, and not the caller's own"
    clients.finish(second)
    _later_than(time.time())
    clients.admit("bob", "s2", "execute_code", None)  # bob's session is his call's own: not idle
    assert told == [("alice", "s1")], "alice's session is told once: it is forgotten then"


def test_the_kernels_of_an_ended_mcp_session_are_killed_and_no_others(runtime: Runtime) -> None:
    mine = kernel_name("client", "alice", "s1", "work")
    other_session = kernel_name("client", "alice", "s2", "work")
    other_client = kernel_name("client", "bob", "s1", "work")
    for name in (mine, other_session, other_client, "plain"):
        assert runtime.execute("x = 41", session=name).ok
    assert end_kernels(runtime, "alice", "s1") == [mine]
    fresh = runtime.execute("print(x)", session=mine)
    assert not fresh.ok and "NameError" in (fresh.error or ""), "its globals went with it"
    for name in (other_session, other_client, "plain"):
        kept = runtime.execute("print(x + 1)", session=name)
        assert kept.ok and kept.output.strip() == "42", (name, kept)
