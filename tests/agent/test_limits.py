"""Turn budget (grace call, forced summary, execute_code refunds), loop guardrails, interrupts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from herald import Agent
from herald.agent.events import AgentEvent, InnerToolCall, ModelCallStarted
from herald.agent.providers.base import TextDelta
from tests.fakes.llm_server import (
    FakeLLMServer,
    RecordedRequest,
    Turn,
    call,
    calls,
    reply,
)

from .conftest import MakeAgent


def _tool_choice(request: RecordedRequest) -> str:
    choice = request.body.get("tool_choice")
    return choice["type"] if isinstance(choice, dict) else str(choice)


def test_budget_exhaustion_grace_call_then_forced_summary(
    make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    counter = iter(range(1000))

    def keeps_calling_tools(request: RecordedRequest) -> Turn:
        if _tool_choice(request) == "none":
            return reply("Summary: I listed files 3 times and ran out of turns.")
        return calls(call("terminal", command=f"echo {next(counter)}"))

    llm.strategy = keeps_calling_tools
    result = make_agent(max_turns=2).run("never finishes")
    assert result.status == "budget_exhausted"
    assert result.final_text == "Summary: I listed files 3 times and ran out of turns."
    assert result.turns == 4 and len(llm.requests) == 4  # 2 turns, the grace call, the summary call
    assert "turn budget for this task is used up" in llm.requests[2].last_user_text()
    assert _tool_choice(llm.requests[2]) == "auto" and _tool_choice(llm.requests[3]) == "none"
    # The grace call's tool calls were answered "not run" (a valid history), not executed.
    assert [c.blocked for c in result.tool_calls] == [False, False, True]
    assert result.messages[-1] == {"role": "assistant", "content": result.final_text}


def test_budget_grace_call_answering_with_text_ends_there(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(calls(call("terminal", command="echo 1")), reply("Final answer after the note."))
    result = make_agent(max_turns=1).run("go")
    assert result.status == "budget_exhausted" and result.final_text == "Final answer after the note."
    assert len(llm.requests) == 2


def test_model_that_never_writes_text_gets_herald_summary(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.strategy = lambda request: calls(call("terminal", command="echo again"), text="")
    llm.script(calls(call("terminal", command="echo first"), text="Checking the shell."))
    result = make_agent(max_turns=1).run("go")
    assert result.status == "budget_exhausted"
    assert result.final_text.startswith("Stopped: the turn budget ran out")
    assert "terminal (ok)" in result.final_text and "Checking the shell." in result.final_text


def test_execute_code_only_turns_are_refunded(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    script = "from hermes_tools import terminal\nprint(terminal('echo ran')['output'])"
    llm.script(*[calls(call("execute_code", code=script)) for _ in range(4)], reply("four scripts, two-turn budget"))
    result = make_agent(max_turns=2).run("go")
    assert result.status == "completed" and result.final_text == "four scripts, two-turn budget"
    assert result.turns == 5


def test_refunds_cannot_make_a_run_endless(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.strategy = lambda request: (
        reply("summary") if _tool_choice(request) == "none" else calls(call("execute_code", code="print(1)"))
    )
    result = make_agent(max_turns=2).run("loop forever")
    assert result.status == "budget_exhausted" and result.final_text == "summary"
    assert result.turns == 2 * 3 + 2  # the hard cap (3x the budget), then grace and summary


def test_repeated_failing_call_is_warned_then_blocked(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(*[calls(call("read_file", path="missing.txt")) for _ in range(4)], reply("giving up on it"))
    result = make_agent().run("read missing.txt")
    assert result.status == "completed"
    results = [r.tool_results()[0][1] for r in llm.requests[1:5]]
    assert results[0].startswith("Error (FileNotFound)") and "[Herald:" not in results[0]
    assert "[Herald: this exact read_file call has now failed 2 times" in results[1]
    assert "has now failed 3 times" in results[2]
    assert results[3].startswith("Blocked: read_file was called with these exact arguments 3 times")
    assert [c.blocked for c in result.tool_calls] == [False, False, False, True]


def test_read_only_call_with_the_same_result_is_warned_then_blocked(
    make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path
) -> None:
    (workspace / "status.txt").write_text("still pending\n")
    llm.script(*[calls(call("read_file", path="status.txt")) for _ in range(4)],
               calls(call("write_file", path="status.txt", content="done\n")),
               calls(call("read_file", path="status.txt")), reply("finished"))
    result = make_agent().run("wait for status")
    results = [r.tool_results()[0][1] for r in llm.requests[1:7]]
    assert "[Herald:" not in results[0]
    assert "returned exactly the same result 2 times in a row" in results[1]
    assert results[3].startswith(
        "Blocked: read_file with these exact arguments already returned the same result 3 times"
    )
    assert "done" in results[5] and "Blocked" not in results[5]  # a new result: allowed again
    assert result.status == "completed"


@pytest.mark.timeout(120)
def test_interrupt_mid_script(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    script = (
        "import time\nfrom hermes_tools import terminal\n"
        "terminal('echo started > started.txt')\n"
        "time.sleep(60)\nterminal('echo finished > finished.txt')\n"
    )
    llm.script(calls(call("execute_code", code=script)))
    holder: dict[str, Agent] = {}

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, InnerToolCall):  # the script is running: stop everything
            threading.Thread(target=holder["agent"].interrupt).start()

    agent = make_agent(on_event=on_event)
    holder["agent"] = agent
    started = time.monotonic()
    result = agent.run("run the slow script")
    assert time.monotonic() - started < 30
    assert result.status == "interrupted" and result.final_text.startswith("Interrupted")
    assert len(llm.requests) == 1  # no model call after the interrupt
    assert (workspace / "started.txt").exists() and not (workspace / "finished.txt").exists()
    tool_result = result.messages[-1]
    assert tool_result["role"] == "tool" and '"status": "interrupted"' in tool_result["content"]


@pytest.mark.timeout(120)
def test_interrupt_mid_model_call(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(Turn(text="this answer arrives far too late", delay=60))
    holder: dict[str, Agent] = {}

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, ModelCallStarted):
            def stop() -> None:
                llm.wait_for_requests(1)
                holder["agent"].interrupt()
            threading.Thread(target=stop).start()

    agent = make_agent(on_event=on_event)
    holder["agent"] = agent
    started = time.monotonic()
    result = agent.run("slow model")
    assert time.monotonic() - started < 30
    assert result.status == "interrupted"
    assert result.messages[-1] == {"role": "user", "content": "slow model"}  # nothing half-made was kept


@pytest.mark.timeout(120)
def test_interrupt_while_streaming(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(Turn(text="first words then a long stall before the rest of the answer", stall=60))
    holder: dict[str, Agent] = {}
    fired = threading.Event()

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, TextDelta) and not fired.is_set():
            fired.set()
            threading.Thread(target=holder["agent"].interrupt).start()

    agent = make_agent(on_event=on_event)
    holder["agent"] = agent
    started = time.monotonic()
    result = agent.run("stream then stall")
    assert time.monotonic() - started < 30 and result.status == "interrupted"
