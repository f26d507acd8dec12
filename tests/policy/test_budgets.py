"""Per-script budgets: each one exhausted from a script, caught there, and reported in the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from herald.runtime.toolset import default_registry
from tests.cli._herald import run
from tests.runtime._helpers import run_ok, script

from .conftest import MakeRuntime

UNTIL_EXHAUSTED = """
import json
import hermes_tools
from hermes_tools import ToolError
done, error = 0, None
for _ in range(50):
    try:
        {call}
        done += 1
    except ToolError as exc:
        error = [exc.error_type, str(exc)]
        break
print(json.dumps({{"done": done, "error": error}}))
"""


def exhaust(runtime: Any, call: str, **budgets: float) -> tuple[dict[str, Any], Any]:
    result = run_ok(runtime, UNTIL_EXHAUSTED.format(call=call), budgets=budgets or None, timeout=120)
    out = json.loads(result.output)
    assert out["error"] is not None and out["error"][0] == "BudgetExhausted", out
    return out, result


def test_reply_bytes(make_runtime: MakeRuntime, workspace: Path) -> None:
    (workspace / "a.txt").write_text("x" * 100 + "\n")
    out, result = exhaust(make_runtime(), "hermes_tools.read_file('a.txt')", reply_bytes=1000)
    assert 1 <= out["done"] < 10 and "Budget reply_bytes (1000) exhausted" in out["error"][1]
    usage = result.budgets["reply_bytes"]
    assert usage["refused"] and usage["limit"] == 1000 and 0 < usage["used"] <= 1000
    assert any("reply_bytes" in note for note in result.notes)


def test_tool_seconds(make_runtime: MakeRuntime) -> None:
    # The first call starts with the budget untouched and uses it all up, however fast it runs.
    out, result = exhaust(make_runtime(), "hermes_tools.terminal('sleep 0.4')", tool_seconds=0.3)
    assert out["done"] == 1 and "Budget tool_seconds (0.3) exhausted" in out["error"][1]
    assert result.budgets["tool_seconds"]["used"] >= 0.4


def test_web_calls(make_runtime: MakeRuntime, web_settings: dict[str, Any]) -> None:
    runtime = make_runtime(overrides={**web_settings, "sandbox.budgets": {"web_calls": 3}})
    out, result = exhaust(runtime, "hermes_tools.web_search('doc')")  # the setting's budget
    assert out["done"] == 3 and "Budget web_calls (3) exhausted: 3 web calls made" in out["error"][1]
    assert result.budgets == {"web_calls": {"limit": 3, "used": 3, "refused": True}}


def test_browser_actions(make_runtime: MakeRuntime) -> None:
    # Refused before the call: no browser is needed to see the budget at work.
    runtime = make_runtime(tools=[n for n in default_registry().names() if n.startswith("browser_")])
    out, result = exhaust(runtime, "hermes_tools.browser_navigate('https://example.org')", browser_actions=0)
    assert out["done"] == 0 and "browser_actions" in out["error"][1]
    assert result.budgets["browser_actions"] == {"limit": 0, "used": 0, "refused": True}


def test_bytes_written(make_runtime: MakeRuntime, workspace: Path) -> None:
    out, result = exhaust(make_runtime(), "hermes_tools.write_file('f%d.txt' % done, 'héllo')", bytes_written=20)
    assert out["done"] == 3 and "this call would write 6" in out["error"][1]
    assert result.budgets["bytes_written"]["used"] == 18
    assert sorted(p.name for p in workspace.iterdir()) == ["f0.txt", "f1.txt", "f2.txt"]


def test_budgets_are_per_script_and_checked(make_runtime: MakeRuntime, workspace: Path) -> None:
    runtime = make_runtime()
    exhaust(runtime, "hermes_tools.write_file('a.txt', 'abc')", bytes_written=3)
    second = runtime.execute(script("from hermes_tools import write_file\nwrite_file('b.txt', 'abc')"),
                             budgets={"bytes_written": 3})
    assert second.status == "success" and second.budgets["bytes_written"]["used"] == 3
    assert runtime.execute("print(1)").budgets == {}
    with pytest.raises(ValueError, match="unknown budget 'bytes'"):
        runtime.execute("print(1)", budgets={"bytes": 1})


def test_budgets_from_the_command_line(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code = UNTIL_EXHAUSTED.format(call="hermes_tools.write_file('x.txt', 'abcd')")
    proc = run(["exec", "-", "--json", "-c", 'sandbox.budgets="bytes_written=10"'], workspace, home, stdin=code)
    result = json.loads(proc.stdout)
    assert json.loads(result["output"])["done"] == 2
    assert result["budgets"]["bytes_written"] == {"limit": 10, "used": 8, "refused": True}
    proc = run(["exec", "-", "-c", "sandbox.budgets={web=1}"], workspace, home, stdin="print(1)")
    assert proc.returncode == 2 and "unknown budget 'web'" in proc.stderr
