"""The agent acts on a tool's flags, never its name: any tool that runs scripts
(`Tool.runs_scripts`) is run, counted, summarised and shown like execute_code, and a tool that
changes the agent's own state (`changes_agent_state`) is not a read-only call to the loop guard."""

from __future__ import annotations

import io
import json
from typing import Any

from herald import Agent
from herald.agent.events import InnerToolCall, ToolFinished, ToolStarted
from herald.agent.view import AgentView, make_console
from herald.runtime.toolset import default_registry
from herald.tools.context import ToolContext
from herald.tools.registry import Registry, Tool
from herald.transcript import read_transcript
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import MakeAgent

CODE = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}


def _script_tool(holder: dict[str, Any]) -> Tool:
    def handler(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        agent: Agent = holder["agent"]
        return agent.runtime.execute(args["code"]).to_dict()

    return Tool("run_python", "Test tool: runs a script as execute_code does.", CODE, handler,
                sandbox=False, runs_scripts=True)


def test_a_custom_script_tool_is_counted_summarised_and_fails_with_its_script(
    make_agent: MakeAgent, llm: FakeLLMServer
) -> None:
    script = ("from hermes_tools import terminal, read_file\nterminal('echo hi > hi.txt')\n"
              "print('first line')\nprint(read_file('hi.txt')['content'])")
    llm.script(calls(call("run_python", code=script)), calls(call("run_python", code="raise SystemExit(3)")),
               reply("done"))
    holder: dict[str, Any] = {}
    agent = make_agent(registry=Registry([*default_registry(), _script_tool(holder)]))
    holder["agent"] = agent
    result = agent.run("go")

    assert result.status == "completed"
    good, bad = result.tool_calls
    assert good.name == "run_python" and good.ok and good.inner_calls == 2
    assert not bad.ok and bad.inner_calls == 0  # the script exited 3: the call failed
    assert json.loads(llm.requests[1].tool_results()[0][1])["status"] == "success"
    assert json.loads(llm.requests[2].tool_results()[0][1])["exit_code"] == 3
    assert all(e.runs_script for e in agent.events if isinstance(e, ToolStarted))
    finished = [e for e in agent.events if isinstance(e, ToolFinished)]
    assert finished[0].summary == "first line" and finished[0].inner_calls == 2
    assert [e.count for e in agent.events if isinstance(e, InnerToolCall)] == [1, 2]
    records = read_transcript(agent.session.path)
    direct = [r for r in records if r.get("type") == "tool_call"]
    assert [(r["tool"], r["status"], r["inner_calls"]) for r in direct] == [("run_python", "success", 2),
                                                                             ("run_python", "error", 0)]


def test_a_tool_that_changes_agent_state_is_not_a_repeated_read(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    notes: list[str] = []
    params = {"type": "object", "properties": {}}

    def tally(args: dict[str, Any], ctx: ToolContext) -> str:
        notes.append("x")
        return "same"

    tools = [
        Tool("peek", "Test tool: reads.", params, lambda args, ctx: "same"),
        Tool("tally", "Test tool: keeps a tally.", params, tally, changes_agent_state=True),
    ]
    llm.script(*[calls(call("tally")) for _ in range(3)], *[calls(call("peek")) for _ in range(2)], reply("ok"))
    result = make_agent(registry=Registry([*default_registry(), *tools])).run("go")
    results = [r.tool_results()[0][1] for r in llm.requests[1:6]]
    assert results[:3] == ["same"] * 3 and len(notes) == 3  # ran every time, never warned
    assert "[Herald:" not in results[3] and "returned exactly the same result 2 times" in results[4]
    assert result.status == "completed"


def test_the_view_shows_a_script_tool_by_its_script_and_inner_calls() -> None:
    out = io.StringIO()
    view = AgentView(make_console(file=out))
    view.handle(ToolStarted("c1", "run_python", {"code": "a = 1\nb = 2\nprint(a + b)"}, runs_script=True))
    view.handle(InnerToolCall("read_file", True, 1))
    live = io.StringIO()
    make_console(file=live).print(view)
    assert "⚙ run_python · 1 inner call(s)" in live.getvalue()
    view.handle(ToolFinished("c1", "run_python", True, 0.5, "3", inner_calls=1))
    # A tool that merely has a `code` argument is shown like any other.
    view.handle(ToolStarted("c2", "lookup", {"code": "E501"}))
    view.handle(ToolFinished("c2", "lookup", True, 0.1, "line too long"))
    lines = out.getvalue().splitlines()
    assert "→ run_python(3 line script)" in lines and any(
        line.startswith("✓ run_python · 1 inner call(s)") for line in lines
    )
    assert '→ lookup(code="E501")' in lines and any(line.startswith("✓ lookup · 0.10 s") for line in lines)
