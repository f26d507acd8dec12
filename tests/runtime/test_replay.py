"""Record and replay on a Runtime (herald/runtime/replay/), with isolation at its default: every
call of a run, from many threads at once, is in the recording with its outcome; recorded errors
and refusals replay as the same ToolError and the same counts; calls that repeat with different
results replay in order; a replay answers nothing it was not given."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herald import Runtime
from herald.runtime.replay import RECORDING_SETTINGS, Player, Recorder, read_recording
from herald.runtime.replay.format import header
from herald.runtime.sandbox.result import ExecutionResult

MakeRuntime = Callable[..., Runtime]


def _record(runtime: Runtime, code: str, path: Path, **run: Any) -> ExecutionResult:
    recorder = Recorder(path)
    recorder.start(header(code, backend="local", exec_mode=runtime.exec_mode, max_tool_calls=50,
                          tools=[t.name for t in runtime.dispatcher.script_tools]))
    runtime.dispatcher.tap = recorder
    try:
        result = runtime.execute(code, **run)
    finally:
        runtime.dispatcher.tap = None
    assert recorder.close({"status": result.status, "output": result.output}) is None
    return result


def _replay(runtime: Runtime, code: str, path: Path, **run: Any) -> tuple[ExecutionResult, Player]:
    player = Player(read_recording(path), code)
    runtime.dispatcher.tap = player
    try:
        return runtime.execute(code, **run), player
    finally:
        runtime.dispatcher.tap = None


def test_calls_from_many_threads_are_all_recorded_once(make_runtime: MakeRuntime, workspace: Path,
                                                       tmp_path: Path) -> None:
    for i in range(40):
        (workspace / f"f{i}.txt").write_text(f"file {i}\n")
    code = ("import threading\nfrom hermes_tools import read_file, parallel\n"
            "def worker(k):\n    for i in range(k, 40, 8):\n        read_file(f'f{i}.txt')\n"
            "threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]\n"
            "[t.start() for t in threads]; [t.join() for t in threads]\n"
            "pages = parallel([(read_file, f'f{i}.txt') for i in range(40)])\n"
            "print(sum(p['total_lines'] for p in pages))\n")
    runtime = make_runtime(overrides=RECORDING_SETTINGS)
    for attempt in range(5):  # threads interleave differently each time: every order must record whole
        path = tmp_path / f"run{attempt}.jsonl"
        result = _record(runtime, code, path, max_tool_calls=100)
        assert result.ok and result.tool_calls_made == 80, result.error
        recording = read_recording(path)
        assert sorted(c.number for c in recording.calls) == list(range(1, 81))
        assert sorted(c.args["path"] for c in recording.calls) == sorted([f"f{i}.txt" for i in range(40)] * 2)
        replayed, player = _replay(runtime, code, path, max_tool_calls=100)
        assert replayed.output == result.output == "40\n" and player.mismatch is None and not player.unused()


def test_recorded_errors_and_refusals_replay_the_same(make_runtime: MakeRuntime, workspace: Path,
                                                      tmp_path: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    code = ("from hermes_tools import read_file, write_file, ToolError\n"
            "for call in (lambda: read_file('missing.txt'), lambda: write_file('/etc/herald-x', 'x'),\n"
            "             lambda: read_file('a.txt'), lambda: read_file('a.txt'), lambda: read_file('a.txt')):\n"
            "    try:\n        print(call()['content'])\n"
            "    except ToolError as exc:\n        print(exc.error_type, '|', exc)\n")
    runtime = make_runtime(overrides=RECORDING_SETTINGS)
    path = tmp_path / "run.jsonl"
    recorded = _record(runtime, code, path, max_tool_calls=4)  # the fifth call is past the limit
    assert "FileNotFound | " in recorded.output and "PolicyRefused | " in recorded.output
    assert "ToolCallLimit | " in recorded.output and recorded.refused_calls == 2
    replayed, player = _replay(runtime, code, path, max_tool_calls=4)
    assert player.mismatch is None, player.mismatch
    assert replayed.output == recorded.output
    assert (replayed.refused_calls, replayed.tool_calls_made, replayed.budget_exhausted) == (
        recorded.refused_calls, recorded.tool_calls_made, recorded.budget_exhausted)


def test_a_call_repeated_with_different_results_replays_them_in_order(make_runtime: MakeRuntime,
                                                                       tmp_path: Path) -> None:
    code = ("from hermes_tools import terminal\n"
            "for _ in range(5):\n    print(terminal('cat counter 2>/dev/null; echo x >> counter')['output'])\n")
    runtime = make_runtime(overrides=RECORDING_SETTINGS)
    path = tmp_path / "run.jsonl"
    recorded = _record(runtime, code, path)
    assert recorded.output.count("x") == 10  # 0 + 1 + 2 + 3 + 4 lines read back
    replayed, player = _replay(runtime, code, path)
    assert replayed.output == recorded.output and player.mismatch is None


def test_a_replay_answers_only_from_the_recording(make_runtime: MakeRuntime, workspace: Path, tmp_path: Path) -> None:
    """Arguments that differ in any way (a key, a value's type, one more argument) match nothing:
    the real file is never read, and the script gets the mismatch."""
    (workspace / "a.txt").write_text("the real content\n")
    runtime = make_runtime(overrides=RECORDING_SETTINGS)
    path = tmp_path / "run.jsonl"
    _record(runtime, "from hermes_tools import read_file\nread_file('a.txt')\n", path)
    lines = path.read_text().splitlines()
    call = json.loads(lines[1])
    call["result"]["content"] = "     1|what the recording says"
    path.write_text("\n".join([lines[0], json.dumps(call), lines[2]]) + "\n")
    for attempt in ("read_file('a.txt', limit=10)", "read_file('./a.txt')", "read_file('a.txt', offset=2)"):
        code = f"from hermes_tools import read_file\nprint(read_file('a.txt')['content'])\nprint({attempt})\n"
        replayed, player = _replay(runtime, code, path)
        assert replayed.status == "error"
        assert replayed.output == "     1|what the recording says\n"
        assert "the real content" not in replayed.output + replayed.error
        assert player.mismatch is not None and "Replay mismatch at call 2: read_file(" in player.mismatch
        assert "Every one of the 1 recorded call(s) has been used" in player.mismatch
