"""Fast unit tests: JSON repair, error classification (real SDK exceptions), API mode and
provider resolution, budget, guardrails, compression, todo."""

from __future__ import annotations

import email.utils
import itertools
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald.agent.budget import IterationBudget
from herald.agent.compression import compress, estimate_tokens, prune_tool_results
from herald.agent.guardrails import LoopGuard
from herald.agent.jsonrepair import repair_arguments
from herald.agent.providers.base import ApiMode, Message, ModelRequest, ProviderConfig
from herald.agent.providers.errors import (
    FailoverReason,
    classify,
    jittered_backoff,
    retry_after_seconds,
)
from herald.agent.providers.resolve import (
    ProviderSetupError,
    make_provider,
    parse_fallback,
    resolve_api_mode,
    resolve_fallbacks,
    resolve_primary,
)
from herald.agent.todo import TodoList
from herald.config import AgentSettings, ConfigError, load_settings
from herald.tools.registry import ToolError
from tests.fakes.llm_server import FakeLLMServer, Protocol, error

# -- JSON repair ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('{"a": 1,}', {"a": 1}),
        ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"path": "x.py", "content": "unterminated', {"path": "x.py", "content": "unterminated"}),
        ('{"code": "line1\nline2\tTab"}', {"code": "line1\nline2\tTab"}),  # raw control characters
        ('{"code": "a\x01b"}', {"code": "a\x01b"}),
        ('{"a": 1}}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('{"a": {"b": 2', {"a": {"b": 2}}),
        ('{"a":', {"a": None}),
        ("", {}),
        ("   ", {}),
    ],
)
def test_json_repair(raw: str, expected: dict[str, object]) -> None:
    result = repair_arguments(raw)
    assert result.error is None and result.arguments == expected
    assert json.loads(result.canonical) == expected


@pytest.mark.parametrize("raw", ["not json at all", "path=a.py", "[1, 2]", '"just a string"', "{{{{"])
def test_json_repair_gives_up_with_empty_arguments_and_a_clear_error(raw: str) -> None:
    result = repair_arguments(raw)
    assert result.arguments == {} and result.repaired
    assert result.error and ("JSON object" in result.error)


# -- error classification --------------------------------------------------------------------------

CASES = [
    (401, "Incorrect API key provided", FailoverReason.auth),
    (403, "permission denied", FailoverReason.auth),
    (402, "Your credit balance is too low", FailoverReason.billing),
    (402, "Usage limit reached, try again in 5 minutes", FailoverReason.rate_limit),
    (429, "Rate limit reached", FailoverReason.rate_limit),
    (
        429,
        "You exceeded your current quota, please check your plan and billing details (insufficient_quota)",
        FailoverReason.billing,
    ),
    (529, "Overloaded", FailoverReason.overloaded),
    (503, "Service unavailable", FailoverReason.overloaded),
    (500, "Internal server error", FailoverReason.server_error),
    (502, "Bad gateway", FailoverReason.server_error),
    (504, "Gateway timeout", FailoverReason.timeout),
    (400, "This model's maximum context length is 8192 tokens", FailoverReason.context_overflow),
    (400, "prompt is too long: 210000 tokens > 200000 maximum", FailoverReason.context_overflow),
    (413, "Request too large", FailoverReason.payload_too_large),
    (404, "The model `gpt-9` does not exist", FailoverReason.model_not_found),
    (400, "messages.1: unexpected role", FailoverReason.format_error),
    (418, "I'm a teapot", FailoverReason.unknown),
]


@pytest.fixture(scope="module")
def error_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    yield server
    server.close()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize(("status", "message", "reason"), CASES)
def test_classification_of_real_sdk_errors(
    error_server: FakeLLMServer, protocol: Protocol, status: int, message: str, reason: FailoverReason
) -> None:
    mode: ApiMode = "chat_completions" if protocol == "openai" else "anthropic_messages"
    provider = make_provider(ProviderConfig("custom", "m", mode, base_url=error_server.base_url(protocol), api_key="k"))
    error_server.script(error(status, message))
    with pytest.raises(Exception) as caught:
        provider.complete(ModelRequest("s", [{"role": "user", "content": "hi"}], []), lambda e: None, threading.Event())
    provider.close()
    classified = classify(caught.value)
    assert classified.reason == reason and classified.status_code == status
    assert classified.should_compress == (reason in (FailoverReason.context_overflow, FailoverReason.payload_too_large))
    if reason in (FailoverReason.auth, FailoverReason.billing, FailoverReason.model_not_found):
        assert classified.should_fallback and not classified.retryable
    if reason in (FailoverReason.rate_limit, FailoverReason.server_error, FailoverReason.overloaded):
        assert classified.retryable and classified.should_fallback
    if reason == FailoverReason.format_error:
        assert not (classified.retryable or classified.should_fallback or classified.should_compress)


def test_transport_errors_are_timeouts() -> None:
    """A server that accepts the connection and hangs up without answering: retried as a timeout."""
    listener = socket.create_server(("127.0.0.1", 0))

    def hang_up() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    port = listener.getsockname()[1]
    provider = make_provider(
        ProviderConfig("custom", "m", "chat_completions", base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    )
    try:
        with pytest.raises(Exception) as caught:
            provider.complete(
                ModelRequest("s", [{"role": "user", "content": "hi"}], []), lambda e: None, threading.Event()
            )
    finally:
        provider.close()
        listener.close()
    classified = classify(caught.value)
    assert classified.reason == FailoverReason.timeout and classified.retryable and classified.max_retries is None


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("2.5", now) == 2.5
    assert retry_after_seconds(email.utils.formatdate(now + 7, usegmt=True), now) == 7.0
    assert retry_after_seconds(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0  # past: at once
    assert retry_after_seconds("soon", now) is None


def test_backoff_grows_is_capped_and_jittered() -> None:
    delays = [jittered_backoff(n, base=1.0, cap=8.0) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        floor = min(2.0 ** (n - 1), 8.0)
        assert floor <= delay <= floor * 1.5
    assert len({jittered_backoff(3, base=1.0, cap=8.0) for _ in range(20)}) > 1


# -- provider resolution ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_mode", "provider", "base_url", "expected"),
    [
        ("chat_completions", "anthropic", None, "chat_completions"),  # explicit wins
        (None, "anthropic", None, "anthropic_messages"),
        (None, "custom", "https://api.anthropic.com", "anthropic_messages"),
        (None, "minimax", "https://api.minimax.io/anthropic", "anthropic_messages"),
        (None, "openrouter", "https://openrouter.ai/api/v1", "chat_completions"),
        (None, "ollama", "http://localhost:11434/v1", "chat_completions"),
    ],
)
def test_api_mode_resolution(api_mode: str | None, provider: str, base_url: str | None, expected: str) -> None:
    assert resolve_api_mode(api_mode, provider, base_url) == expected


def test_api_mode_must_be_known() -> None:
    with pytest.raises(ProviderSetupError, match="chat_completions"):
        resolve_api_mode("responses", None, None)


def test_provider_detected_from_keys_and_defaults() -> None:
    config = resolve_primary(AgentSettings(), {"OPENAI_API_KEY": "sk-1"})
    assert (config.provider, config.api_key, config.api_mode) == ("openai", "sk-1", "chat_completions")
    config = resolve_primary(AgentSettings(), {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b"})
    assert config.provider == "anthropic" and config.api_mode == "anthropic_messages" and config.model
    config = resolve_primary(AgentSettings(provider="ollama", model="qwen3:8b"), {})
    assert config.base_url == "http://localhost:11434/v1" and config.api_key is None
    config = resolve_primary(AgentSettings(base_url="http://127.0.0.1:1/v1", model="m"), {})
    assert config.provider == "custom"


@pytest.mark.parametrize(
    ("agent", "env", "needle"),
    [
        (AgentSettings(), {}, "ANTHROPIC_API_KEY"),
        (AgentSettings(provider="openai"), {}, "OPENAI_API_KEY"),
        (AgentSettings(provider="openrouter", model="x"), {}, "OPENROUTER_API_KEY"),
        (AgentSettings(provider="ollama"), {}, "--model"),
        (AgentSettings(provider="custom", model="m"), {}, "--base-url"),
        (AgentSettings(provider="acme", model="m"), {}, "unknown provider 'acme'"),
    ],
)
def test_provider_setup_errors_name_what_to_set(agent: AgentSettings, env: dict[str, str], needle: str) -> None:
    with pytest.raises(ProviderSetupError, match=needle.replace("[", r"\[")):
        resolve_primary(agent, env)


def test_fallback_chain_parsing() -> None:
    assert parse_fallback("anthropic:claude-haiku-4-5") == ("anthropic", "claude-haiku-4-5", None)
    assert parse_fallback("ollama:qwen3:8b@http://localhost:11434/v1") == ("ollama", "qwen3:8b", "http://localhost:11434/v1")
    with pytest.raises(ProviderSetupError, match="PROVIDER:MODEL"):
        parse_fallback("just-a-model")
    chain = resolve_fallbacks(
        AgentSettings(fallback=["anthropic:c@http://127.0.0.1:1", "openai:g"]), {"OPENAI_API_KEY": "k"}
    )
    assert [(c.provider, c.api_mode, c.api_key) for c in chain] == [
        ("anthropic", "anthropic_messages", None), ("openai", "chat_completions", "k")]


# -- budget ----------------------------------------------------------------------------------------


def test_budget_consume_refund_and_hard_cap() -> None:
    budget = IterationBudget(2)
    assert budget.consume() and budget.consume() and not budget.consume()
    budget.refund()
    assert budget.remaining == 1 and budget.consume()
    for _ in range(10):
        budget.refund()
        if not budget.consume():
            break
    assert budget.calls == budget.hard_cap == 6 and not budget.consume()


# -- guardrails ------------------------------------------------------------------------------------


def test_guard_warns_then_blocks_repeated_failures() -> None:
    guard = LoopGuard(warn_after=2, block_after=4)
    args = {"path": "x", "offset": 1}
    actions = []
    for _ in range(4):
        before = guard.before_call("read_file", {"offset": 1, "path": "x"})  # key order does not matter
        if not before.allows_execution:
            actions.append("block")
            break
        actions.append(guard.after_call("read_file", args, "Error", failed=True, read_only=True).action)
    assert actions == ["allow", "warn", "warn", "block"]
    assert guard.before_call("read_file", {"path": "y"}).action == "allow"  # other arguments
    guard.after_call("read_file", args, "fine now", failed=False, read_only=True)
    assert guard.before_call("read_file", args).action == "allow"  # a success resets the count


def test_guard_blocks_read_only_no_progress_until_something_changes() -> None:
    guard = LoopGuard(warn_after=2, block_after=4)
    args = {"path": "status"}
    results = [guard.after_call("read_file", args, "same", failed=False, read_only=True).action for _ in range(3)]
    assert results == ["allow", "warn", "warn"] and guard.before_call("read_file", args).action == "block"
    guard.after_call("write_file", {"path": "status"}, "ok", failed=False, read_only=False)
    assert guard.before_call("read_file", args).action == "allow"
    assert guard.after_call("terminal", {"command": "ls"}, "x", failed=False, read_only=False).action == "allow"


# -- compression -----------------------------------------------------------------------------------


def _history(turns: int, size: int) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": "the task"}]
    for i in range(turns):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}"})},
        }
        messages.append({"role": "assistant", "content": f"step {i}", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"content {i} " * size})
    return messages


def test_pruning_keeps_the_latest_turn_whole() -> None:
    messages = _history(3, 500)
    pruned = prune_tool_results(messages)
    assert pruned[2]["content"].startswith("[compacted: result of read_file")
    assert pruned[-1] == messages[-1] and pruned[0] == messages[0]


def test_compress_drops_the_middle_but_keeps_task_pairs_and_todo() -> None:
    messages = _history(12, 50)
    result = compress(messages, target_tokens=100, todo_text=lambda: "[x] 1. read files")
    assert result.effective and result.after_tokens < result.before_tokens
    head, *rest = result.messages
    assert head["role"] == "user" and head["content"].startswith("the task")
    assert "read_file" in head["content"] and "[x] 1. read files" in head["content"]
    assert [m["role"] for m in rest] == ["assistant", "tool"]  # the latest turn, call and result together
    ids = {c["id"] for m in rest for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in ids for m in rest if m["role"] == "tool")
    assert estimate_tokens(result.messages) == result.after_tokens


def test_compress_keeps_the_last_user_message() -> None:
    messages: list[Message] = [*_history(4, 200), {"role": "user", "content": "a follow-up question"}]
    result = compress(messages, target_tokens=10)
    assert result.messages[-1]["content"].endswith("a follow-up question")
    roles = [m["role"] for m in result.messages]
    assert all(not (a == b == "user") for a, b in itertools.pairwise(roles))


# -- todo ------------------------------------------------------------------------------------------


def test_todo_replace_merge_and_states() -> None:
    todo = TodoList()
    todo.write([{"id": "1", "content": "read", "status": "in_progress"}, {"id": "2", "content": "patch"}], merge=False)
    todo.write([{"id": "1", "status": "completed"}, {"id": "3", "content": "verify", "status": "pending"}], merge=True)
    assert [(i["id"], i["status"]) for i in todo.items] == [("1", "completed"), ("2", "pending"), ("3", "pending")]
    assert todo.view()["counts"] == {"pending": 2, "in_progress": 0, "completed": 1, "cancelled": 0}
    assert todo.render().splitlines()[0] == "[x] 1. read"
    with pytest.raises(ToolError, match="use one of pending, in_progress, completed, cancelled"):
        todo.write([{"id": "1", "status": "done"}], merge=True)
    with pytest.raises(ToolError, match="needs a 'content'"):
        todo.write([{"id": "9", "status": "pending"}], merge=True)
    todo.write([], merge=False)
    assert todo.items == []


# -- settings --------------------------------------------------------------------------------------


def test_agent_settings_from_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[agent]\nprovider = "openai"\nmodel = "gpt-x"\nmax_turns = 20\nfallback = ["anthropic:c"]\n')
    settings = load_settings(config, env={"HERALD_AGENT_MAX_TURNS": "7", "HERALD_AGENT_STREAM": "false"})
    agent = settings.agent
    assert (agent.provider, agent.model, agent.max_turns, agent.stream, agent.fallback) == (
        "openai",
        "gpt-x",
        7,
        False,
        ["anthropic:c"],
    )
    env = {"HERALD_AGENT_FALLBACK": "anthropic:c,ollama:q:8b@http://h:1/v1"}
    env["HERALD_CONFIG"] = str(tmp_path / "none.toml")
    assert load_settings(env=env).agent.fallback == ["anthropic:c", "ollama:q:8b@http://h:1/v1"]
    with pytest.raises(ConfigError, match=r"agent\.max_turns"):
        load_settings(config, env={"HERALD_AGENT_MAX_TURNS": "lots"})
    assert settings.sessions_dir == settings.data_dir / "sessions"
