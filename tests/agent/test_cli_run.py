"""`herald run` and `herald sessions` as a person runs them: a real subprocess talking to the fake
LLM server through the real SDKs; keys from the environment or the config file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

HERALD = [sys.executable, "-m", "herald"]
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS and not k.startswith("HERALD_")}
    env.update(HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "config.toml"), **extra)
    return env


def herald(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(HERALD + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_no_provider_is_a_clear_usage_error(workspace: Path, home: Path) -> None:
    proc = herald(["run", "do something"], workspace, _env(home))
    assert proc.returncode == 2
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "--provider", "[agent]"):
        assert name in proc.stderr
    assert proc.stdout == ""


def test_missing_key_for_a_named_provider(workspace: Path, home: Path) -> None:
    proc = herald(["run", "x", "--provider", "anthropic"], workspace, _env(home))
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr


def test_run_with_openai_key_from_the_environment(workspace: Path, home: Path, llm: FakeLLMServer) -> None:
    (workspace / "data.txt").write_text("42\n")
    llm.script(
        calls(call("execute_code", code="from hermes_tools import read_file\nprint(read_file('data.txt')['content'])")),
        reply("The file holds 42."),
    )
    proc = herald(["run", "what is in data.txt?", "--provider", "openai", "--model", "gpt-test",
                   "--base-url", llm.openai_base_url], workspace, _env(home, OPENAI_API_KEY="sk-from-env"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "The file holds 42."  # stdout: only the answer
    assert "execute_code" in proc.stderr and "1 inner call" in proc.stderr  # the live view, on stderr
    assert "tokens in" in proc.stderr and "session " in proc.stderr
    assert llm.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert llm.requests[0].body["model"] == "gpt-test"


def test_run_anthropic_with_key_from_the_config_file(workspace: Path, home: Path, llm: FakeLLMServer) -> None:
    (home / "config.toml").write_text(
        f'[agent]\nprovider = "anthropic"\nmodel = "claude-test"\nbase_url = "{llm.anthropic_base_url}"\n'
        'api_key = "sk-ant-from-config"\n'
    )
    llm.script(reply("hello from claude"))
    proc = herald(["run", "hi", "--json"], workspace, _env(home))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])  # JSON lines: events, then the result
    assert result["status"] == "completed" and result["final_text"] == "hello from claude" and result["turns"] == 1
    assert result["usage"]["input_tokens"] > 0
    headers = llm.requests[0].headers  # this SDK version sends the key as a bearer token, older ones as x-api-key
    assert llm.requests[0].protocol == "anthropic"
    assert "sk-ant-from-config" in (
        headers.get("x-api-key", ""),
        headers.get("authorization", "").removeprefix("Bearer "),
    )

    listing = herald(["sessions", "--json"], workspace, _env(home))
    [session] = json.loads(listing.stdout)
    assert session["id"] == result["session_id"] and session["task"] == "hi" and session["model"] == "claude-test"
    lines = herald(["sessions"], workspace, _env(home)).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [result["session_id"]]  # piped: plain lines
    assert lines[0].split("\t")[2:] == ["anthropic:claude-test", "1", "completed", "hi"]

    llm.script(reply("and again"))
    resumed = herald(["run", "--resume", "last", "follow-up", "--json"], workspace, _env(home))
    assert json.loads(resumed.stdout.splitlines()[-1])["session_id"] == result["session_id"]
    assert "follow-up" in json.dumps(llm.requests[-1].messages) and "hello from claude" in json.dumps(
        llm.requests[-1].messages
    )
    finished = herald(["run", "--resume", result["session_id"]], workspace, _env(home))
    assert finished.returncode == 2 and "pass a task" in finished.stderr


def test_unknown_session_and_bad_backend(workspace: Path, home: Path, llm: FakeLLMServer) -> None:
    env = _env(home, OPENAI_API_KEY="k")
    proc = herald(["run", "--resume", "nope", "x", "--base-url", llm.openai_base_url, "--model", "m"], workspace, env)
    assert proc.returncode == 2 and "no such session 'nope'" in proc.stderr and "herald sessions" in proc.stderr
    proc = herald(
        ["run", "x", "--base-url", llm.openai_base_url, "--model", "m", "--backend", "floppy"], workspace, env
    )
    assert proc.returncode == 2 and "unknown backend" in proc.stderr


def test_budget_exhaustion_exit_code(workspace: Path, home: Path, llm: FakeLLMServer) -> None:
    llm.script(calls(call("terminal", command="true")), reply("summary after one turn"))
    proc = herald(["run", "x", "--base-url", llm.openai_base_url, "--model", "m", "--max-turns", "1"],
                  workspace, _env(home))
    assert proc.returncode == 3 and proc.stdout.strip() == "summary after one turn"


def test_ctrl_c_interrupts_the_running_script(workspace: Path, home: Path, llm: FakeLLMServer) -> None:
    script = "import time\nfrom hermes_tools import terminal\nterminal('touch started')\ntime.sleep(60)"
    llm.script(calls(call("execute_code", code=script)))
    proc = subprocess.Popen(
        [*HERALD, "run", "slow", "--base-url", llm.openai_base_url, "--model", "m"], cwd=workspace,
        env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (workspace / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Interrupted" in out and "interrupted" in err
