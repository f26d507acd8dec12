"""Session transcripts: what is recorded, resuming (history, todo list, system prompt), listing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from herald import Agent, Settings
from herald.agent.events import AgentEvent, InnerToolCall
from herald.agent.sessions import SessionNotFound, find_session, list_sessions, read_session
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import MakeAgent


def test_transcript_records_everything(make_agent: MakeAgent, llm: FakeLLMServer, settings: Settings) -> None:
    script = (
        "from hermes_tools import terminal, read_file\n"
        "terminal('echo hi > hi.txt')\nprint(read_file('hi.txt')['content'])"
    )
    llm.script(calls(call("execute_code", code=script)), calls(call("read_file", path="hi.txt")), reply("done"))
    agent = make_agent()
    result = agent.run("say hi")
    path = settings.sessions_dir / f"{result.session_id}.jsonl"
    assert path == agent.session.path and path.exists()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [r["type"] for r in records]
    assert kinds[0] == "session" and kinds[1] == "run_start" and kinds[-1] == "run_end"
    assert kinds.count("model_call") == 3 and kinds.count("message") == 6
    inner = [r for r in records if r["type"] == "sandbox_tool_call"]
    assert [r["tool"] for r in inner] == ["terminal", "read_file"] and all("duration_ms" in r for r in inner)
    direct = [r for r in records if r["type"] == "tool_call"]
    assert [r["tool"] for r in direct] == ["execute_code", "read_file"]
    assert direct[0]["inner_calls"] == 2 and direct[0]["status"] == "success"
    usage = [r["usage"] for r in records if r["type"] == "model_call"]
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage)
    end = records[-1]
    assert end["status"] == "completed" and end["turns"] == 3 and end["final"] == "done"
    assert end["usage"]["input_tokens"] == sum(u["input_tokens"] for u in usage) == result.usage.input_tokens


def test_resume_continues_the_conversation(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    llm.script(
        calls(call("todo", todos=[{"id": "a", "content": "write the file", "status": "completed"},
                                  {"id": "b", "content": "review it", "status": "pending"}])),
        calls(call("write_file", path="out.txt", content="v1\n")),
        reply("wrote v1; review is pending"),
    )
    first = make_agent()
    result = first.run("write out.txt")
    first.close()

    llm.script(calls(call("todo")), reply("reviewed"))
    second = make_agent(session=result.session_id)
    resumed = second.run("now review it")
    assert resumed.session_id == result.session_id and resumed.status == "completed"
    request = llm.requests[3]
    texts = json.dumps(request.messages)
    assert "write out.txt" in texts and "wrote v1; review is pending" in texts and "now review it" in texts
    assert request.system == llm.requests[0].system  # the session's prompt, unchanged
    todo = json.loads(llm.requests[4].tool_results()[0][1])
    assert todo["todos"][1] == {"id": "b", "content": "review it", "status": "pending"}  # survived the resume
    assert len(resumed.messages) == len(result.messages) + 4
    state = read_session(second.session.path)
    assert state.runs == 2 and state.status == "completed" and state.turns == 5


def test_resume_after_an_interrupt_continues_without_a_new_task(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(
        calls(
            call(
                "execute_code", code="import time\nfrom hermes_tools import terminal\nterminal('true')\ntime.sleep(60)"
            )
        )
    )
    holder: dict[str, Agent] = {}

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, InnerToolCall):
            threading.Thread(target=holder["agent"].interrupt).start()

    agent = make_agent(on_event=on_event)
    holder["agent"] = agent
    assert agent.run("slow").status == "interrupted"
    agent.close()

    llm.script(reply("picked up where it stopped"))
    again = make_agent(session="last")
    result = again.run()
    assert result.final_text == "picked up where it stopped"
    assert '"status": "interrupted"' in llm.requests[-1].tool_results()[0][1]
    with pytest.raises(ValueError, match="nothing to continue"):
        again.run()


def test_sessions_are_listed_and_found_by_prefix(make_agent: MakeAgent, llm: FakeLLMServer, settings: Settings) -> None:
    llm.script(reply("one"), reply("two"))
    a = make_agent().run("first task")
    b = make_agent().run("second task")
    infos = list_sessions(settings.sessions_dir)
    assert {i.id for i in infos} == {a.session_id, b.session_id}
    info = next(i for i in infos if i.id == a.session_id)
    assert (
        info.task == "first task"
        and info.status == "completed"
        and info.turns == 1
        and info.model.startswith("scripted-")
    )
    assert find_session(settings.sessions_dir, a.session_id).stem == a.session_id
    assert find_session(settings.sessions_dir, a.session_id[:-1]).stem == a.session_id  # a unique prefix
    with pytest.raises(SessionNotFound, match="ambiguous"):
        find_session(settings.sessions_dir, a.session_id[:4])  # both start with the year
    with pytest.raises(SessionNotFound, match="herald sessions"):
        find_session(settings.sessions_dir, "no-such-session")


def test_a_failed_start_leaves_no_session_behind(make_agent: MakeAgent, settings: Settings) -> None:
    with pytest.raises(ValueError, match="unknown tool"):
        make_agent(tools=["read_file", "no_such_tool"])
    assert not list(settings.sessions_dir.glob("*.jsonl"))
    assert list_sessions(settings.sessions_dir) == []
