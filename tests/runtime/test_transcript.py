"""Every call a script makes is logged to the transcript, not to the model's context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herald.transcript import read_transcript

from ._helpers import run_ok


def test_inner_calls_are_logged(make_runtime: Any, workspace: Path, tmp_path: Path) -> None:
    path = tmp_path / "logs" / "run.jsonl"
    runtime = make_runtime(transcript=path)
    (workspace / "a.txt").write_text("hello\n")
    long_content = "z" * 5000
    result = run_ok(
        runtime,
        f"""
        from hermes_tools import read_file, write_file, terminal, _call, ToolError
        read_file("a.txt")
        write_file("b.txt", {long_content!r})
        for bad in (lambda: read_file("missing.txt"), lambda: _call("nope", {{}})):
            try:
                bad()
            except ToolError:
                pass
        terminal("echo done")
        print("ok")
        """,
    )
    assert result.output == "ok\n"
    records = read_transcript(path)  # flushed when the run returns, before close
    calls = [r for r in records if r.get("type") == "sandbox_tool_call"]
    assert [c["tool"] for c in calls] == [
        "read_file",
        "write_file",
        "read_file",
        "nope",
        "terminal",
    ]
    for call in calls:
        assert isinstance(call["duration_ms"], int | float) and call["duration_ms"] >= 0
        assert call["run"] == calls[0]["run"]
        assert "ts" in call
    assert calls[0]["args"] == {"path": "a.txt", "offset": 1, "limit": 500}
    assert "error" not in calls[0] and calls[0]["reply_bytes"] > 0
    preview = calls[1]["args"]["content"]
    assert preview.startswith("zzz") and len(preview) < 300 and "5,000 chars" in preview
    assert "missing.txt" in calls[2]["error"]["message"]
    assert calls[3]["error"]["type"] == "UnknownTool"
    assert "error" not in calls[4]
    assert "hello" not in path.read_text()  # results are sized, not copied


def test_refused_calls_are_logged_and_runs_are_distinguished(
    make_runtime: Any, tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    runtime = make_runtime(transcript=path)
    code = """
    from hermes_tools import terminal, ToolError
    for _ in range(2):
        try:
            terminal("true")
        except ToolError:
            pass
    """
    run_ok(runtime, code, max_tool_calls=1)
    run_ok(runtime, code, max_tool_calls=1)
    calls = [r for r in read_transcript(path) if r.get("type") == "sandbox_tool_call"]
    assert len(calls) == 4
    assert [("error" in c) for c in calls] == [False, True, False, True]
    assert calls[1]["error"]["type"] == "ToolCallLimit"
    assert calls[0]["run"] == calls[1]["run"] != calls[2]["run"] == calls[3]["run"]


def test_transcript_can_be_turned_off(make_runtime: Any, settings: Any) -> None:
    runtime = make_runtime(transcript=False)
    run_ok(runtime, "from hermes_tools import terminal\nterminal('true')")
    assert runtime.transcript is None
    assert not settings.transcript_dir.exists()


def test_default_transcript_goes_to_the_data_dir(make_runtime: Any, settings: Any) -> None:
    runtime = make_runtime()
    run_ok(runtime, "from hermes_tools import terminal\nterminal('true')")
    files = list(settings.transcript_dir.glob("runtime-*.jsonl"))
    assert len(files) == 1
    assert [r["tool"] for r in read_transcript(files[0])] == ["terminal"]


def test_a_failing_transcript_costs_no_results(make_runtime: Any, workspace: Path) -> None:
    """/dev/full accepts the open but fails every write with ENOSPC, like a full disk."""
    runtime = make_runtime(transcript=Path("/dev/full"))
    result = run_ok(
        runtime,
        """
        from hermes_tools import write_file, read_file
        write_file("kept.txt", "x" * 20000)
        print(read_file("kept.txt")["total_lines"])
        """,
    )
    assert result.output == "1\n"
    assert result.tool_calls_made == 2
    assert (workspace / "kept.txt").read_text() == "x" * 20000


def test_surrogates_in_arguments_are_logged(make_runtime: Any, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    runtime = make_runtime(transcript=path)
    run_ok(
        runtime,
        """
        from hermes_tools import read_file, ToolError
        try:
            read_file("bad" + chr(0xDCFF) + ".txt")
        except ToolError:
            pass
        """,
    )
    (call,) = read_transcript(path)
    assert call["args"]["path"] == "bad\udcff.txt"
    assert "error" in call
