"""Approvals beyond the Gate: a slow `approve(call)` callback does not burn a script's timeout
(one-shot and kernel runs), waits that overlap count once, the terminal approver's answers and
its display of hostile arguments, and `herald exec` with no terminal refusing with the rule."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald.policy import Policy, PolicyCall
from herald.policy.approvals import PausedTime, TerminalApprovals, describe_call
from tests.cli._herald import run

MakeRuntime = Callable[..., Runtime]
SLOW = """
import time
from hermes_tools import terminal
print(terminal("echo late")["output"].strip(), flush=True)
{after}
"""


def _slow_policy(settings: Any, seconds: float, asked: list[PolicyCall]) -> Policy:
    def approve(call: PolicyCall) -> bool:
        asked.append(call)
        time.sleep(seconds)  # a person thinking it over, longer than the script's whole timeout
        return True

    return Policy.from_settings(settings.with_overrides({"policy.rules": ["ask terminal command=echo"]}),
                                approve=approve)


@pytest.mark.parametrize("exec_mode", ["host", "backend"])
def test_a_slow_approval_does_not_burn_the_timeout(make_runtime: MakeRuntime, settings: Any, exec_mode: str) -> None:
    asked: list[PolicyCall] = []
    runtime = make_runtime(policy=_slow_policy(settings, 2.5, asked), exec_mode=exec_mode)
    result = runtime.execute(SLOW.format(after="print('after')"), timeout=2)
    assert result.status == "success", result
    assert result.output.split() == ["late", "after"]  # the command ran in full: its timeout moved too
    result = runtime.execute(SLOW.format(after="time.sleep(600)"), timeout=2)
    assert result.status == "timeout" and "late" in result.output  # the timeout still applies afterwards
    result = runtime.execute(SLOW.format(after="print('cell')"), timeout=2, session="k")
    assert result.status == "success" and result.output.split() == ["late", "cell"], result
    assert [c.origin for c in asked] == ["script"] * 3


def test_overlapping_waits_count_once() -> None:
    paused = PausedTime()

    class Scope:
        deadline: float | None = 100.0
        pausing: Callable[[], float] | None = None

    scope = Scope()
    paused.begin(scope)
    inside, release = threading.Barrier(3), threading.Event()

    def wait() -> None:
        with paused.hold():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=wait) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    started = time.monotonic()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join()
    waited = paused.seconds()
    assert 0.2 <= waited <= time.monotonic() - started + 0.2  # once, not twice
    assert scope.deadline == 100.0 + waited
    paused.begin(None)
    assert paused.seconds() == 0.0


def _answers(text: str) -> tuple[TerminalApprovals, io.StringIO, int]:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, text.encode())
    out = io.StringIO()
    return TerminalApprovals(read_fd, out), out, write_fd


def test_terminal_answers_always_is_per_tool_and_rule() -> None:
    approvals, out, write_fd = _answers("y\nn\na\n")
    try:
        ask = PolicyCall("terminal", {"command": "echo x"}, "ask terminal", "script")
        other_rule = PolicyCall("terminal", {"command": "echo x"}, "ask terminal command=echo", "script")
        assert approvals(ask) is True
        assert approvals(ask) is False
        assert approvals(ask) is True  # "always"
        assert approvals(ask) is True  # not asked again
        assert out.getvalue().count("[N] deny: ") == 3
        os.close(write_fd)
        write_fd = -1
        assert approvals(other_rule) is False  # another rule is asked about; end of input denies
        assert "no answer: denied" in out.getvalue()
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(approvals.read_fd)


def test_closed_approvals_deny_without_asking() -> None:
    approvals, out, write_fd = _answers("")
    try:
        approvals.close()
        assert approvals(PolicyCall("terminal", {}, "ask terminal", "direct")) is False
        assert out.getvalue() == ""
    finally:
        os.close(write_fd)
        os.close(approvals.read_fd)


def test_hostile_arguments_are_shown_inert() -> None:
    text = describe_call(PolicyCall("terminal", {"command": "echo \x1b[2J\x1b]0;owned\x07 ok\nrm -rf /" + "x" * 500},
                                    "ask terminal", "script"))
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "\\nrm -rf /" in text
    assert len(text.splitlines()) == 2 and "x" * 500 in text  # shown whole: nothing hides past a cut
    padded = describe_call(PolicyCall("terminal", {"command": " " * 5000 + "; rm -rf ~"}, "ask terminal", "script"))
    assert "3,010 more characters not shown: deny unless you know them" in padded  # the cut is said


def test_exec_without_a_terminal_refuses_naming_the_rule(workspace: Path, tmp_path: Path) -> None:
    script = "from hermes_tools import terminal\nterminal('echo hi')\n"
    proc = run(["exec", "-", "-c", 'policy.rules=["ask terminal command=echo"]', "--json"], workspace, tmp_path,
               stdin=script)
    result = json.loads(proc.stdout)
    assert result["status"] == "error"
    assert "terminal needs approval (rule 'ask terminal command=echo' in policy.rules)" in result["error"]
    assert "no way to ask" in result["error"] and "'allow terminal command=echo'" in result["error"]
