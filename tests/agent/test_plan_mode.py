"""Plan mode against the scripted test LLM: `herald run --plan` runs read-only with a plan prompt,
changes nothing (direct calls and a script's calls are refused) and prints the plan as the
answer; `--resume ID --profile workspace-write "go ahead"` carries it out with the plan in
context. `Agent(plan=True)` is the same from Python."""

from __future__ import annotations

import re
from pathlib import Path

from herald.agent.prompts import PLAN_MODE
from tests.agent.conftest import MakeAgent
from tests.cli._herald import run
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

SCRIPT = (
    "from hermes_tools import write_file, ToolError\n"
    "try:\n    write_file('app.py', 'from a script')\n    print('wrote')\n"
    "except ToolError as exc:\n    print('script', exc.error_type)\n"
)
PLAN = "PLAN: 1. replace the body of app.py with print('new'). 2. run it to check."


def test_plan_then_resume_to_carry_it_out(workspace: Path, tmp_path: Path) -> None:
    (workspace / "app.py").write_text("print('old')\n")
    with FakeLLMServer() as llm:
        llm.script(calls(call("read_file", path="app.py"), call("write_file", path="app.py", content="x"),
                         call("terminal", command="rm app.py")),
                   calls(call("execute_code", code=SCRIPT)),
                   reply(PLAN))
        flags = ["--base-url", llm.openai_base_url, "--model", "m"]
        proc = run(["run", "fix app.py", "--plan", *flags], workspace, tmp_path, OPENAI_API_KEY="k")
        assert proc.returncode == 0, proc.stderr
        assert PLAN in proc.stdout  # the plan is the answer
        assert "profile read-only" in proc.stderr
        assert (workspace / "app.py").read_text() == "print('old')\n"  # nothing changed
        assert PLAN_MODE.strip() in llm.requests[0].system
        results = dict(llm.requests[1].tool_results())
        refused = [text for text in results.values() if "refused by the read-only profile" in text]
        assert len(refused) == 2, results
        [(_, script)] = llm.requests[2].tool_results()
        assert "script PolicyRefused" in script
        found = re.search(r"herald run --resume (\S+) --profile workspace-write", proc.stderr)
        assert found, proc.stderr
        session = found.group(1)

        llm.script(calls(call("write_file", path="app.py", content="print('new')\n")), reply("done: app.py updated"))
        proc = run(["run", "--resume", session, "--profile", "workspace-write", "go ahead", *flags], workspace,
                   tmp_path, OPENAI_API_KEY="k")
        assert proc.returncode == 0, proc.stderr
        assert "done: app.py updated" in proc.stdout
        assert (workspace / "app.py").read_text() == "print('new')\n"
        go_ahead = llm.requests[3]
        assert go_ahead.last_user_text().startswith("[Herald: plan mode is over")
        assert "workspace-write" in go_ahead.last_user_text() and "go ahead" in go_ahead.last_user_text()
        assert PLAN in str(go_ahead.messages)  # the plan is in context

        llm.script(reply("still fine"))  # a later resume is not told again
        proc = run(["run", "--resume", session, "anything else?", *flags], workspace, tmp_path, OPENAI_API_KEY="k")
        assert proc.returncode == 0, proc.stderr
        assert llm.requests[5].last_user_text() == "anything else?"


def test_plan_refuses_another_profile(workspace: Path, tmp_path: Path) -> None:
    proc = run(["run", "x", "--plan", "--profile", "full", "--model", "m", "--base-url", "http://127.0.0.1:9"],
               workspace, tmp_path, OPENAI_API_KEY="k")
    assert proc.returncode == 2
    assert "--plan runs read-only: drop --profile full" in proc.stderr


def test_agent_plan_true_from_python(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    llm.script(calls(call("write_file", path="new.txt", content="x")), reply(PLAN))
    agent = make_agent(plan=True)
    assert agent.runtime.dispatcher.policy.profile == "read-only"
    result = agent.run("add new.txt")
    assert result.status == "completed" and result.final_text == PLAN
    assert not (workspace / "new.txt").exists()
    assert PLAN_MODE.strip() in llm.requests[0].system
