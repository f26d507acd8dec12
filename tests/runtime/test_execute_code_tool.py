"""execute_code as a Tool: the Runtime makes it (its handler runs the script there) and offers it
to the dispatcher's direct path; any tool that runs scripts (`Tool.runs_scripts`) is refused from
inside a script, and holds no locks while its script's own calls take theirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from herald.runtime.execute_code import EXECUTE_CODE, execute_code_schema, policy_text
from herald.runtime.toolset import default_registry
from herald.tools.registry import Registry, Tool
from herald.tools.resources import ANY_FILE, SHELL, fixed
from herald.transcript import read_transcript

from ._helpers import run_ok

CODE = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}


def _never(args: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("a script must not reach this handler")


RUN_PYTHON = Tool(
    name="run_python",
    description="Test tool: runs a script, as execute_code does.",
    parameters=CODE,
    handler=_never,
    sandbox=False,
    touches=fixed(SHELL, ANY_FILE),
    runs_scripts=True,
)


@pytest.mark.timeout(60)
def test_execute_code_runs_through_the_direct_path(make_runtime: Any, workspace: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rt = make_runtime(transcript=path)
    assert rt.execute_tool.name == EXECUTE_CODE and rt.execute_tool.runs_scripts
    assert EXECUTE_CODE not in [t.name for t in rt.dispatcher.tools]  # the registry's offer stays as it was
    # The tool touches every file and the shell; the script's calls lock files and the shell
    # too, so this only finishes because the dispatcher holds nothing for the script itself.
    code = (
        "from hermes_tools import write_file, terminal\n"
        "write_file('a.txt', 'x')\nprint(terminal('cat a.txt')['output'])"
    )
    reply = rt.dispatcher.call_direct(EXECUTE_CODE, {"code": code}, call_id="c1")
    result = reply["result"]
    assert result["status"] == "success" and result["output"].strip() == "x" and result["tool_calls_made"] == 2
    assert (workspace / "a.txt").read_text() == "x"
    rt.transcript.flush()
    records = read_transcript(path)
    assert [r["tool"] for r in records if r.get("type") == "sandbox_tool_call"] == ["write_file", "terminal"]
    (direct,) = [r for r in records if r.get("type") == "tool_call"]
    assert direct["tool"] == EXECUTE_CODE and direct["run"] == "c1"
    assert direct["status"] == "success" and direct["inner_calls"] == 2 and direct["duration_ms"] > 0


def test_bad_arguments_and_failed_scripts(runtime: Any) -> None:
    missing = runtime.dispatcher.call_direct(EXECUTE_CODE, {})
    assert missing["error"]["type"] == "ToolError" and "missing required argument 'code'" in missing["error"]["message"]
    failed = runtime.dispatcher.call_direct(EXECUTE_CODE, {"code": "raise SystemExit(3)"})["result"]
    assert failed["status"] == "error" and failed["exit_code"] == 3


def test_tools_that_run_scripts_are_refused_inside_a_script(make_runtime: Any) -> None:
    rt = make_runtime(registry=Registry([*default_registry(), RUN_PYTHON]))
    assert "run_python" not in [t.name for t in rt.dispatcher.script_tools]
    result = run_ok(
        rt,
        """
        from hermes_tools import _call, ToolError
        for name in ("run_python", "execute_code"):
            try:
                _call(name, {"code": "print(1)"})
            except ToolError as exc:
                print(exc.error_type, "|", exc)
        """,
    )
    custom, builtin = result.output.splitlines()
    assert custom.startswith(
        "ToolNotAvailable | run_python cannot be called from inside a script (no nested sandboxes)."
    )
    assert builtin.startswith(
        "ToolNotAvailable | execute_code cannot be called from inside a script (no nested sandboxes)."
    )
    assert result.tool_calls_made == 0


def test_the_schema_without_a_runtime_is_the_tools(runtime: Any) -> None:
    schema = execute_code_schema(runtime.dispatcher.script_tools, runtime.settings, policy_text(runtime))
    assert schema == runtime.execute_tool.llm_schema()
    assert "read_file(" in schema["function"]["description"]


def test_add_direct_takes_only_new_direct_call_tools(runtime: Any) -> None:
    with pytest.raises(ValueError, match="already offered"):
        runtime.dispatcher.add_direct(runtime.execute_tool)
    scriptable = Tool("echo_it", "Test tool.", CODE, _never)
    with pytest.raises(ValueError, match="only direct-call tools"):
        runtime.dispatcher.add_direct(scriptable)
