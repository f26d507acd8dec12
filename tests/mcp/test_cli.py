"""`herald mcp list` and `herald tools` with MCP servers configured, run as a person runs them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli._herald import run

from .servers import Installed


def _config(path: Path, servers: Installed) -> Path:
    time_server = servers.command("mcp-server-time")
    path.write_text(
        f"[mcp_servers.time]\ncommand = {json.dumps(time_server[0])}\n"
        "[mcp_servers.broken]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'boom: no token' >&2; exit 3\"]\n"
    )
    return path


def test_mcp_list_shows_tools_and_failures(tmp_path: Path, workspace: Path, servers: Installed) -> None:
    config = _config(tmp_path / "c.toml", servers)
    proc = run(["mcp", "list", "--json", "--config", str(config)], cwd=workspace, home=tmp_path)
    assert proc.returncode == 1, proc.stderr  # one server failed
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["time"]["status"] == "ok"
    tools = {t["name"]: t for t in rows["time"]["tools"]}
    assert tools["mcp_time_get_current_time"]["read_only"] is False  # its readOnlyHint is not trusted
    assert tools["mcp_time_get_current_time"]["read_only_hint"] is True
    assert tools["mcp_time_get_current_time"]["mcp_name"] == "get_current_time"
    assert rows["broken"]["status"] == "failed"
    assert "boom: no token" in rows["broken"]["error"]
    text = run(["mcp", "list", "--config", str(config)], cwd=workspace, home=tmp_path)
    assert "mcp_time_convert_time (says read-only, not trusted: counts as changing state)" in text.stdout
    assert "boom: no token" in text.stdout


def test_herald_tools_lists_mcp_stubs(tmp_path: Path, workspace: Path, servers: Installed) -> None:
    config = _config(tmp_path / "c.toml", servers)
    proc = run(["tools", "--config", str(config)], cwd=workspace, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "mcp_time_get_current_time(timezone: str) -> Dict[str, Any]" in proc.stdout
    assert "mcp_broken" in proc.stdout and "boom: no token" in proc.stdout  # withheld, with the reason


def test_mcp_serve_bad_address_is_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    proc = run(["mcp", "serve", "--http", "nowhere"], cwd=workspace, home=tmp_path)
    assert proc.returncode == 2
    assert "expected HOST:PORT" in proc.stderr
