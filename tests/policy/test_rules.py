"""Per-tool rules: deny, allow and ask (with an approve callback, and with no way to ask), and
what the transcript keeps of every refusal and approval."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald._sandbox.confine.readonly import local_confinement
from herald.policy import Policy, PolicyCall, RuleError, parse_rule

from .conftest import MakeRuntime, both, direct


def records(runtime: Runtime, kind: str) -> list[dict[str, Any]]:
    assert runtime.transcript is not None
    runtime.transcript.flush()
    lines = runtime.transcript.path.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("type") == kind]


def test_rule_syntax_errors_say_the_expected_form() -> None:
    for bad in ["nope terminal", "deny", "deny terminal cmd=rm", "deny terminal command=", "deny read_file path=src/"]:
        with pytest.raises(RuleError, match="policy rule"):
            parse_rule(bad)
    rule = parse_rule("ask terminal command=git push|npm publish")
    assert rule.values == ("git push", "npm publish") and str(rule) == "ask terminal command=git push|npm publish"


def test_deny_rules_by_path_command_and_domain(make_runtime: MakeRuntime, workspace: Path,
                                               web_settings: dict[str, Any]) -> None:
    (workspace / "app.lock").write_text("x")
    (workspace / "ok.txt").write_text("x")
    rules = ["deny write_file path=*.lock", "deny terminal command=git push|rm", "deny web_* domain=example.org"]
    runtime = make_runtime(overrides={**web_settings, "policy.rules": rules})
    outcome = both(runtime, "write_file", {"path": "app.lock", "content": "y"})
    assert outcome.refused and "rule 'deny write_file path=*.lock' (policy.rules)" in outcome.message
    assert both(runtime, "write_file", {"path": "ok.txt", "content": "y"}).ok
    for command in ["rm ok.txt", "ls && rm ok.txt", "echo $(rm ok.txt)", "git push origin"]:
        assert both(runtime, "terminal", {"command": command}).refused, command
    assert both(runtime, "terminal", {"command": "git status >/dev/null; rmdir --help >/dev/null"}).ok
    assert both(runtime, "web_extract", {"urls": ["https://docs.example.org/a"]}).refused
    assert (workspace / "app.lock").read_text() == "x"
    refusals = records(runtime, "policy")
    assert {r["rule"] for r in refusals} == {f"policy.rules: {r}" for r in rules}
    assert all(r["decision"] == "refused" for r in refusals)
    # The call's own record carries the error, with the rule.
    calls = [r for r in records(runtime, "tool_call") + records(runtime, "sandbox_tool_call") if "error" in r]
    assert calls and all(r["error"]["type"] == "PolicyRefused" and r["error"]["rule"] for r in calls)


def test_allow_rules_lift_the_profile(make_runtime: MakeRuntime, workspace: Path, tmp_path: Path) -> None:
    rules = ["allow terminal command=touch", "allow write_file path=notes/**", f"allow read_file path={tmp_path}/*.txt"]
    (tmp_path / "shared.txt").write_text("shared\n")
    runtime = make_runtime(policy="read-only", overrides={"policy.rules": rules})
    # The rule lifts the allow-list, not the read-only view: touch runs, confined, and fails.
    assert both(runtime, "terminal", {"command": "touch a b"}).ok
    assert both(runtime, "terminal", {"command": "touch c; rm a"}).refused  # every command must be covered
    assert both(runtime, "write_file", {"path": "notes/n.md", "content": "x"}).ok
    assert both(runtime, "write_file", {"path": "other.md", "content": "x"}).refused
    assert both(runtime, "read_file", {"path": str(tmp_path / "shared.txt")}).ok
    # Where bwrap cannot confine, the rule is the opt-in to running it unconfined.
    confined = local_confinement()[0] is not None
    assert sorted(p.name for p in workspace.iterdir()) == (["notes"] if confined else ["a", "b", "notes"])


def test_ask_without_a_way_to_ask_is_refused_saying_how_to_allow(make_runtime: MakeRuntime, workspace: Path) -> None:
    runtime = make_runtime(overrides={"policy.rules": ["ask terminal command=touch"]})
    outcome = both(runtime, "terminal", {"command": "touch x"})
    assert outcome.refused
    assert "needs approval (rule 'ask terminal command=touch' in policy.rules)" in outcome.message
    assert "no way to ask" in outcome.message and "'allow terminal command=touch'" in outcome.message
    assert not (workspace / "x").exists()


def test_ask_with_an_approve_callback(make_runtime: MakeRuntime, workspace: Path, settings: Any) -> None:
    asked: list[PolicyCall] = []
    lock = threading.Lock()

    def approve(call: PolicyCall) -> bool:
        with lock:
            asked.append(call)
        return "yes" in call.args["command"]

    policy = Policy.from_settings(settings.with_overrides({"policy.rules": ["ask terminal command=touch"]}),
                                  approve=approve)
    runtime = make_runtime(policy=policy)
    assert both(runtime, "terminal", {"command": "touch yes"}).ok
    outcome = both(runtime, "terminal", {"command": "touch no"})
    assert outcome.type == "PolicyRefused" and "was not approved" in outcome.message
    assert [(c.tool, c.origin) for c in asked] == [("terminal", "direct"), ("terminal", "script")] * 2
    assert all(c.rule == "ask terminal command=touch" for c in asked)
    assert sorted(p.name for p in workspace.iterdir()) == ["yes"]
    decisions = [(r["decision"], r["rule"]) for r in records(runtime, "policy")]
    rule = "policy.rules: ask terminal command=touch"
    assert decisions == [("approved", rule)] * 2 + [("denied", rule)] * 2


def test_what_was_approved_is_what_runs_when_the_shell_moves_meanwhile(
    make_runtime: MakeRuntime, workspace: Path, settings: Any
) -> None:
    """A call's relative path leads from where the shell was when the call began: a `cd` that
    runs while the call waits for its approval (a terminal call beside it in parallel()) moves
    neither the file approved nor the file written."""
    (workspace / "elsewhere").mkdir()
    made: list[Runtime] = []
    asked: list[PolicyCall] = []

    def approve(call: PolicyCall) -> bool:
        asked.append(call)
        assert made[0].backend.run("cd elsewhere").exit_code == 0  # the shell moves while the call waits
        return True

    policy = Policy.from_settings(settings.with_overrides({"policy.rules": ["ask write_file path=*.txt"]}),
                                  approve=approve)
    made.append(make_runtime(policy=policy))
    outcome = direct(made[0], "write_file", {"path": "note.txt", "content": "approved here\n"})
    assert outcome.ok, outcome.message
    assert len(asked) == 1
    assert (workspace / "note.txt").read_text() == "approved here\n"
    assert not (workspace / "elsewhere" / "note.txt").exists()


def test_allowed_domains(make_runtime: MakeRuntime, web_settings: dict[str, Any]) -> None:
    runtime = make_runtime(overrides={**web_settings, "policy.allowed_domains": ["example.org"]})
    assert both(runtime, "web_extract", {"urls": ["https://docs.example.org/a"]}).ok
    outcome = both(runtime, "web_extract", {"urls": ["https://docs.example.org/a", "https://evil.test/x"]})
    assert outcome.refused and "evil.test is not in policy.allowed_domains (example.org)" in outcome.message
    for url in ["http://2852039166/", "http://0xa9fea9fe/", "http://[::ffff:169.254.169.254]/", "http://[fd00:ec2::254]/"]:
        outcome = both(runtime, "web_extract", {"urls": [url]})
        assert outcome.refused and "metadata" in outcome.message, url


def test_hostile_arguments_are_refused_not_crashes(make_runtime: MakeRuntime, web_settings: dict[str, Any]) -> None:
    runtime = make_runtime(policy="read-only", overrides={**web_settings, "policy.rules": ["deny web_* domain=x.org"]})
    hostile: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "a\x00b"}), ("search_files", {"pattern": "x", "path": "/"}),
        ("web_extract", {"urls": ["http://[::1"]}), ("terminal", {"command": "ls " * 40_000})]
    for name, args in hostile:
        outcome = both(runtime, name, args)
        assert outcome.refused, (name, outcome)
