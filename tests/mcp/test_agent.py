"""`herald run`'s agent sees MCP tools like any other and is told to batch them in one script."""

from __future__ import annotations

from tests.agent.conftest import MakeAgent, llm, make_agent, protocol  # noqa: F401  (fixtures)
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import server_table
from .servers import Installed


def test_agent_calls_mcp_tools_from_a_script_and_directly(
    make_agent: MakeAgent, llm: FakeLLMServer, servers: Installed,  # noqa: F811
) -> None:
    script = "from hermes_tools import mcp_time_get_current_time as now\nprint('tz:', now('Asia/Tokyo')['timezone'])"
    llm.script(calls(call("execute_code", code=script)),
               calls(call("mcp_time_get_current_time", timezone="Europe/Paris")), reply("done"))
    table = server_table(servers.command("mcp-server-time"))
    agent = make_agent(overrides={"mcp_servers": {"time": table}})
    agent.run("what time is it in Tokyo and Paris?")
    first = llm.requests[0]
    assert "mcp_time_get_current_time" in first.tool_names
    assert "MCP tools (mcp_<server>_<tool>, from time)" in first.system
    assert "many MCP calls belong in one execute_code script" in first.system
    assert "tz: Asia/Tokyo" in llm.requests[1].tool_results()[0][1]
    assert "Europe/Paris" in llm.requests[2].tool_results()[0][1]
