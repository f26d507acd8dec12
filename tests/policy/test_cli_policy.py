"""`--profile`, `policy.*` settings and `herald tools` through the real command line; `herald run`
against the scripted test LLM: a refused call reaches the model as an error that says why."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

from tests.cli._herald import HERALD, herald_env, run
from tests.cli.test_exec_live import _read_pty_until as read_pty_until
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

WRITE_AND_LIST = """
from hermes_tools import write_file, terminal, ToolError
for fn, args in [(write_file, ("made.txt", "x")), (terminal, ("touch made2.txt",)), (terminal, ("ls",))]:
    try:
        fn(*args)
        print(fn.__name__, "ran")
    except ToolError as exc:
        print(fn.__name__, exc.error_type)
"""


def test_exec_profile_flag_setting_and_environment(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-", "--profile", "read-only"], workspace, home, stdin=WRITE_AND_LIST)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["write_file PolicyRefused", "terminal PolicyRefused", "terminal ran"]
    assert "profile read-only" in proc.stderr  # the summary line names a profile other than the default
    assert sorted(p.name for p in workspace.iterdir()) == []
    proc = run(["exec", "-", "-c", "policy.profile=read-only", "--json"], workspace, home, stdin=WRITE_AND_LIST)
    result = json.loads(proc.stdout)
    assert result["profile"] == "read-only" and "write_file PolicyRefused" in result["output"]
    proc = run(["exec", "-", "--json"], workspace, home, stdin=WRITE_AND_LIST, HERALD_POLICY_PROFILE="full")
    assert json.loads(proc.stdout)["profile"] == "full"
    assert sorted(p.name for p in workspace.iterdir()) == ["made.txt", "made2.txt"]


def test_bad_profile_and_bad_rule_are_usage_errors(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-", "--profile", "yolo"], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2 and "read-only" in proc.stderr
    proc = run(["exec", "-", "-c", "policy.profile=yolo"], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2 and "policy.profile" in proc.stderr
    proc = run(["exec", "-", "-c", 'policy.rules=["forbid terminal"]'], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2 and "policy rule 'forbid terminal'" in proc.stderr and "allow|deny|ask" in proc.stderr


def test_config_file_rules(workspace: Path, home: Path) -> None:
    config = home / "herald.toml"
    config.write_text('[policy]\nrules = ["deny terminal command=touch", "allow write_file path=/tmp/**"]\n')
    proc = run(["--config", str(config), "exec", "-"], workspace, home, stdin=WRITE_AND_LIST)
    assert proc.stdout.splitlines() == ["write_file ran", "terminal PolicyRefused", "terminal ran"], proc.stderr


def test_tools_lists_the_profile_and_what_it_forbids(workspace: Path, home: Path) -> None:
    proc = run(["tools", "--profile", "read-only"], workspace, home)
    assert proc.returncode == 0, proc.stderr
    assert "Permission profile: read-only" in proc.stdout and "write_file" in proc.stdout
    assert "find without -exec/-delete" in proc.stdout
    proc = run(["tools", "--json"], workspace, home)
    description = json.loads(proc.stdout)[0]["function"]["description"]
    assert "Permission profile: workspace-write" in description and "metadata" in description
    proc = run(["tools", "-c", "policy.profile=full"], workspace, home)
    assert "Permission profile: full (explicit opt-in)" in proc.stdout


def test_run_read_only_the_model_sees_the_refusal(workspace: Path, home: Path) -> None:
    with FakeLLMServer() as llm:
        llm.script(
            calls(call("write_file", path="plan.md", content="x"), call("terminal", command="ls")),
            reply("I cannot write here; this is the plan."),
        )
        proc = run(["run", "make a plan", "--profile", "read-only", "--json", "--base-url", llm.openai_base_url,
                    "--model", "m", "--provider", "openai"], workspace, home, OPENAI_API_KEY="sk-test")
        assert proc.returncode == 0, proc.stderr
        results = dict(llm.requests[1].tool_results())
        system = llm.requests[0].system
        tools = {t["function"]["name"]: t["function"]["description"] for t in llm.requests[0].body["tools"]}
    assert not (workspace / "plan.md").exists()
    refusal = next(text for text in results.values() if "PolicyRefused" in text or "read-only profile" in text)
    assert "write_file refused by the read-only profile" in refusal
    assert "Permission profile: read-only" in tools["execute_code"]
    assert system
    # The session's transcript: its profile, and the refusal with the rule that decided it.
    (session,) = (home / "data" / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in session.read_text().splitlines()]
    assert records[0]["type"] == "session" and records[0]["profile"] == "read-only"
    decisions = [(r["tool"], r["decision"], r["rule"]) for r in records if r.get("type") == "policy"]
    assert decisions == [("write_file", "refused", "profile read-only")]


def test_full_profile_is_named_on_the_live_status_line(workspace: Path, home: Path) -> None:
    (workspace / "s.py").write_text(
        "import os, time\nfrom hermes_tools import terminal\nterminal('true')\n"
        "while not os.path.exists('go'):\n    time.sleep(0.01)\n"
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen([*HERALD, "exec", "s.py", "--profile", "full"], cwd=workspace, env=herald_env(home),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    seen = bytearray()
    try:
        read_pty_until(master, b"1 tool call(s)", seen)
        assert b"running \xc2\xb7 profile full" in seen
        (workspace / "go").touch()
        read_pty_until(master, b"success", seen)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(master)


def test_run_names_the_full_profile_in_its_summary(workspace: Path, home: Path) -> None:
    with FakeLLMServer() as llm:
        llm.script(reply("done"))
        proc = run(["run", "x", "--profile", "full", "--base-url", llm.openai_base_url, "--model", "m",
                    "--provider", "openai"], workspace, home, OPENAI_API_KEY="sk-test")
    assert proc.returncode == 0, proc.stderr
    assert "profile full" in proc.stderr.splitlines()[-1]
