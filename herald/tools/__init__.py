"""Tools: one registry and one module per tool family."""

from .context import ToolContext
from .registry import Registry, Tool, ToolError

__all__ = ["Registry", "Tool", "ToolContext", "ToolError"]
