"""`herald run --json`: one JSON object per line on stdout as things happen (model calls, tool
calls, a script's inner calls, notices, streamed text), the result object last. Read from a real
subprocess while it runs."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLMServer, Turn, call, calls, error, reply

from .test_cli_run import HERALD, _env

WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.05; done; echo released"


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.mark.timeout(180)
def test_events_stream_as_json_lines_then_the_result(workspace: Path, tmp_path: Path, llm: FakeLLMServer) -> None:
    script = "from hermes_tools import terminal\nprint(terminal('echo one')['output'])"
    llm.script(
        error(429, "slow down", headers={"retry-after": "0.01"}),
        calls(call("execute_code", code=script), text="Let me look."),
        calls(call("terminal", command=WAIT_FOR_GO, timeout=60)),
        reply("All done.\nThe file is fine."),
    )
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen(
        [
            *HERALD,
            "run",
            "check things",
            "--json",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            llm.openai_base_url,
        ],
        cwd=workspace,
        env=_env(home, OPENAI_API_KEY="k"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    lines = _lines(proc)
    events: list[dict[str, Any]] = []
    released_while_running = False
    deadline = time.monotonic() + 120
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if line is None:
            break
        event = json.loads(line)  # every line is one whole JSON object
        events.append(event)
        if event["event"] == "tool_started" and event["name"] == "terminal":
            # The command waits for this file: seeing the event now proves it came while the
            # tool was still running, not at the end.
            released_while_running = not any(e["event"] == "tool_finished" and e["name"] == "terminal" for e in events)
            (workspace / "go").touch()
    proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert released_while_running

    kinds = [e["event"] for e in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    result = events[-1]
    assert result["status"] == "completed" and result["final_text"] == "All done.\nThe file is fine."
    assert [c["name"] for c in result["tool_calls"]] == ["execute_code", "terminal"]
    assert all(isinstance(e["elapsed"], float | int) for e in events)

    [notice] = [e for e in events if e["event"] == "notice"]
    assert notice["kind"] == "retry" and "rate_limit" in notice["text"]
    assert kinds.count("model_call_started") == kinds.count("model_call_finished") == 3  # the 429 was retried in turn 1
    [inner] = [e for e in events if e["event"] == "inner_tool_call"]
    assert inner == {**inner, "tool": "terminal", "ok": True, "count": 1}
    started = [e for e in events if e["event"] == "tool_started"]
    finished = [e for e in events if e["event"] == "tool_finished"]
    assert [e["name"] for e in started] == [e["name"] for e in finished] == ["execute_code", "terminal"]
    assert started[0]["arguments"] == {"code": script} and finished[0]["inner_calls"] == 1
    assert finished[1]["ok"] and "released" in finished[1]["summary"]
    # Streamed text arrives coalesced, in order, between its model call's start and end.
    streamed = "".join(e["text"] for e in events if e["event"] == "text")
    assert streamed == "Let me look.All done.\nThe file is fine."
    last_call = max(i for i, k in enumerate(kinds) if k == "model_call_started")
    assert kinds[last_call : last_call + 2] == ["model_call_started", "text"]
    assert kinds.index("tool_call_delta") < kinds.index("tool_started")
    finals = [e for e in events if e["event"] == "model_call_finished"]
    assert finals[-1]["usage"]["input_tokens"] > 0 and finals[-1]["tool_calls"] == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("stop", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_streamed_text_shows_during_a_stall_and_a_stop_signal_still_ends_with_the_result(
        workspace: Path, tmp_path: Path, llm: FakeLLMServer, stop: signal.Signals, exit_code: int) -> None:
    llm.script(Turn(text="First words, then a very long pause before the rest.", stall=60))
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen(
        [*HERALD, "run", "talk", "--json", "--base-url", llm.openai_base_url, "--model", "m"],
        cwd=workspace,
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    lines = _lines(proc)
    started = time.monotonic()
    first = json.loads(lines.get(timeout=60) or "null")
    assert first["event"] == "model_call_started"
    text = json.loads(lines.get(timeout=60) or "null")  # held text is flushed by its timer, mid-stall
    assert text["event"] == "text" and text["text"] and "First words, then".startswith(text["text"])
    proc.send_signal(stop)
    rest = []
    while (line := lines.get(timeout=60)) is not None:
        rest.append(json.loads(line))
    assert proc.wait(timeout=60) == exit_code
    assert time.monotonic() - started < 40  # the stall was 60 s
    assert rest[-1]["event"] == "result" and rest[-1]["status"] == "interrupted"
    assert any(e["event"] == "notice" and e["kind"] == "interrupt" for e in rest)
