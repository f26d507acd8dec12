"""`[mcp_servers.NAME]` tables (as Claude's `mcpServers` and Codex's `mcp_servers`): the MCP
servers whose tools Herald offers, parsed into settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class McpServerSettings:
    """One MCP server whose tools Herald offers as `mcp_<server>_<tool>`: a command Herald starts
    (stdio) or a `url` (streamable HTTP). `env` reaches the server's process only, never a script."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    startup_timeout_sec: float = 30.0
    tool_timeout_sec: float = 120.0
    # A server's readOnlyHint is its own claim: under the read-only profile (and plan mode) its
    # tools count as changing state unless the user trusts them here (by name, or every hint).
    read_only_tools: tuple[str, ...] = ()
    trust_read_only_hints: bool = False
    # Listing its tools: a server that takes longer, or lists more, is withheld with the reason.
    list_timeout_sec: float = 10.0
    max_tools: int = 1000
    max_listing_bytes: int = 8_000_000
    # One call's answer beyond this is cut (head + tail) and spilled whole to a file.
    max_result_bytes: int = 1_000_000


def parse_mcp_servers(value: Any, source: str) -> dict[str, McpServerSettings]:
    """`{name: {command, args, env, cwd} | {url, headers}}` (a TOML table, or JSON text from the
    environment) as settings; anything else is a ConfigError naming the server and the key."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise ConfigError(
                f"{source}: mcp_servers must be a table (JSON in the environment), got {value!r}"
            ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: mcp_servers must be a table of servers, e.g. [mcp_servers.time]")
    servers: dict[str, McpServerSettings] = {}
    fields = {f.name for f in dataclasses.fields(McpServerSettings)} - {"name"}
    for name, table in value.items():
        where = f"{source}: [mcp_servers.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table with command (and args, env, cwd) or url (and headers)")
        unknown = sorted(set(table) - fields)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}. Known keys: {', '.join(sorted(fields))}")
        if bool(table.get("command")) == bool(table.get("url")):
            raise ConfigError(f"{where} needs exactly one of command (a program to start) or url (streamable HTTP)")
        try:
            servers[str(name)] = McpServerSettings(
                name=str(name),
                command=_text(table.get("command", "")),
                args=tuple(_text(a) for a in _items(table.get("args", []))),
                env=tuple((str(k), _text(v)) for k, v in _pairs(table.get("env", {}))),
                cwd=_text(table.get("cwd", "")),
                url=_text(table.get("url", "")),
                headers=tuple((str(k), _text(v)) for k, v in _pairs(table.get("headers", {}))),
                enabled=bool(table.get("enabled", True)),
                startup_timeout_sec=_positive(table.get("startup_timeout_sec", 30.0)),
                tool_timeout_sec=_positive(table.get("tool_timeout_sec", 120.0)),
                read_only_tools=tuple(_text(t) for t in _items(table.get("read_only_tools", []))),
                trust_read_only_hints=_flag(table.get("trust_read_only_hints", False), "trust_read_only_hints"),
                list_timeout_sec=_positive(table.get("list_timeout_sec", 10.0)),
                max_tools=_count(table.get("max_tools", 1000), "max_tools"),
                max_listing_bytes=_count(table.get("max_listing_bytes", 8_000_000), "max_listing_bytes"),
                max_result_bytes=_count(table.get("max_result_bytes", 1_000_000), "max_result_bytes"),
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return servers


def _text(value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise TypeError(f"expected a string, got {value!r}")
    return str(value)


def _items(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"args and read_only_tools must be lists of strings, got {value!r}")
    return value


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{key} must be true or false, got {value!r}")
    return value


def _positive(value: Any) -> float:
    seconds = float(value)
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"timeouts are seconds above 0, got {value!r}")
    return seconds


def _count(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{key} must be a whole number above 0, got {value!r}")
    return value


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    if not isinstance(value, dict):
        raise TypeError(f"env and headers must be tables of strings, got {value!r}")
    return list(value.items())
