"""A tool whose optional package is missing (ImportError) fails as `MissingDependency` with the
command that installs it — the Herald extra when there is one — both as a direct call and from
inside a script, instead of an "InternalError"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from herald.runtime.toolset import default_registry
from herald.tools.context import ToolContext
from herald.tools.registry import Registry, Tool
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import MakeAgent


def _import_fails(args: dict[str, Any], ctx: ToolContext) -> Any:
    """Fails the way Python does when the module is absent (or, with `partial`, when it is there
    but lacks a name the tool needs)."""
    module: str = args["module"]
    if args.get("partial"):
        raise ImportError(f"cannot import name 'Thing' from '{module}'", name=module)
    raise ModuleNotFoundError(f"No module named '{module}'", name=module)


LOADER = Tool(
    name="load_extra",
    description="Import an optional module (a stand-in for tools built on optional packages).",
    parameters={"type": "object", "properties": {"module": {"type": "string"}, "partial": {"type": "boolean"}},
                "required": ["module"]},
    handler=_import_fails,
)

EXPECTED = [
    ("playwright", "pip install 'herald[browser]'"),
    ("playwright.sync_api", "pip install 'herald[browser]'"),
    ("firecrawl", "pip install 'herald[web]'"),
    ("trafilatura", "pip install 'herald[web]'"),
    ("lxml_html_clean", "pip install 'herald[web]'"),
    ("lxml.html", "pip install 'herald[web]'"),
    ("paramiko", "pip install 'herald[ssh]'"),
    ("docker", "pip install 'herald[docker]'"),
    ("modal", "pip install 'herald[modal]'"),
    ("yaml_tools_nowhere.sub", "pip install yaml_tools_nowhere"),
]


def _registry() -> Registry:
    return Registry([*default_registry(), LOADER])


def test_direct_calls_name_the_package_and_extra(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(calls(*(call("load_extra", module=module) for module, _ in EXPECTED)), reply("noted"))
    result = make_agent(registry=_registry()).run("load them")
    assert result.status == "completed"
    results = [content for _, content in llm.requests[-1].tool_results()]
    assert len(results) == len(EXPECTED)
    for (module, install), content in zip(EXPECTED, results, strict=True):
        top = module.split(".")[0]
        assert content.startswith("Error (MissingDependency): load_extra cannot run here:"), content
        assert f"'{top}' is not installed" in content and f"Install it with: {install} " in content
        assert "InternalError" not in content


def test_an_installed_but_broken_package_says_upgrade(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(calls(call("load_extra", module="paramiko", partial=True)), reply("ok"))
    make_agent(registry=_registry()).run("load it")
    [(_, content)] = llm.requests[-1].tool_results()
    assert content.startswith("Error (MissingDependency):")
    assert "cannot import name 'Thing'" in content and "pip install --upgrade 'herald[ssh]'" in content


@pytest.mark.timeout(120)
def test_scripts_get_the_same_error(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    script = (
        "from hermes_tools import load_extra, ToolError\n"
        "try:\n    load_extra('firecrawl')\nexcept ToolError as exc:\n    print('caught:', exc)\n"
    )
    llm.script(calls(call("execute_code", code=script)), reply("done"))
    make_agent(registry=_registry()).run("try it in a script")
    [(_, content)] = llm.requests[-1].tool_results()
    output = json.loads(content)["output"]
    assert output.startswith("caught: ") and "pip install 'herald[web]'" in output
