"""The dispatcher's direct-call path (a model's tool call outside any script): the same argument
checks, error mapping and transcript as script calls, no per-script budget, no script-only
refusals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from herald import Runtime
from herald.transcript import read_transcript


def test_direct_calls_bind_arguments_and_map_errors(runtime: Runtime, workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    ok = runtime.dispatcher.call_direct("read_file", {"path": "a.txt"}, call_id="call_1")
    assert ok["result"]["content"].endswith("alpha")
    missing = runtime.dispatcher.call_direct("read_file", {}, call_id="call_2")
    assert missing["error"]["message"] == "read_file: missing required argument 'path' (string)."
    unknown_arg = runtime.dispatcher.call_direct("read_file", {"path": "a.txt", "colour": 1})
    assert "unknown argument(s) 'colour'" in unknown_arg["error"]["message"]
    not_found = runtime.dispatcher.call_direct("read_file", {"path": "nope.txt"})
    assert not_found["error"]["type"] == "FileNotFound"
    unknown = runtime.dispatcher.call_direct("fly", {})
    assert unknown["error"]["message"].startswith("Unknown tool: 'fly'. Enabled tools:")


def test_direct_calls_have_no_script_budget_and_are_logged(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(overrides={"sandbox.max_tool_calls": 1})
    for n in range(3):
        assert "result" in rt.dispatcher.call_direct("terminal", {"command": f"echo {n}"}, call_id=f"c{n}")
    assert rt.transcript is not None
    rt.transcript.flush()
    records = [r for r in read_transcript(rt.transcript.path) if r["type"] == "tool_call"]
    assert [(r["run"], r["tool"]) for r in records] == [("c0", "terminal"), ("c1", "terminal"), ("c2", "terminal")]
    assert all("duration_ms" in r and r["reply_bytes"] > 0 for r in records)


def test_disabled_tools_are_refused_directly(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(tools=["read_file"])
    reply = rt.dispatcher.call_direct("terminal", {"command": "true"})
    assert reply["error"]["message"] == "Tool 'terminal' is not enabled in this session. Enabled tools: read_file."
