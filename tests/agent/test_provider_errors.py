"""What the retry policy reads from a failed call besides the status: a refused connection (fail
fast, with the URL), `Retry-After` as an HTTP date, `x-should-retry`; and the output-token limit
each protocol is sent."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Agent, Settings
from herald.cli import main
from tests.fakes.llm_server import FakeLLMServer, Protocol, error, http_date, reply

from .conftest import MakeAgent


def _records(path: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == kind]


@pytest.fixture
def refusing_url(protocol: Protocol) -> Iterator[str]:
    """A base URL where the connection is refused: the port is bound but nobody listens on it
    (so no other program can take it meanwhile)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}" + ("/v1" if protocol == "openai" else "")
    sock.close()


def test_connection_refused_fails_fast_and_names_the_url(make_agent: MakeAgent, refusing_url: str) -> None:
    # With this backoff any ordinary retry would wait 120 s or more.
    agent = make_agent(
        base_url=refusing_url,
        overrides={"agent.retry_base_delay": 120.0, "agent.retry_max_delay": 240.0, "agent.max_retries": 5},
    )
    started = time.monotonic()
    result = agent.run("hello?")
    assert time.monotonic() - started < 60  # generous (a loaded machine), and well short of 120 s
    assert result.status == "error"
    assert refusing_url in result.final_text and "connection refused" in result.final_text
    assert "ollama serve" in result.final_text and "--base-url" in result.final_text
    actions = [(r["reason"], r["action"]) for r in _records(agent.session.path, "model_error")]
    assert actions == [("connection_refused", "retry"), ("connection_refused", "give_up")]  # one quick retry


def test_connection_refused_switches_to_the_fallback(make_agent: MakeAgent, llm: FakeLLMServer, refusing_url: str,
                                                     protocol: Protocol) -> None:
    llm.script(reply("the fallback answered"))
    agent = make_agent(base_url=refusing_url, fallback=[f"{protocol}:backup@{llm.base_url(protocol)}"],
                       overrides={"agent.retry_base_delay": 30.0, "agent.retry_max_delay": 60.0})
    result = agent.run("hello?")
    assert result.status == "completed" and result.final_text == "the fallback answered"
    assert [r["action"] for r in _records(agent.session.path, "model_error")] == ["retry", "fallback"]


def test_cli_run_against_a_server_that_is_not_running(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    monkeypatch.setenv("HERALD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HERALD_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.chdir(workspace)
    try:
        code = main(["run", "hi", "--provider", "ollama", "--model", "qwen3", "--base-url", url])
    finally:
        sock.close()
    out = capsys.readouterr().out
    assert code == 1
    assert url in out and "ollama serve" in out


def test_retry_after_as_an_http_date_is_honoured(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(error(429, "slow down", headers={"retry-after": http_date(1)}), reply("ok"))
    agent = make_agent(overrides={"agent.retry_base_delay": 30.0, "agent.retry_max_delay": 60.0})
    assert agent.run("hi").final_text == "ok"
    [retry] = _records(agent.session.path, "model_error")
    assert retry["action"] == "retry" and 0 <= retry["delay"] <= 2  # not the 30 s backoff


def test_x_should_retry_false_is_not_retried(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(error(500, "this will fail the same way again", headers={"x-should-retry": "false"}), reply("unused"))
    agent = make_agent()
    result = agent.run("hi")
    assert result.status == "error" and len(llm.requests) == 1
    [give_up] = _records(agent.session.path, "model_error")
    assert give_up["reason"] == "server_error" and give_up["action"] == "give_up"


def test_x_should_retry_true_retries_what_would_not_be(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(
        error(400, "transient validation hiccup", headers={"x-should-retry": "true"}), reply("second time lucky")
    )
    agent = make_agent()
    result = agent.run("hi")
    assert result.final_text == "second time lucky" and len(llm.requests) == 2
    [retry] = _records(agent.session.path, "model_error")
    assert retry["reason"] == "format_error" and retry["action"] == "retry"


def test_output_token_limit_is_sent(make_agent: MakeAgent, llm: FakeLLMServer, protocol: Protocol) -> None:
    llm.script(reply("short"))
    make_agent(overrides={"agent.max_tokens": 1234}).run("hi")
    body = llm.requests[0].body
    # OpenAI's own API: max_completion_tokens; Anthropic: max_tokens.
    key = "max_completion_tokens" if protocol == "openai" else "max_tokens"
    assert body[key] == 1234


@pytest.mark.parametrize("provider", ["vllm", "ollama", "openrouter", "custom"])
def test_compatible_servers_get_max_tokens(
    llm: FakeLLMServer, settings: Settings, workspace: Path, provider: str
) -> None:
    llm.script(reply("short"))
    with Agent(settings=settings.with_overrides({"agent.max_tokens": 777}), provider=provider, model="m",
               base_url=llm.openai_base_url, api_key="k", cwd=str(workspace), env={}) as agent:
        agent.run("hi")
    body = llm.requests[0].body
    assert body["max_tokens"] == 777 and "max_completion_tokens" not in body
