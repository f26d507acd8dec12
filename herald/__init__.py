"""Herald: a sandboxed code-execution agent built around programmatic tool calling."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import Agent, AgentResult
    from .config import Settings, load_settings
    from .runtime import ExecutionResult, Runtime

__all__ = ["Agent", "AgentResult", "ExecutionResult", "Runtime", "Settings", "load_settings"]
__version__ = "0.1.0"

# Imported on first use: `herald exec` needs the Runtime but not the agent loop and its model
# providers (about a third of the command's start-up), and `herald --version` needs neither.
_HOMES = {"Agent": ".agent", "AgentResult": ".agent", "Settings": ".config", "load_settings": ".config",
          "ExecutionResult": ".runtime", "Runtime": ".runtime"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'herald' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value
