"""The default tool set: every built-in tool family, and the tools of the settings' MCP servers.
It sits above the tools it assembles (tools/ holds the Tool type and the families; none of them
knows the others)."""

from __future__ import annotations

from ..config import Settings
from ..tools import browser, files, search, terminal, web, webcrawl, websearch
from ..tools.mcp.tools import register_mcp_tools
from ..tools.registry import Registry


def default_registry(settings: Settings | None = None) -> Registry:
    """Every built-in tool, and with `settings` the tools of its MCP servers (`mcp_<server>_<tool>`)."""
    registry = Registry([*files.TOOLS, *search.TOOLS, *terminal.TOOLS, *browser.TOOLS, *websearch.TOOLS, *web.TOOLS,
                         *webcrawl.TOOLS])
    if settings is not None and settings.mcp_servers:
        register_mcp_tools(registry, settings)
    return registry
