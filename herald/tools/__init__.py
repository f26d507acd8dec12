"""Tools: one registry and one module per tool family."""

from .registry import Registry, Tool, ToolContext, ToolError

__all__ = ["Registry", "Tool", "ToolContext", "ToolError"]
