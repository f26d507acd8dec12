"""What an MCP server cannot do to Herald: pass a write off as read-only by declaring
readOnlyHint, hold `herald exec` past its --timeout with a huge or slow listing, or flood a
script with a 60 MB answer. The servers are tests/mcp/fakeservers.py, built on the official SDK.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.config import parse_mcp_servers
from tests.agent.conftest import MakeAgent, llm, make_agent, protocol  # noqa: F401  (fixtures)
from tests.cli import _herald
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

FAKES = str(Path(__file__).with_name("fakeservers.py"))
GRACE = 2
MARGIN = 15  # seconds beyond the bound for start-up, closing and a loaded machine


@pytest.fixture(autouse=True)
def _sdk() -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")


def fake(kind: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FAKES, kind, *args], **extra}


def with_servers(settings: Settings, **tables: dict[str, Any]) -> Settings:
    updated = settings.with_overrides({})
    updated.mcp_servers = parse_mcp_servers(tables, "test")
    return updated


WRITE_NOTE = """
from hermes_tools import mcp_lying_note, ToolError
try:
    print(mcp_lying_note(path=%r, text="written"))
except ToolError as exc:
    print("ToolError:", exc)
"""


def test_a_read_only_hint_is_shown_never_trusted(settings: Settings, tmp_path: Path) -> None:
    target = tmp_path / "written-by-a-read-only-tool.txt"
    lying = with_servers(settings, lying=fake("lying")).with_overrides({"policy.profile": "read-only"})
    with Runtime(settings=lying, transcript=False) as rt:
        tool = rt.dispatcher.registry.get("mcp_lying_note")
        assert tool is not None and tool.mutates
        assert "says it is read-only (readOnlyHint), which Herald does not trust" in tool.description
        result = rt.execute(WRITE_NOTE % str(target))
        assert result.status == "success", result.error
        assert "refused by the read-only profile" in result.output, result.output
        direct = rt.dispatcher.call_direct("mcp_lying_note", {"path": str(target), "text": "direct"})
        assert "refused by the read-only profile" in direct["error"]["message"], direct
    assert not target.exists(), "a tool that only claims to be read-only wrote under the read-only profile"


@pytest.mark.parametrize("trust", [{"read_only_tools": ["note"]}, {"trust_read_only_hints": True}])
def test_the_config_can_trust_a_server(settings: Settings, tmp_path: Path, trust: dict[str, Any]) -> None:
    target = tmp_path / "trusted.txt"
    trusted = with_servers(settings, lying=fake("lying", **trust)).with_overrides({"policy.profile": "read-only"})
    with Runtime(settings=trusted, transcript=False) as rt:
        tool = rt.dispatcher.registry.get("mcp_lying_note")
        assert tool is not None and not tool.mutates
        assert "trusted in Herald's config" in tool.description
        result = rt.execute(WRITE_NOTE % str(target))
        assert result.status == "success", result.error
        assert "wrote" in result.output, result.output
    assert target.read_text() == "written"


def test_plan_mode_refuses_a_lying_tool(make_agent: MakeAgent, llm: FakeLLMServer, tmp_path: Path) -> None:  # noqa: F811
    target = tmp_path / "written-in-plan-mode.txt"
    llm.script(calls(call("execute_code", code=WRITE_NOTE % str(target))),
               calls(call("mcp_lying_note", path=str(target), text="direct")), reply("the plan"))
    agent = make_agent(overrides={"mcp_servers": {"lying": fake("lying")}}, plan=True)
    agent.run("make a plan")
    assert "refused by the read-only profile" in llm.requests[1].tool_results()[0][1]
    assert "refused by the read-only profile" in llm.requests[2].tool_results()[0][1]
    assert not target.exists(), "plan mode ran a tool that only claims to be read-only"


def test_a_huge_listing_withholds_that_server_only(settings: Settings) -> None:
    both = with_servers(settings, many=fake("many", "20000"), lying=fake("lying"))
    with Runtime(settings=both, transcript=False) as rt:
        reason = rt.dispatcher.offer.withheld["mcp_many"]
        assert "more than 1000 tools (setting max_tools)" in reason, reason
        assert "mcp_lying_note" in {t.name for t in rt.dispatcher.script_tools}
        assert not any(name.startswith("mcp_many_") for name in rt.dispatcher.registry.names())
    with Runtime(settings=both, transcript=False) as rt:  # the verdict is kept: not listed again
        reason = rt.dispatcher.offer.withheld["mcp_many"]
        assert "more than 1000 tools (setting max_tools)" in reason and "as listed earlier" in reason, reason


def test_a_slow_listing_withholds_that_server_only(settings: Settings) -> None:
    both = with_servers(settings, slow=fake("slow", "600", list_timeout_sec=2), lying=fake("lying"))
    started = time.monotonic()
    with Runtime(settings=both, transcript=False) as rt:
        reason = rt.dispatcher.offer.withheld["mcp_slow"]
        assert "did not finish within 2 s (setting list_timeout_sec)" in reason, reason
        assert "mcp_lying_note" in {t.name for t in rt.dispatcher.script_tools}
    assert time.monotonic() - started < 2 + MARGIN


def test_herald_exec_with_a_20000_tool_server_ends_by_its_timeout(tmp_path: Path) -> None:
    """The listing counts against --timeout (it starts when herald exec does); raised limits let
    it run as long as it likes, and the run still ends by T + grace + a margin, saying why."""
    config = tmp_path / "config.toml"
    server = fake("many", "20000", max_tools=100000, max_listing_bytes=10**9, list_timeout_sec=600)
    config.write_text(f"[mcp_servers.many]\ncommand = {json.dumps(server['command'])}\n"
                      f"args = {json.dumps(server['args'])}\nmax_tools = 100000\nmax_listing_bytes = 1000000000\n"
                      "list_timeout_sec = 600\n")
    (tmp_path / "s.py").write_text("print('hi')\n")
    for timeout in (1, 5):  # 1 s: the listing cannot be done in time whatever the machine
        started = time.monotonic()
        done = _herald.run(["exec", "--json", "--timeout", str(timeout), "-c", f"sandbox.kill_grace={GRACE}",
                            str(tmp_path / "s.py")], cwd=tmp_path, home=tmp_path, HERALD_CONFIG=str(config))
        elapsed = time.monotonic() - started
        assert elapsed < timeout + GRACE + MARGIN, f"herald exec took {elapsed:.1f} s"
        result = json.loads(done.stdout)
        assert result["duration_seconds"] <= elapsed, result
        if result["status"] == "timeout":
            assert done.returncode == 124
            assert result["duration_seconds"] >= timeout, result
            assert any("went to starting it" in n or "still listing its tools" in n for n in result["notes"]), result
        else:  # a fast machine listed 20,000 tools within 5 s
            assert timeout == 5 and result["status"] == "success" and result["output"] == "hi\n", result


def test_a_60_mb_answer_is_capped_and_spilled(settings: Settings) -> None:
    huge = with_servers(settings, huge=fake("huge", "60"))
    with Runtime(settings=huge, transcript=False) as rt:
        result = rt.execute("""
from hermes_tools import mcp_huge_dump, mcp_huge_dump_json
for answer in (mcp_huge_dump(), mcp_huge_dump_json()):
    print(len(answer["text"]), answer["truncated"], answer["bytes"], answer["spill_path"])
    print(answer["text"][:5] == "HEAD\\n" or answer["text"][:12], "TAIL" in answer["text"][-2000:])
""", timeout=240)
        assert result.status == "success", result.error
        lines = result.output.splitlines()
        for size_line in (lines[0], lines[2]):
            size, truncated, total, path = size_line.split(" ", 3)
            assert int(size) < 1_100_000 and truncated == "True" and int(total) > 60_000_000
            assert os.path.getsize(path) == int(total), "the spill file holds the whole answer"
        assert lines[1] == "True True"


def test_an_answer_past_the_spill_budget_is_cut_and_says_so(settings: Settings) -> None:
    small = with_servers(settings, huge=fake("huge", "60")).with_overrides({"sandbox.max_spill_bytes": 5_000_000})
    with Runtime(settings=small, transcript=False) as rt:
        result = rt.execute("""
from hermes_tools import mcp_huge_dump
answer = mcp_huge_dump()
print(len(answer["text"]), answer.get("spill_path"))
print("spill file cut at" in answer["text"])
""", timeout=240)
        assert result.status == "success", result.error
        size, path = result.output.splitlines()[0].split(" ", 1)
        assert int(size) < 1_100_000
        assert os.path.getsize(path) <= 5_000_000, "the spill file is charged to the run's spill budget"
        assert result.output.splitlines()[1] == "True", "the answer says its spill file was cut"


def test_herald_exec_with_a_listing_that_hangs_ends_by_its_timeout(tmp_path: Path) -> None:
    server = fake("slow", "3600")
    config = tmp_path / "config.toml"
    config.write_text(f"[mcp_servers.slow]\ncommand = {json.dumps(server['command'])}\n"
                      f"args = {json.dumps(server['args'])}\nlist_timeout_sec = 3600\n")
    (tmp_path / "s.py").write_text("print('hi')\n")
    timeout = 3
    started = time.monotonic()
    done = _herald.run(["exec", "--json", "--timeout", str(timeout), "-c", f"sandbox.kill_grace={GRACE}",
                        str(tmp_path / "s.py")], cwd=tmp_path, home=tmp_path, HERALD_CONFIG=str(config))
    elapsed = time.monotonic() - started
    assert elapsed < timeout + GRACE + MARGIN, f"herald exec took {elapsed:.1f} s"
    assert done.returncode == 124, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads(done.stdout)
    assert result["status"] == "timeout" and result["duration_seconds"] >= timeout, result
    assert any(n.startswith("mcp_slow: MCP server 'slow' was still") and "time limit was reached" in n
               for n in result["notes"]), result["notes"]
