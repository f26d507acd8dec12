"""A setting's value as its type: from TOML, an environment variable's text or an override."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .budgets import BUDGETS, check_budgets
from .errors import ConfigError
from .mcp_servers import parse_mcp_servers

# web.search_provider's values; "auto" takes the first of the others that is configured, in this order.
SEARCH_PROVIDERS = ("auto", "searxng", "firecrawl", "brave", "tavily", "exa")

# Durations where 0 would stop everything at once rather than mean "no limit".
MUST_BE_POSITIVE = frozenset({"sandbox.timeout", "terminal.timeout", "agent.request_timeout"})


def _budgets(value: Any, bad: Any) -> dict[str, float]:
    """`{name = limit}` (TOML), or "name=limit,name=limit" (environment, -c)."""

    if isinstance(value, str):
        pairs = [p.partition("=") for p in value.split(",") if p.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise bad(f"NAME=LIMIT pairs ({', '.join(BUDGETS)})")
        try:
            value = {k.strip(): float(v) for k, _, v in pairs}
        except ValueError:
            raise bad("NAME=LIMIT pairs with numbers as limits") from None
    if not isinstance(value, dict):
        raise bad(f"a table of budgets ({', '.join(BUDGETS)})")
    try:
        return check_budgets(value)
    except ValueError as exc:
        raise bad(f"a table of budgets: {exc}") from None


Bad = Callable[[str], ConfigError]  # what a setting must be -> the error that says so
_CHOICES = {
    "browser.network": ("backend", "local"),
    "policy.profile": ("read-only", "workspace-write", "full"),
    "serve.auth": ("token", "oauth", "none"),
    "serve.session_scope": ("client", "identity", "shared"),
    "web.search_provider": SEARCH_PROVIDERS,
}


def coerce(key: str, value: Any, current: Any, source: str) -> Any:
    """`value` (from `source`: a file, the environment, an override) as setting `key`, whose
    default is `current`: its type, or a ConfigError that says what it must be."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{source}: setting '{key}' must be {expected}, got {value!r}")

    if key == "sandbox.budgets":
        return _budgets(value, bad)
    if key == "mcp_servers":
        return parse_mcp_servers(value, source)
    if key == "tools":
        return _tool_names(value, bad)
    if isinstance(current, bool):
        return _boolean(value, bad)
    if isinstance(current, int | float):
        return _number(key, value, float if isinstance(current, float) else int, bad)
    if isinstance(current, Path):
        return Path(str(value)).expanduser()
    if isinstance(current, list):
        return _strings(value, bad)
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        raise bad("one of " + ", ".join(f'"{choice}"' for choice in choices))
    if isinstance(value, str):
        return value
    raise bad("a string")


def _tool_names(value: Any, bad: Bad) -> list[str]:
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list | tuple) and all(isinstance(t, str) for t in value):
        return list(value)
    raise bad("a list of tool names")


def _boolean(value: Any, bad: Bad) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return value.lower() in {"1", "true", "yes", "on"}
    raise bad("true or false")


def _number(key: str, value: Any, kind: type[int] | type[float], bad: Bad) -> int | float:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise bad("a number") from None
    if not math.isfinite(number):
        raise bad("a finite number")
    if key in MUST_BE_POSITIVE and number <= 0:
        raise bad("a number above 0")
    if number < 0:
        raise bad("zero or more")
    return number


def _strings(value: Any, bad: Bad) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list):
        return [str(v) for v in value]
    raise bad("a list")
