"""`ask` rules over MCP: the policy asks the client through `herald mcp serve`'s approver
(elicitation); a client that cannot be asked gets the call refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

import anyio
from mcp import Client, types
from mcp.client.session import ClientRequestContext

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.cli.mcpserve import Approvals, build_server
from herald.policy import Policy
from tests.mcp.fakeservers import first_text

SCRIPT = """
from hermes_tools import terminal, ToolError
for name in ("yes.txt", "no.txt"):
    try:
        terminal("touch " + name)
        print(name, "made")
    except ToolError as exc:
        print(name, exc.error_type)
"""


def _serve(workspace: Path, settings: Settings, approvals: Approvals) -> tuple[LocalBackend, Runtime]:
    ruled = settings.with_overrides({"policy.rules": ["ask terminal command=touch"]})
    backend = LocalBackend(str(workspace), settings=ruled)
    runtime = Runtime(backend, settings=ruled, transcript=False, policy=Policy.from_settings(ruled, approve=approvals))
    return backend, runtime


def test_ask_rules_ask_the_mcp_client(workspace: Path, settings: Settings) -> None:
    approvals = Approvals()
    backend, runtime = _serve(workspace, settings, approvals)
    asked: list[str] = []

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": "yes.txt" in params.message})

    async def main() -> None:
        async with Client(build_server(runtime, direct_tools=True, approvals=approvals), mode="legacy",
                          elicitation_callback=elicit) as client:
            result = await client.call_tool("execute_code", {"code": SCRIPT})
            assert result.structured_content["output"].splitlines() == ["yes.txt made", "no.txt PolicyRefused"]
            direct = await client.call_tool("terminal", {"command": "touch no.txt"})
            assert direct.is_error and "was not approved (rule 'ask terminal command=touch')" in first_text(direct)

    try:
        anyio.run(main)
    finally:
        runtime.close()
        backend.close()
    assert len(asked) == 3 and all("rule 'ask terminal command=touch'" in m for m in asked)
    assert sorted(p.name for p in workspace.iterdir()) == ["yes.txt"]


def test_a_client_that_cannot_be_asked_gets_the_reason(workspace: Path, settings: Settings) -> None:
    approvals = Approvals()
    backend, runtime = _serve(workspace, settings, approvals)

    async def main() -> None:
        async with Client(build_server(runtime, direct_tools=True, approvals=approvals), mode="legacy") as client:
            result = await client.call_tool("terminal", {"command": "touch x"})
            assert result.is_error and "does not support elicitation" in first_text(result)
            assert "needs approval (rule 'ask terminal command=touch')" in first_text(result)

    try:
        anyio.run(main)
    finally:
        runtime.close()
        backend.close()
    assert not (workspace / "x").exists()
