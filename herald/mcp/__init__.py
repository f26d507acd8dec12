"""MCP both ways, on the official `mcp` SDK (the `herald[mcp]` extra), which is async: it runs
on an event loop of its own thread (loop.py) and Herald's threads wait on it.

- Client: `[mcp_servers.NAME]` servers' tools are registered as tools named
  `mcp_<server>_<tool>` (tools.py) and called through the Dispatcher like any other tool;
  each server is one connection (connection.py), started on first use, reused for the session,
  restarted when it died, closed with the Runtime.
- Server: `herald mcp serve` offers execute_code (and the direct tools) to MCP clients (serve.py).
"""
