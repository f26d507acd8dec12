"""The one settings object: file < environment < overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald.config import ConfigError, Settings, load_settings


def test_defaults_match_the_documented_limits() -> None:
    s = Settings()
    assert (s.sandbox.timeout, s.sandbox.max_tool_calls, s.sandbox.kill_grace) == (300.0, 500, 5.0)
    assert (s.sandbox.max_stdout_bytes, s.sandbox.max_stderr_bytes) == (50_000, 10_000)


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        'data_dir = "/srv/h"\ntools = ["read_file"]\n'
        '[sandbox]\ntimeout = 10\nmax_tool_calls = 7\n[files]\nsearch = "python"\n'
    )
    env = {
        "HERALD_SANDBOX_TIMEOUT": "20",
        "HERALD_SANDBOX_WARM": "false",
        "HERALD_SANDBOX_ENV_PASSTHROUGH": "A_TOKEN, B",
    }
    s = load_settings(config, env=env, overrides={"sandbox.max_tool_calls": 9, "sandbox.kill_grace": None})
    assert s.data_dir == Path("/srv/h")
    assert s.tools == ["read_file"]
    assert s.sandbox.timeout == 20.0  # environment beats the file
    assert s.sandbox.max_tool_calls == 9  # overrides beat both; None means "not given"
    assert s.sandbox.kill_grace == 5.0
    assert s.sandbox.warm is False
    assert s.sandbox.env_passthrough == ["A_TOKEN", "B"]
    assert s.files.search == "python"


def test_config_path_from_environment(tmp_path: Path) -> None:
    config = tmp_path / "x.toml"
    config.write_text("[terminal]\ntimeout = 3\n")
    assert load_settings(env={"HERALD_CONFIG": str(config)}).terminal.timeout == 3.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sandbox]\ntimeuot = 5\n", "unknown setting 'sandbox.timeuot'"),
        ("[sandbox]\ntimeout = 'soon'\n", "setting 'sandbox.timeout' must be a number"),
        ("[sandbox]\nwarm = 3\n", "setting 'sandbox.warm' must be true or false"),
        ("[sandbox]\nmax_tool_calls = -1\n", "must be zero or more"),
        ("tools = 5\n", "must be a list of tool names"),
        ("[sandbox\n", "not valid TOML"),
    ],
)
def test_bad_settings_name_the_key_and_the_file(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(config, env={})
    assert message in str(info.value)
    assert str(config) in str(info.value)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="environment variable HERALD_SANDBOX_TIMEOUT"):
        load_settings(env={"HERALD_CONFIG": "/nonexistent.toml", "HERALD_SANDBOX_TIMEOUT": "x"})


def test_explicit_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml", env={})
