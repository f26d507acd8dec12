"""Typed results: each tool declares what it returns as a TypedDict beside it, the generated
stubs carry those classes (so a script, `herald tools` and a model's prompt say what comes back),
and the tools really return that shape."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import pytest

from herald.runtime.sandbox.sandboxdir import write_sandbox
from herald.runtime.toolset import default_registry
from herald.tools import Tool
from herald.tools.returns import annotation, shape, stub_classes
from herald.tools.stubgen import render_module, signatures
from tests.cli._herald import run as run_herald
from tests.fixtures.shapes import mismatches

CallTool = Callable[..., Any]  # the `call` fixture of tests/tools/conftest.py

# Tools whose result is still a line of text: the web tools, rewritten elsewhere (transitional).
def test_every_tool_declares_a_typed_result() -> None:
    for tool in default_registry():
        assert isinstance(tool.returns, type), f"{tool.name} declares no TypedDict result"
        assert inspect.getmodule(tool.returns) is inspect.getmodule(tool.handler), (
            f"{tool.name}: its result type is not defined beside it"
        )


def test_file_search_and_terminal_results_match_their_declared_types(call: CallTool, workspace: Path) -> None:
    registry = default_registry()
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "mod.py").write_text("".join(f"value_{n} = {n}\n" for n in range(30)))
    results = {
        "write_file": call("write_file", path="new.txt", content="hello\n"),
        "read_file": call("read_file", path="pkg/mod.py", limit=5),  # next_offset and hint
        "patch": call("patch", path="pkg/mod.py", old_string="value_3 = 3", new_string="value_3 = 33"),
        "terminal": call("terminal", command="echo hi; exit 3"),
    }
    matches = call("search_files", pattern=r"value_\d", path="pkg", limit=3)  # matches, has_more
    files = call("search_files", pattern="*.py", target="files")
    for name, result in [*results.items(), ("search_files", matches), ("search_files", files)]:
        tool = registry.get(name)
        assert tool is not None
        assert mismatches(result, tool.returns) == [], (name, result)
    assert "next_offset" in results["read_file"] and "next_offset" in matches  # optional keys seen too


class _Item(TypedDict):
    name: str
    kind: Literal["a", "b"]


class _Page(TypedDict):
    items: list[_Item]
    total: int
    cursor: NotRequired[str | None]
    extra: NotRequired[dict[str, float]]


def test_shape_and_stub_of_a_result_with_nested_optional_and_literal_keys() -> None:
    assert (
        shape(_Page)
        == "{'items': [{'name': str, 'kind': 'a'|'b'}], 'total': int, 'cursor'?: str | None, 'extra'?: {str: float}}"
    )
    source = stub_classes([_Page])
    assert source.index("class _Item(TypedDict)") < source.index("class _Page(__PageKeys, total=False)")
    assert "    items: List[_Item]\n" in source and "    cursor: Optional[str]\n" in source
    assert "    extra: Dict[str, float]\n" in source
    assert annotation(_Page) == "_Page"
    namespace: dict[str, object] = {}
    exec("from typing import Any, Dict, List, Literal, Optional, TypedDict, Union\n" + source, namespace)
    made: Any = namespace["_Page"]  # a TypedDict class, made at run time
    assert made.__required_keys__ == {"items", "total"} and made.__optional_keys__ == {"cursor", "extra"}


def test_two_result_types_of_one_name_are_refused() -> None:
    first = TypedDict("Result", {"a": int})  # type: ignore[name-match]  # noqa: UP013 (two classes, one name)
    second = TypedDict("Result", {"b": str})  # type: ignore[name-match]  # noqa: UP013
    with pytest.raises(ValueError, match="two result types are named Result"):
        stub_classes([first, second])


def test_a_result_type_named_like_a_tool_or_a_helper_is_refused() -> None:
    clash = TypedDict("parallel", {"a": int})  # type: ignore[name-match]  # noqa: UP013 (a lower-case name)
    tool = Tool(name="clashing", description="d", parameters={"type": "object", "properties": {}},
                handler=lambda args, ctx: {"a": 1}, returns=clash)
    with pytest.raises(ValueError, match="named parallel"):
        render_module([tool])


def test_returns_must_be_a_typed_dict() -> None:
    with pytest.raises(ValueError, match="returns must be a TypedDict"):
        Tool(name="x", description="d", parameters={"type": "object", "properties": {}},
             handler=lambda args, ctx: None, returns=dict)


def test_a_script_sees_the_result_types_in_the_stub_module(tmp_path: Path) -> None:
    """The classes are real TypedDicts in the child (so an editor or a model reading the module
    sees keys and types), with the right required and optional keys."""
    write_sandbox(tmp_path, default_registry().sandbox_tools(None))
    code = (
        "import sys, typing; sys.path.insert(0, '.'); import hermes_tools as h\n"
        "hints = typing.get_type_hints(h.search_files)\n"
        "result = hints['return']\n"
        "print(result.__name__, sorted(result.__required_keys__), sorted(result.__optional_keys__))\n"
        "print(typing.get_type_hints(result)['matches'])\n"
        "print(sorted(typing.get_type_hints(h.SearchMatch)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "SearchResult ['count', 'engine', 'has_more', 'offset'] ['files', 'hint', 'matches', 'next_offset']",
        "typing.List[hermes_tools.SearchMatch]",
        "['line', 'path', 'text']",
    ]


def test_signatures_and_the_prompt_say_what_comes_back() -> None:
    from herald import Settings
    from herald.runtime.execute_code import execute_code_description

    tools = default_registry().sandbox_tools(["search_files", "read_file"])
    assert signatures(tools)[1].endswith(") -> SearchResult")
    description = execute_code_description(tools, Settings())
    assert "Returns {'matches'?: [{'path': str, 'line': int, 'text': str (the matching line)}]" in description


def test_herald_tools_lists_each_result_shape(tmp_path: Path, home: Path) -> None:
    done = run_herald(["tools", "--tools", "search_files,patch"], tmp_path, home)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # rich wraps long lines
    assert "search_files(pattern: str," in text and "-> SearchResult" in text
    assert "returns {'matches'?: [{'path': str, 'line': int, 'text': str" in text
    assert "'match': 'exact'|'whitespace'|'indentation'|'collapsed-whitespace'" in text
