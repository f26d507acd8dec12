"""Herald's MCP client against real third-party servers, called from scripts through the Runtime."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime

from .conftest import descendants, server_table
from .servers import Installed


def wait_until(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_tools_become_typed_stubs_and_direct_tools(mcp_settings: Any) -> None:
    with Runtime(settings=mcp_settings("time", "memory"), transcript=False) as rt:
        tools = {t.name: t for t in rt.dispatcher.tools}
        assert tools["mcp_time_get_current_time"].mutates  # readOnlyHint alone is not trusted
        assert tools["mcp_memory_create_entities"].mutates  # no readOnlyHint: counts as mutating
        result = rt.execute("""
import inspect, hermes_tools
for name in ("mcp_time_get_current_time", "mcp_memory_create_entities", "mcp_memory_open_nodes"):
    fn = getattr(hermes_tools, name)
    print(name + str(inspect.signature(fn)))
print(inspect.getdoc(hermes_tools.mcp_time_get_current_time))
""")
        assert result.status == "success", result.error
        assert "mcp_time_get_current_time(timezone: str) -> Dict[str, Any]" in result.output
        assert "mcp_memory_create_entities(entities: List[Dict[str, Any]]) -> Dict[str, Any]" in result.output
        assert "mcp_memory_open_nodes(names: List[str]) -> Dict[str, Any]" in result.output
        assert "timezone: IANA timezone name" in result.output  # argument docs from the inputSchema
        assert "mcp_time_get_current_time(timezone: str) -> Dict[str, Any]" in rt.execute_tool.description
        direct = rt.dispatcher.call_direct("mcp_time_get_current_time", {"timezone": "Europe/Paris"})
        assert direct["result"]["timezone"] == "Europe/Paris"


def test_two_hundred_calls_in_one_script(mcp_settings: Any) -> None:
    settings = mcp_settings("memory").with_overrides({"sandbox.max_tool_calls": 250})
    with Runtime(settings=settings, transcript=False) as rt:
        result = rt.execute("""
from hermes_tools import mcp_memory_create_entities, mcp_memory_add_observations, mcp_memory_open_nodes
mcp_memory_create_entities([{"name": "herald", "entityType": "project", "observations": []}])
for i in range(198):
    mcp_memory_add_observations([{"entityName": "herald", "contents": ["note %d" % i]}])
node = mcp_memory_open_nodes(["herald"])["entities"][0]
print(len(node["observations"]), node["observations"][-1])
""")
        assert result.status == "success", result.error
        assert result.output.strip() == "198 note 197"
        assert result.tool_calls_made == 200


def test_tool_error_is_a_tool_error_in_the_script(mcp_settings: Any) -> None:
    with Runtime(settings=mcp_settings("time"), transcript=False) as rt:
        result = rt.execute("""
from hermes_tools import mcp_time_get_current_time, ToolError
try:
    mcp_time_get_current_time("Not/AZone")
except ToolError as exc:
    print("ToolError:", exc)
""")
        assert result.status == "success", result.error
        assert result.output.startswith("ToolError: mcp_time_get_current_time:")
        assert "Not/AZone" in result.output


def test_servers_start_lazily_and_close_with_the_runtime(mcp_settings: Any) -> None:
    settings = mcp_settings("time")
    Runtime(settings=settings, transcript=False).close()  # the first session lists the tools (kept)
    assert wait_until(lambda: not descendants("mcp-server-time"))
    rt = Runtime(settings=settings, transcript=False)
    try:
        assert "mcp_time_get_current_time" in {t.name for t in rt.dispatcher.script_tools}
        assert descendants("mcp-server-time") == []  # nothing started before a call
        script = "from hermes_tools import mcp_time_get_current_time as now\nprint(now('UTC')['timezone'])"
        assert rt.execute(script).output.strip() == "UTC"
        started = descendants("mcp-server-time")
        assert len(started) == 1
        assert rt.execute(script).output.strip() == "UTC"
        assert descendants("mcp-server-time") == started  # reused for the session
    finally:
        rt.close()
    assert wait_until(lambda: not descendants("mcp-server-time"))


def test_a_killed_server_is_restarted_and_the_call_says_so(mcp_settings: Any) -> None:
    settings = mcp_settings("time", "memory")
    settings.mcp_servers["time"] = dataclasses.replace(settings.mcp_servers["time"], trust_read_only_hints=True)
    with Runtime(settings=settings, transcript=False) as rt:
        script = """
from hermes_tools import mcp_time_get_current_time, mcp_memory_create_entities, ToolError
print(mcp_time_get_current_time("UTC").get("note"))
try:
    mcp_memory_create_entities([{"name": "e%d", "entityType": "t", "observations": []}])
    print("created")
except ToolError as exc:
    print("ToolError:", exc)
"""
        first = rt.execute(script % 1)
        assert first.output.splitlines() == ["None", "created"], first.error
        for pid in descendants("mcp-server-time") + descendants("server-memory"):
            os.kill(pid, signal.SIGKILL)
        second = rt.execute(script % 2)
        lines = second.output.splitlines()
        # Read-only: sent again on the new process, with a note. Mutating: not sent again, says so.
        assert "had died; it was restarted and this call ran on the new process" in lines[0]
        assert lines[1].startswith("ToolError: MCP server 'memory' had died")
        assert "not sent again" in lines[1]
        third = rt.execute(script % 3)
        assert third.output.splitlines() == ["None", "created"], third.error


def test_a_failing_server_names_its_command_and_stderr_and_spares_the_rest(mcp_settings: Any) -> None:
    broken = {"command": "sh", "args": ["-c", "echo 'boom: API token missing' >&2; exit 3"]}
    with Runtime(settings=mcp_settings("time", broken=broken), transcript=False) as rt:
        reason = rt.dispatcher.offer.withheld["mcp_broken"]
        assert "MCP server 'broken' (started with sh -c" in reason
        assert "boom: API token missing" in reason
        result = rt.execute("from hermes_tools import mcp_time_get_current_time as now\nprint(now('UTC')['timezone'])")
        assert result.output.strip() == "UTC", result.error
        reply = rt.dispatcher.call_direct("mcp_broken", {})
        assert "boom: API token missing" in reply["error"]["message"]


def test_env_reaches_the_server_never_the_script(mcp_settings: Any, servers: Installed) -> None:
    command = [*servers.command("server-everything"), "stdio"]
    settings = mcp_settings(everything=server_table(command, env={"HERALD_TEST_SECRET": "s3cret-value"}))
    with Runtime(settings=settings, transcript=False) as rt:
        result = rt.execute("""
import os
from hermes_tools import mcp_everything_get_env
print("server:", "s3cret-value" in mcp_everything_get_env()["text"])
print("script:", [k for k, v in os.environ.items() if "s3cret" in v or k == "HERALD_TEST_SECRET"])
""")
        assert result.status == "success", result.error
        assert result.output.splitlines() == ["server: True", "script: []"]


def test_git_server_from_a_script(mcp_settings: Any, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "a.txt").write_text("hello\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (repo / "a.txt").write_text("hello again\n")
    with Runtime(settings=mcp_settings("git"), transcript=False) as rt:
        result = rt.execute(f"""
from hermes_tools import mcp_git_git_status, mcp_git_git_diff_unstaged, mcp_git_git_log
repo = {str(repo)!r}
print("modified:" in mcp_git_git_status(repo)["text"] and "a.txt" in mcp_git_git_status(repo)["text"])
print("+hello again" in mcp_git_git_diff_unstaged(repo)["text"])
print("first" in str(mcp_git_git_log(repo)))
""")
        assert result.output.split() == ["True", "True", "True"], (result.output, result.error)


def test_config_file_tables(tmp_path: Path) -> None:
    from herald.config import ConfigError, load_settings

    config = tmp_path / "c.toml"
    config.write_text(
        '[mcp_servers.time]\ncommand = "uvx"\nargs = ["mcp-server-time"]\nenv = { TZ = "UTC" }\n'
        '[mcp_servers.remote]\nurl = "http://127.0.0.1:9/mcp"\nheaders = { Authorization = "Bearer x" }\n'
    )
    settings = load_settings(config, env={})
    assert settings.mcp_servers["time"].args == ("mcp-server-time",)
    assert dict(settings.mcp_servers["remote"].headers) == {"Authorization": "Bearer x"}
    config.write_text('[mcp_servers.bad]\ncommand = "x"\nurl = "http://y"\n')
    with pytest.raises(ConfigError, match=r"\[mcp_servers.bad\] needs exactly one of command"):
        load_settings(config, env={})
    config.write_text('[mcp_servers.bad]\ncommand = "x"\nargz = []\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_settings(config, env={})
    env = {"HERALD_MCP_SERVERS": json.dumps({"t": {"command": "x"}})}
    env["HERALD_CONFIG"] = str(tmp_path / "none.toml")
    assert load_settings(env=env).mcp_servers["t"].command == "x"


def test_odd_schemas_from_a_server_cannot_break_the_stubs(tmp_path: Path) -> None:
    from herald.config import McpServerSettings
    from herald.tools.mcp.tools import mcp_tools
    from herald.tools.stubgen import render_module

    listed = [
        {"name": "weird-name.v2", "inputSchema": {"type": "object", "properties": {
            "n": {"type": "number", "default": float("inf"), "description": 7, "enum": "abc"},
            "q": True, "items": {"type": "array", "items": {"type": "string"}}}, "required": ["n", "gone"]}},
        {"name": "dashed", "inputSchema": {"type": "object", "properties": {"not-an-identifier": {"type": "string"}}}},
        {"name": "doc", "description": 'say """ and \\ here', "inputSchema": {}},
        {"name": "weird_name_v2", "inputSchema": {"type": "object"}},  # the same name once sanitised
    ]
    tools = mcp_tools(McpServerSettings(name="odd server"), listed)
    names = [t.name for t in tools]
    assert names == ["mcp_odd_server_weird_name_v2", "mcp_odd_server_dashed", "mcp_odd_server_doc",
                     "mcp_odd_server_weird_name_v2_2"]
    by_name = {t.name: t for t in tools}
    assert not by_name["mcp_odd_server_dashed"].sandbox  # direct calls only
    assert by_name["mcp_odd_server_weird_name_v2"].required == ["n"]
    source = render_module([t for t in tools if t.sandbox])
    compile(source, "hermes_tools.py", "exec")
    assert "def mcp_odd_server_weird_name_v2(n: float, q: Any = None, items: Optional[List[str]] = None)" in source


def test_calls_are_budgeted_and_logged_like_any_tool(mcp_settings: Any, tmp_path: Path) -> None:
    transcript = tmp_path / "transcript.jsonl"
    settings = mcp_settings("time").with_overrides({"sandbox.max_tool_calls": 2})
    with Runtime(settings=settings, transcript=transcript) as rt:
        result = rt.execute("""
from hermes_tools import mcp_time_get_current_time as now, ToolError
for zone in ("UTC", "Asia/Tokyo", "Europe/Paris"):
    try:
        print(now(zone)["timezone"])
    except ToolError as exc:
        print("refused:", str(exc)[:23])
""")
    assert result.output.splitlines() == ["UTC", "Asia/Tokyo", "refused: Tool call limit reached"]
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    calls = [r for r in records if r.get("tool") == "mcp_time_get_current_time"]
    assert [r.get("error", {}).get("type") for r in calls] == [None, None, "ToolCallLimit"]
    assert calls[0]["args"] and calls[0]["duration_ms"] >= 0
