"""Approvals over MCP: the approver `herald mcp serve` gives the policy's `ask` rules asks the
client through elicitation, and says why when the client cannot be asked. The SDK's client
talks to the server in-process here (the stdio and HTTP transports are tested in test_serve)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

from mcp import Client, types
from mcp.client.session import ClientRequestContext

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.cli.mcpserve import Approvals, build_server
from herald.runtime.toolset import default_registry
from herald.tools.context import ToolContext
from herald.tools.registry import Registry, Tool
from tests.mcp.fakeservers import first_text


class Ask:
    """Stands where the policy's `ask` rule would call the approver: the tool asks, then answers."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals

    def __call__(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        call = type("PolicyCall", (), {"tool": "deploy", "args": args, "rule": "ask deploy", "origin": "script"})()
        return {"approved": self.approvals(call)}


def _runtime(workspace: Path, settings: Settings, approvals: Approvals) -> tuple[LocalBackend, Runtime]:
    tool = Tool(name="deploy", description="Deploy (asks first).", handler=Ask(approvals),
                parameters={"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]})
    backend = LocalBackend(str(workspace), settings=settings)
    return backend, Runtime(
        backend, settings=settings, registry=Registry([*default_registry(), tool]), transcript=False
    )


SCRIPT = "from hermes_tools import deploy\nprint(deploy('prod'))"


def test_the_client_is_asked_through_elicitation(workspace: Path, settings: Settings) -> None:
    approvals = Approvals()
    backend, runtime = _runtime(workspace, settings, approvals)
    asked: list[str] = []

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": "prod" in params.message})

    async def main() -> None:
        server = build_server(runtime, direct_tools=True, approvals=approvals)
        async with Client(server, mode="legacy", elicitation_callback=elicit) as client:
            from_script = await client.call_tool("execute_code", {"code": SCRIPT})
            assert from_script.structured_content["output"].strip() == "{'approved': True}"
            direct = await client.call_tool("deploy", {"target": "staging"})
            assert direct.structured_content == {"approved": False}

    try:
        anyio.run(main)
    finally:
        runtime.close()
        backend.close()
    assert len(asked) == 2
    assert "deploy needs approval (rule 'ask deploy'" in asked[0] and '"target": "prod"' in asked[0]


def test_a_client_without_elicitation_gets_the_reason(workspace: Path, settings: Settings) -> None:
    approvals = Approvals()
    backend, runtime = _runtime(workspace, settings, approvals)

    async def main() -> None:
        server = build_server(runtime, direct_tools=True, approvals=approvals)
        async with Client(server, mode="legacy") as client:
            result = await client.call_tool("deploy", {"target": "prod"})
            assert result.is_error
            assert "does not support elicitation" in first_text(result)

    try:
        anyio.run(main)
    finally:
        runtime.close()
        backend.close()
