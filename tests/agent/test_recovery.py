"""Provider failures: retries with backoff, fallback to another provider, compression on context
overflow; malformed tool-call JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from herald.agent.events import Notice
from herald.agent.sessions import read_session
from tests.fakes.llm_server import FakeLLMServer, Protocol, call, calls, error, reply

from .conftest import MakeAgent


def _records(agent_path: Path, kind: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in agent_path.read_text().splitlines() if json.loads(line)["type"] == kind]


def test_rate_limit_then_success(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(error(429, "Rate limit reached for requests; try again in 20ms"), reply("made it"))
    agent = make_agent()
    result = agent.run("hello")
    assert result.status == "completed" and result.final_text == "made it"
    assert len(llm.requests) == 2 and llm.requests[0].raw == llm.requests[1].raw  # the same request again
    [retry] = _records(agent.session.path, "model_error")
    assert retry["reason"] == "rate_limit" and retry["action"] == "retry" and retry["status"] == 429
    assert any(isinstance(e, Notice) and e.kind == "retry" for e in agent.events)


def test_retry_after_header_is_honoured(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(error(429, "slow down", headers={"retry-after": "0.02"}), reply("ok"))
    agent = make_agent(overrides={"agent.retry_base_delay": 30.0, "agent.retry_max_delay": 60.0})
    assert agent.run("hi").final_text == "ok"  # 30 s of backoff would time the test out
    [retry] = _records(agent.session.path, "model_error")
    assert retry["delay"] == 0.02


def test_server_errors_are_retried(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(error(500, "internal error"), error(502, "bad gateway"), error(529, "Overloaded"), reply("fine now"))
    agent = make_agent()
    result = agent.run("hello")
    assert result.final_text == "fine now" and len(llm.requests) == 4
    reasons = [(r["reason"], r["action"]) for r in _records(agent.session.path, "model_error")]
    assert reasons == [("server_error", "retry"), ("server_error", "retry"), ("overloaded", "retry")]


def test_retries_run_out_then_the_run_ends_with_an_error_text(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(*[error(500, "down") for _ in range(3)])
    result = make_agent(overrides={"agent.max_retries": 2}).run("hello")
    assert result.status == "error" and len(llm.requests) == 3
    assert result.final_text.startswith("Stopped: the model call failed: server_error (HTTP 500")


def test_auth_error_falls_back_to_the_next_provider(
    make_agent: MakeAgent, llm: FakeLLMServer, protocol: Protocol
) -> None:
    other: Protocol = "anthropic" if protocol == "openai" else "openai"
    fallback = f"{other}:backup-model@{llm.base_url(other)}"
    llm.script(error(401, "Incorrect API key provided"), calls(call("terminal", command="echo on backup")),
               reply("answered by the backup"))
    agent = make_agent(fallback=[fallback])
    result = agent.run("who answers?")
    assert result.status == "completed", result.error
    assert result.final_text == "answered by the backup"
    assert [r.protocol for r in llm.requests] == [protocol, other, other]
    assert llm.requests[1].body["model"] == "backup-model"
    assert llm.requests[1].last_user_text() == "who answers?"  # the conversation carried over
    [switch] = _records(agent.session.path, "model_error")
    assert switch["reason"] == "auth" and switch["action"] == "fallback" and switch["to"] == f"{other}:backup-model"
    assert len(llm.requests) == 3  # a 401 is not retried against the same provider


def test_auth_error_without_fallback_says_what_to_check(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(error(401, "invalid x-api-key"))
    result = make_agent().run("hi")
    assert result.status == "error" and "auth (HTTP 401" in result.final_text and "API key" in result.final_text
    assert len(llm.requests) == 1


def test_context_overflow_compresses_then_succeeds(
    make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path, protocol: Protocol
) -> None:
    (workspace / "big1.txt").write_text(("alpha " * 10 + "\n") * 400)
    (workspace / "big2.txt").write_text(("beta " * 10 + "\n") * 400)
    overflow = ("This model's maximum context length is 8192 tokens. However, your messages resulted in 20000 tokens."
                if protocol == "openai" else "prompt is too long: 20000 tokens > 8192 maximum")
    llm.script(
        calls(call("read_file", path="big1.txt")),
        calls(call("read_file", path="big2.txt")),
        error(400, overflow),
        reply("summarised both files"),
    )
    agent = make_agent()
    result = agent.run("read both big files")
    assert result.status == "completed" and result.final_text == "summarised both files"
    rejected, retried = llm.requests[2], llm.requests[3]
    assert len(retried.raw) < len(rejected.raw) * 0.7
    assert "alpha alpha" in rejected.raw.decode() and "alpha alpha" not in retried.raw.decode()
    assert "beta beta" in retried.raw.decode()  # the latest turn is kept whole
    [compaction] = _records(agent.session.path, "compaction")
    assert compaction["after_tokens"] < compaction["before_tokens"]
    [failure] = _records(agent.session.path, "model_error")
    assert failure["reason"] == "context_overflow" and failure["action"] == "compress"
    # The compacted history is what a resume sees.
    assert "alpha alpha" not in json.dumps(read_session(agent.session.path).messages)


def test_payload_too_large_compresses_too(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    (workspace / "big.txt").write_text(("gamma " * 10 + "\n") * 400)
    llm.script(calls(call("read_file", path="big.txt")), calls(call("terminal", command="true")),
               error(413, "request entity too large"), reply("ok"))
    result = make_agent().run("go")
    assert result.status == "completed" and len(llm.requests[3].raw) < len(llm.requests[2].raw)


def test_preflight_compression_past_the_threshold(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    (workspace / "big.txt").write_text(("delta " * 10 + "\n") * 400)
    llm.script(calls(call("read_file", path="big.txt")), calls(call("terminal", command="true")), reply("ok"))
    agent = make_agent(overrides={"agent.context_window": 20_000, "agent.compress_at": 0.5})
    assert agent.run("go").status == "completed"
    assert "delta delta" in llm.requests[1].raw.decode() and "delta delta" not in llm.requests[2].raw.decode()
    assert _records(agent.session.path, "compaction")[0]["reason"] == "the history passed the compression threshold"


def test_malformed_tool_call_json_is_repaired(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    llm.script(
        calls(call("write_file", _raw='{"path": "notes.txt", "content": "line one\nline two",')),
        calls(call("read_file", _raw="path=notes.txt please")),
        reply("wrote it"),
    )
    agent = make_agent()
    result = agent.run("write notes")
    assert result.status == "completed"
    assert (workspace / "notes.txt").read_text() == "line one\nline two"
    # The history holds valid JSON from then on, so the provider accepts the next request.
    second = llm.requests[1].messages
    assistant = next(m for m in second if m["role"] == "assistant")
    if "tool_calls" in assistant:
        args = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    else:
        args = next(b for b in assistant["content"] if b["type"] == "tool_use")["input"]
    assert args == {"path": "notes.txt", "content": "line one\nline two"}
    # Unrepairable: the call gets {} and a clear error; the session goes on.
    [(_, text)] = llm.requests[2].tool_results()
    assert "not valid JSON and could not be repaired" in text and "path=notes.txt please" in text
    assert result.tool_calls[1].arguments == {} and not result.tool_calls[1].ok
    assert [e.text for e in agent.events if isinstance(e, Notice) and e.kind == "repair"] == [
        "write_file: malformed argument JSON was repaired",
        "read_file: malformed argument JSON could not be repaired",
    ]
