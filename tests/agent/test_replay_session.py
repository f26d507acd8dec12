"""`herald replay SESSION [--run N]`: an agent session (the scripted LLM server, the real CLI)
with `agent.record_runs` on keeps each execute_code run's script and calls; the replay runs it
again from that recording, prints its output and says whether it is what the session got."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli._herald import run
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

FIRST = """\
from hermes_tools import read_file, terminal, write_file
print(read_file("notes.txt")["content"])
write_file("out.txt", "written by the session\\n")
print(terminal("cat out.txt; echo $((2 + 3))")["output"])
"""
SECOND = """\
import time
from hermes_tools import read_file
print(read_file("out.txt")["content"], time.time())
"""


def _session(llm: FakeLLMServer, workspace: Path, home: Path, *codes: str, record: bool = True) -> str:
    llm.script(*(calls(call("execute_code", code=code)) for code in codes), reply("done"))
    flags = ["-c", "agent.record_runs=true"] if record else []
    done = run(["run", "do it", "--json", "--provider", "openai", "--model", "m", "--base-url", llm.openai_base_url,
                *flags], cwd=workspace, home=home, OPENAI_API_KEY="k")
    assert done.returncode == 0, done.stderr
    session: str = json.loads(done.stdout.splitlines()[-1])["session_id"]
    return session


def test_a_sessions_run_replays_with_the_output_the_session_got(llm: FakeLLMServer, workspace: Path,
                                                               home: Path) -> None:
    (workspace / "notes.txt").write_text("a note\n")
    session = _session(llm, workspace, home, FIRST)
    transcript = [json.loads(line) for line in (home / "data" / "sessions" / f"{session}.jsonl").read_text()
                  .splitlines()]
    [pointer] = [r for r in transcript if r["type"] == "recording"]
    assert pointer["number"] == 1 and Path(pointer["path"]).is_file()
    header = json.loads(Path(pointer["path"]).read_text().splitlines()[0])
    assert header["script"] == FIRST and header["session"] == session

    (workspace / "notes.txt").write_text("changed since\n")  # a replay reads nothing of the workspace
    (workspace / "out.txt").unlink()
    done = run(["replay", "last"], cwd=workspace, home=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "     1|a note\nwritten by the session\n5\n"
    assert f"replay of run 1 of session {session}: the output, status and exit code are what the session got" \
        in done.stderr
    assert not (workspace / "out.txt").exists()


def test_a_run_whose_script_prints_the_time_differs_and_says_where(llm: FakeLLMServer, workspace: Path,
                                                                   home: Path) -> None:
    (workspace / "notes.txt").write_text("a note\n")
    session = _session(llm, workspace, home, FIRST, SECOND)
    first = run(["replay", session[:12], "--run", "1", "--json"], cwd=workspace, home=home)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["matches"] is True
    second = run(["replay", session, "--run", "2"], cwd=workspace, home=home)
    assert second.returncode == 1
    assert "output differ from what the session got" in second.stderr  # time is the script's own
    assert "the session's output" in second.stderr and "the replay's output" in second.stderr
    missing = run(["replay", session, "--run", "3"], cwd=workspace, home=home)
    assert missing.returncode == 2 and "has no recorded run 3: it has runs 1 to 2" in missing.stderr


def test_a_session_that_did_not_record_says_how_to_make_one_that_does(llm: FakeLLMServer, workspace: Path,
                                                                      home: Path) -> None:
    (workspace / "notes.txt").write_text("a note\n")
    session = _session(llm, workspace, home, FIRST, record=False)
    assert not (home / "data" / "sessions" / f"{session}.runs").exists()
    done = run(["replay", session], cwd=workspace, home=home)
    assert done.returncode == 2 and "has no recorded runs" in done.stderr and "agent.record_runs" in done.stderr
    unknown = run(["replay", "nope"], cwd=workspace, home=home)
    assert unknown.returncode == 2 and "no such session 'nope'" in unknown.stderr
