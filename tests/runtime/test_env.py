"""The child's environment: secrets scrubbed, the basics kept, explicit passthrough honoured."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ._helpers import run_ok

SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai",
    "GITHUB_TOKEN": "ghp_test",
    "DB_PASSWORD": "hunter2",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "LC_SECRET_TOKEN": "looks-safe-prefix-but-secret",
}

DUMP_ENV = "import os, json\nprint(json.dumps(dict(os.environ)))"


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", "/home/herald-test")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("MY_PROJECT_SETTING", "passed-through")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")


def test_secrets_are_scrubbed(secrets_env: None, make_runtime: Any) -> None:
    runtime = make_runtime()
    result = run_ok(runtime, DUMP_ENV)
    env = json.loads(result.output)
    for name in SECRETS:
        assert name not in env, name
    assert not any(value in json.dumps(env) for value in SECRETS.values())
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    # Isolated, the user's home is not mounted: HOME is the sandbox's private /tmp.
    assert env["HOME"] == ("/tmp" if result.isolation.startswith("bwrap") else "/home/herald-test")
    assert env["LANG"] == "C.UTF-8"
    assert env["HERALD_SANDBOX"] == "1"
    assert "MY_PROJECT_SETTING" not in env
    assert "PYTHONPATH" not in env


def test_secrets_are_scrubbed_in_terminal_too(secrets_env: None, make_runtime: Any) -> None:
    runtime = make_runtime()
    result = run_ok(
        runtime,
        "from hermes_tools import terminal\nprint(terminal('env')['output'])",
    )
    for name, value in SECRETS.items():
        assert name not in result.output
        assert value not in result.output
    assert "HOME=/home/herald-test" in result.output


def test_passthrough_keeps_named_variables(secrets_env: None, make_runtime: Any) -> None:
    runtime = make_runtime(
        overrides={"sandbox.env_passthrough": ["MY_PROJECT_SETTING", "GITHUB_TOKEN"]}
    )
    env = json.loads(run_ok(runtime, DUMP_ENV).output)
    assert env["MY_PROJECT_SETTING"] == "passed-through"
    assert env["GITHUB_TOKEN"] == "ghp_test"  # passing a secret is the user's explicit choice
    assert "OPENAI_API_KEY" not in env
    assert "DB_PASSWORD" not in env


def test_environment_is_read_when_the_runtime_is_made(
    monkeypatch: pytest.MonkeyPatch, make_runtime: Any
) -> None:
    runtime = make_runtime(overrides={"sandbox.env_passthrough": ["LATE_SETTING"]})
    monkeypatch.setenv("LATE_SETTING", "set after the runtime")
    assert "LATE_SETTING" not in json.loads(run_ok(runtime, DUMP_ENV).output)


def test_child_runs_isolated(make_runtime: Any) -> None:
    runtime = make_runtime()
    result = run_ok(
        runtime,
        """
        import sys
        print(sys.flags.isolated, sys.flags.dont_write_bytecode)
        print([name for name in sys.modules if name == "herald" or name.startswith("herald.")])
        """,
    )
    assert result.output == "1 1\n[]\n"
