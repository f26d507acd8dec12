"""The behaviour flags on Tool: what `runs_scripts` requires, and what counts as `read_only`."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from herald.agent.todo import TodoList, todo_tool
from herald.runtime.toolset import default_registry
from herald.tools import Tool
from tests.tools.conftest import registered

CODE = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}


def _noop(args: dict[str, Any], ctx: Any) -> None:
    return None


def test_a_tool_that_runs_scripts_is_direct_only_and_takes_code() -> None:
    Tool("run_python", "Runs a script.", CODE, _noop, sandbox=False, runs_scripts=True)
    with pytest.raises(ValueError, match="sandbox=False"):
        Tool("run_python", "Runs a script.", CODE, _noop, runs_scripts=True)  # scripts could nest it
    optional = {"type": "object", "properties": {"code": {"type": "string"}}}
    with pytest.raises(ValueError, match="required 'code'"):
        Tool("run_python", "Runs a script.", optional, _noop, sandbox=False, runs_scripts=True)


def test_read_only_is_neither_a_mutation_nor_a_change_of_agent_state() -> None:
    assert Tool("peek", "Reads.", CODE, _noop).read_only
    assert not Tool("poke", "Writes.", CODE, _noop, mutates=True).read_only
    assert not Tool("note", "Notes.", CODE, _noop, changes_agent_state=True).read_only
    todo = todo_tool(TodoList())
    assert not todo.mutates and todo.changes_agent_state and not todo.read_only
    registry = default_registry()
    assert registered(registry, "read_file").read_only and not registered(registry, "terminal").read_only


class PeekResult(TypedDict):
    text: str


def test_the_schema_of_a_tool() -> None:
    tool = Tool("peek", "Reads.", CODE, _noop, returns=PeekResult)
    assert tool.llm_schema() == {
        "type": "function",
        "function": {"name": "peek", "description": "Reads.\nReturns: {'text': str}", "parameters": CODE},
    }
