"""A run whose calls were refused says so where a model and a person look: the result's
`refused_calls` / `budget_exhausted` fields, its notes, and `herald exec`'s summary line, even
when the script caught every refusal and exited 0 (a `success` that did not do all its work)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from tests.cli._herald import run as run_herald

from ._helpers import run_ok, script

CATCH_EVERY_REFUSAL = """
from hermes_tools import ToolError, {tool}
done = refused = 0
for i in range({calls}):
    try:
        {call}
        done += 1
    except ToolError as exc:
        refused += 1
print(done, refused)
"""


def _catching(tool: str, call: str, calls: int) -> str:
    return CATCH_EVERY_REFUSAL.format(tool=tool, call=call, calls=calls)


def test_calls_past_the_limit_are_counted_in_a_field_the_model_can_check(runtime: Runtime, workspace: Path) -> None:
    (workspace / "f.txt").write_text("x\n")
    result = run_ok(runtime, _catching("read_file", "read_file('f.txt')", 9), max_tool_calls=4)
    assert result.output == "4 5\n"
    assert result.status == "success"  # the script chose to go on; the fields say it is incomplete
    as_dict = result.to_dict()
    assert as_dict["refused_calls"] == 5 and as_dict["budget_exhausted"] is True
    assert any("5 tool call(s) were refused: the limit is 4" in note for note in result.notes)
    assert "work is incomplete" in result.error


def test_a_run_without_refusals_says_none(runtime: Runtime, workspace: Path) -> None:
    (workspace / "f.txt").write_text("x\n")
    result = run_ok(runtime, _catching("read_file", "read_file('f.txt')", 3), max_tool_calls=3)
    assert (result.refused_calls, result.budget_exhausted, result.notes) == (0, False, [])


def test_policy_refusals_are_counted_and_noted_but_are_no_exhausted_budget(make_runtime: Any, workspace: Path) -> None:
    runtime = make_runtime(policy="read-only")
    result = run_ok(runtime, _catching("write_file", "write_file('out%d.txt' % i, 'x')", 3))
    assert result.output == "0 3\n"
    assert not list(workspace.iterdir())  # nothing was written
    assert (result.refused_calls, result.budget_exhausted) == (3, False)
    assert any("3 tool call(s) were refused by the permission policy" in note for note in result.notes)


def test_a_used_up_budget_is_counted_with_the_calls_it_refused(runtime: Runtime, workspace: Path) -> None:
    code = _catching("write_file", "write_file('out%d.txt' % i, 'abcd')", 5)
    result = run_ok(runtime, code, budgets={"bytes_written": 10})
    assert result.output == "2 3\n"  # 4 + 4 bytes fit, the third write would pass 10
    assert (result.refused_calls, result.budget_exhausted) == (3, True)
    assert any("bytes_written; 3 call(s) that needed them were refused" in note for note in result.notes)


def test_calls_the_script_answers_itself_count_past_the_limit_too(make_runtime: Any, workspace: Path) -> None:
    """read_file answered in the script's own process (selfserve) still reaches the limit: the
    calls past it go to Herald, which refuses and counts them."""
    (workspace / "f.txt").write_text("x\n")
    runtime = make_runtime(overrides={"sandbox.backend_tools": True})
    result = run_ok(runtime, _catching("read_file", "read_file('f.txt')", 7), max_tool_calls=2)
    assert result.output == "2 5\n"
    assert (result.tool_calls_made, result.refused_calls, result.budget_exhausted) == (2, 5, True)


def test_herald_exec_summary_line_names_the_refused_calls(tmp_path: Path, home: Path) -> None:
    work = tmp_path / "proj"
    work.mkdir()
    (work / "f.txt").write_text("x\n")
    (work / "s.py").write_text(script(_catching("read_file", "read_file('f.txt')", 5)))
    done = run_herald(["exec", "s.py", "--max-tool-calls", "2"], work, home)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "2 3\n"
    summary = done.stderr.strip().splitlines()[-1]
    assert "2 tool call(s) (3 refused)" in summary, done.stderr
    assert "3 tool call(s) were refused: the limit is 2" in done.stderr


def test_default_call_budget_fits_the_readme_bulk_example(tmp_path: Path) -> None:
    """README's first example (search, patch each file, read them all back, run a check) over
    200 files runs as written under the default `sandbox.max_tool_calls`: 402 calls."""
    work = tmp_path / "proj"
    (work / "ledger").mkdir(parents=True)
    for n in range(200):
        (work / "ledger" / f"m{n:03d}.py").write_text(f"from money import legacy_round\nX{n} = legacy_round({n})\n")
    (work / "check.py").write_text("print('checked')\n")
    settings = Settings(data_dir=tmp_path / "data")

    with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as rt:
        result = run_ok(rt, """
            from hermes_tools import search_files, patch, read_file, terminal, parallel

            hits = search_files(r"legacy_round", path="ledger", file_glob="*.py", limit=1000)
            files = sorted({m["path"] for m in hits["matches"]})
            for path in files:
                patch(path, "legacy_round", "round_money", replace_all=True)
            pages = parallel([(read_file, p) for p in files])
            print(terminal("python3 check.py")["output"], sum("round_money" in p["content"] for p in pages))
            """, timeout=600)
    assert result.output == "checked 200\n"
    assert (result.tool_calls_made, result.refused_calls) == (402, 0)
    assert settings.sandbox.max_tool_calls >= 402
