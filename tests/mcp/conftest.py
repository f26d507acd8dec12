"""MCP tests: the SDK must be installed (herald[mcp]) and the third-party servers are installed
once into a shared cache (servers.py); what cannot be installed skips with the reason."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.config import parse_mcp_servers

from .servers import Installed, ensure


@pytest.fixture(scope="session")
def servers() -> Installed:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")
    return ensure()


def server_table(command: list[str], **extra: Any) -> dict[str, Any]:
    return {"command": command[0], "args": command[1:], **extra}


@pytest.fixture
def mcp_settings(settings: Settings, servers: Installed, tmp_path: Path) -> Any:
    """Settings with the named servers configured: mcp_settings("time", "memory", git={...})."""

    def make(*names: str, **tables: dict[str, Any]) -> Settings:
        config: dict[str, Any] = dict(tables)
        for name in names:
            if name == "time":
                config["time"] = server_table(servers.command("mcp-server-time"))
            elif name == "git":
                config["git"] = server_table(servers.command("mcp-server-git"))
            elif name == "memory":
                config["memory"] = server_table(servers.command("server-memory"),
                                                env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")})
            elif name == "everything":
                config["everything"] = server_table([*servers.command("server-everything"), "stdio"])
        updated = settings.with_overrides({})
        updated.mcp_servers = parse_mcp_servers(config, "test")
        return updated

    return make


def descendants(marker: str) -> list[int]:
    """Processes below this one whose command line contains `marker`."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdlines[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    me, found = os.getpid(), []
    for pid, cmdline in cmdlines.items():
        if marker not in cmdline or "<defunct>" in cmdline:
            continue
        up, seen = parents.get(pid), 0
        while up and up != me and seen < 64:
            up, seen = parents.get(up), seen + 1
        if up == me:
            found.append(pid)
    return found
