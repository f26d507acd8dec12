"""The terminal tool over the local backend: what the model sends and what it gets back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald.backends.local import LocalBackend
from herald.runtime.toolset import default_registry
from herald.tools import ToolError
from herald.tools.arguments import bind_arguments
from herald.tools.stubgen import signatures

CallTool = Callable[..., Any]  # the `call` fixture of tests/tools/conftest.py


def test_plain_result_has_output_and_exit_code_only(call: CallTool) -> None:
    assert call("terminal", command="echo hello") == {"output": "hello", "exit_code": 0}
    assert call("terminal", command="echo oops >&2; exit_status=4; (exit $exit_status)") == {
        "output": "oops",
        "exit_code": 4,
    }


@pytest.mark.parametrize("command", ["", "   ", "\n\t"])
def test_empty_command_is_an_error(call: CallTool, command: str) -> None:
    with pytest.raises(ToolError, match="terminal: command is empty"):
        call("terminal", command=command)


@pytest.mark.parametrize("arg", ["background", "pty", "check_interval"])
def test_foreground_only_arguments_are_refused_in_scripts(arg: str) -> None:
    terminal = default_registry().get("terminal")
    assert terminal is not None
    with pytest.raises(ToolError) as info:
        bind_arguments(terminal, {"command": "sleep 1", arg: True}, in_script=True)
    message = str(info.value)
    assert f"'{arg}' is not supported inside execute_code" in message
    assert "foreground" in message


def test_timeout_result_has_a_note(call: CallTool) -> None:
    result = call("terminal", command="echo started; sleep 10", timeout=0.3)
    assert result["exit_code"] == 124
    assert result["timed_out"] is True
    assert result["output"] == "started"
    assert "timed out after 0.3 s" in result["note"]
    assert "new shell" in result["note"]
    assert call("terminal", command="echo fine") == {"output": "fine", "exit_code": 0}


def test_timeout_must_not_be_negative(call: CallTool) -> None:
    with pytest.raises(ToolError, match="'timeout' must be at least 0"):
        call("terminal", command="true", timeout=-1)


def test_truncated_output_is_flagged(make_call: Callable[..., CallTool]) -> None:
    call = make_call({"terminal.max_output_bytes": 1000})
    result = call("terminal", command="seq 1 5000")
    assert result["truncated"] is True
    assert result["output"].startswith("1\n2\n3\n")
    assert result["output"].rstrip("\n").endswith("4999\n5000")
    assert "command output truncated" in result["output"]


def test_workdir(call: CallTool, workspace: Path) -> None:
    (workspace / "other").mkdir()
    assert call("terminal", command="pwd", workdir="other")["output"] == str(workspace / "other")
    assert call("terminal", command="pwd")["output"] == str(workspace)
    missing = call("terminal", command="pwd", workdir="missing")
    assert missing["exit_code"] != 0
    assert "missing" in missing["output"]


def test_shell_exit_is_reported(call: CallTool, workspace: Path) -> None:
    result = call("terminal", command="exit 3")
    assert result["exit_code"] == 3
    assert "The shell exited" in result["note"]
    assert call("terminal", command="pwd") == {"output": str(workspace), "exit_code": 0}


def test_backend_failure_is_a_tool_error(make_call: Callable[..., CallTool], workspace: Path, settings: Any) -> None:
    broken = make_call({"terminal.shell": str(workspace / "no-such-shell")})
    with pytest.raises(ToolError) as info:
        broken("terminal", command="echo hi")
    assert info.value.error_type == "BackendError"
    assert "the local backend failed" in str(info.value)
    assert "no-such-shell" in str(info.value)

    closed = LocalBackend(str(workspace), settings=settings)
    closed.close()
    with pytest.raises(ToolError, match="the local backend failed: the local backend is closed"):
        make_call(backend=closed)("terminal", command="echo hi")


# -- background=True: a server for later runs ----------------------------------------------------


def _alive(call: CallTool, pid: int) -> bool:
    output: str = call("terminal", command=f"kill -0 {pid} && echo alive || echo gone")["output"]
    return output == "alive"


def test_background_starts_and_returns_with_pid_and_log(call: CallTool, workspace: Path) -> None:
    # Its own `&`, a `;` and a trailing comment stay inside what is started.
    started = call("terminal", command="echo first; sleep 300 & echo second; wait # comment", background=True)
    assert started["exit_code"] == 0 and started["pid"] > 0
    log = started["log"]
    assert log in started["output"] and f"kill {started['pid']}" in started["output"]
    wait_then_show = f"for i in $(seq 100); do grep -qs second {log} && break; sleep 0.1; done; cat {log}"
    tail = call("terminal", command=wait_then_show)
    assert tail["output"] == "first\nsecond"
    assert _alive(call, started["pid"])  # still running after later calls of the session
    call("terminal", command=f"pkill -P {started['pid']}; kill {started['pid']}")


def test_background_is_not_in_the_script_stub() -> None:
    """Scripts cannot pass it (refused with the reason), so their signature does not offer it."""
    terminal = default_registry().get("terminal")
    assert terminal is not None
    [signature] = signatures([terminal])
    assert signature.startswith("terminal(command: str") and "background" not in signature


def test_background_is_refused_under_the_read_only_profile(make_runtime: Callable[..., Any]) -> None:
    """A rule may lift the allow-list; a process outliving the call is still not started."""
    runtime = make_runtime(overrides={"policy.profile": "read-only", "policy.rules": ["allow terminal command=sleep"]})
    reply = runtime.dispatcher.call_direct("terminal", {"command": "sleep 300", "background": True})
    assert reply["error"]["type"] == "PolicyRefused", reply
    assert "background=True" in reply["error"]["message"]
