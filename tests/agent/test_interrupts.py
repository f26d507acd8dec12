"""`Agent.interrupt()` during a direct tool call (one the model makes itself, not from a script):
the terminal command's process tree is killed at once, the shell keeps its directory and
exported variables, the tool result says what happened and the run ends "interrupted"."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from herald.agent.events import AgentEvent, ToolFinished, ToolStarted
from herald.runtime.dispatcher import Dispatcher
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import MakeAgent

SLEEP = "sleep 60.4242"  # an odd duration, so its process can be found (and must not be)


def _sleepers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:  # gone meanwhile
                continue
            if cmdline.replace(b"\0", b" ").strip() == SLEEP.encode():
                found.append(int(entry))
    return found


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_interrupt_kills_a_direct_terminal_command(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    llm.script(
        calls(call("terminal", command="mkdir -p sub && cd sub && export KEPT=yes")),
        calls(call("terminal", command=f"touch {workspace}/started; {SLEEP}; touch {workspace}/finished")),
    )
    holder: dict[str, float] = {}
    agent = make_agent()

    def interrupt_once_running() -> None:
        _wait_for(workspace / "started")
        holder["interrupted_at"] = time.monotonic()
        agent.interrupt()

    stopper = threading.Thread(target=interrupt_once_running)
    stopper.start()
    result = agent.run("set up, then wait")
    returned = time.monotonic()
    stopper.join()

    assert returned - holder["interrupted_at"] < 40  # generous (a loaded machine): not the 60 s the command would take
    assert result.status == "interrupted" and result.final_text.startswith("Interrupted")
    assert len(llm.requests) == 2  # no model call after the interrupt
    tool_result = result.messages[-1]
    assert tool_result["role"] == "tool" and tool_result.get("is_error") is True
    content = json.loads(tool_result["content"])
    assert content["interrupted"] is True and content["exit_code"] == 130
    assert "Command interrupted" in content["note"]
    assert [c.ok for c in result.tool_calls] == [True, False]
    assert not (workspace / "finished").exists() and _sleepers() == []  # the whole tree is gone
    finished = [e for e in agent.events if isinstance(e, ToolFinished)]
    assert finished[-1].name == "terminal" and not finished[-1].ok

    # The session goes on in the same directory with the same exported variables.
    llm.script(calls(call("terminal", command='echo "$PWD $KEPT"')), reply("still there"))
    again = agent.run("where are you?")
    assert again.status == "completed" and again.final_text == "still there"
    [(_, content_text)] = llm.requests[-1].tool_results()
    assert json.loads(content_text)["output"] == f"{workspace / 'sub'} yes"


@pytest.mark.timeout(180)
def test_interrupt_while_a_direct_call_waits_for_a_busy_shell(make_agent: MakeAgent, llm: FakeLLMServer,
                                                              workspace: Path) -> None:
    """Two terminal calls in one turn run in order: the interrupt stops the first, and the second
    is answered "not run" rather than started."""
    llm.script(calls(call("terminal", command=f"touch {workspace}/started; {SLEEP}"),
                     call("terminal", command=f"touch {workspace}/second")))
    agent = make_agent()

    def interrupt_once_running() -> None:
        _wait_for(workspace / "started")
        agent.interrupt()

    stopper = threading.Thread(target=interrupt_once_running)
    stopper.start()
    started = time.monotonic()
    result = agent.run("two slow calls")
    stopper.join()
    assert time.monotonic() - started < 30
    assert result.status == "interrupted"
    first, second = result.messages[-2:]
    assert json.loads(first["content"])["interrupted"] is True
    assert second["content"].startswith("Not run: the session was interrupted")
    assert not (workspace / "second").exists() and _sleepers() == []


def test_a_cancelled_direct_call_is_not_started(make_agent: MakeAgent, workspace: Path) -> None:
    """The dispatcher's cancellation contract, as a tool author sees it: a call whose cancel
    event is already set is refused without running."""
    agent = make_agent()
    dispatcher: Dispatcher = agent.runtime.dispatcher
    cancel = threading.Event()
    cancel.set()
    reply_ = dispatcher.call_direct("terminal", {"command": "touch ran"}, cancel=cancel)
    assert reply_["error"]["type"] == "Interrupted" and not (workspace / "ran").exists()
    events: list[AgentEvent] = agent.events
    assert not [e for e in events if isinstance(e, ToolStarted)]
