"""Tools that cannot work in a session (`Tool.unavailable_reason`) are not offered to the model as
a sure failure: left out when the session enabled every tool, kept with the reason in their
description when the session named them. One decision (`offer_tools`) feeds the model's tool
list, execute_code's description, the script stubs and the dispatcher."""

from __future__ import annotations

import json
from typing import Any

from herald import Settings
from herald.runtime.offer import offer_tools
from herald.runtime.toolset import default_registry
from herald.tools.context import ToolContext
from herald.tools.registry import Registry, Tool, ToolError
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import MakeAgent

REASON = "no GADGET_API_KEY is set (export it, or set gadget.key in the config file)"


def _gadget(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise ToolError("gadget: no GADGET_API_KEY is set.")


GADGET = Tool(
    name="gadget",
    description="Fetch a gadget report.\nMore detail on reports.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    handler=_gadget,
    unavailable=lambda settings: REASON,
)
DIRECT_GADGET = Tool(
    name="direct_gadget",
    description="A gadget only the model calls.",
    parameters={"type": "object", "properties": {}},
    handler=_gadget,
    sandbox=False,
    unavailable=lambda settings: REASON,
)


def _registry() -> Registry:
    return Registry([*default_registry(), GADGET, DIRECT_GADGET])


def _description(tools: list[dict[str, Any]], name: str) -> str:
    for tool in tools:
        function = tool.get("function", tool)
        if function["name"] == name:
            return str(function["description"])
    raise KeyError(name)


def test_left_out_when_every_tool_is_enabled(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    script = "import hermes_tools\nprint(hasattr(hermes_tools, 'gadget'))"
    llm.script(calls(call("execute_code", code=script), call("gadget", q="x")), reply("ok"))
    agent = make_agent(registry=_registry())
    agent.run("use the gadget")
    first = llm.requests[0]
    assert "gadget" not in first.tool_names and "direct_gadget" not in first.tool_names
    assert "read_file" in first.tool_names
    assert "gadget" not in _description(first.body["tools"], "execute_code")
    script_result, direct_result = (content for _, content in llm.requests[-1].tool_results())
    assert json.loads(script_result)["output"].strip() == "False"  # no stub either
    assert f"Tool 'gadget' is not available in this session: {REASON}." in direct_result


def test_kept_and_marked_when_named_explicitly(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    script = (
        "from hermes_tools import gadget, ToolError\ntry:\n    gadget('x')\nexcept ToolError as exc:\n    print(exc)"
    )
    llm.script(calls(call("execute_code", code=script)), reply("ok"))
    agent = make_agent(registry=_registry(), tools=["gadget", "direct_gadget", "read_file"])
    agent.run("use the gadget")
    first = llm.requests[0]
    assert sorted(first.tool_names) == ["direct_gadget", "execute_code", "gadget", "read_file", "todo"]
    note = f"Unavailable in this session: {REASON}."
    assert _description(first.body["tools"], "gadget").startswith(f"Fetch a gadget report. {note}\nMore detail")
    assert note in _description(first.body["tools"], "direct_gadget")
    assert f"Fetch a gadget report. {note}" in _description(first.body["tools"], "execute_code")
    [(_, content)] = llm.requests[-1].tool_results()
    assert "gadget: no GADGET_API_KEY is set." in json.loads(content)["output"]  # it ran, and said why


def test_offer_tools_is_the_one_decision() -> None:
    settings = Settings()
    everything = offer_tools(_registry(), None, settings)
    # (Built-in tools may be withheld too, depending on this machine: a web key, a browser.)
    assert everything.withheld["gadget"] == everything.withheld["direct_gadget"] == REASON
    assert "gadget" not in {t.name for t in everything.tools}
    assert {t.name for t in everything.script_tools} == {t.name for t in everything.tools if t.sandbox}
    named = offer_tools(_registry(), ["gadget", "terminal"], settings)
    assert named.withheld == {} and [t.name for t in named.tools] == ["gadget", "terminal"]
    assert named.tools[0].description.startswith("Fetch a gadget report. Unavailable in this session: ")
