"""The MCP client, a tool family, on the official `mcp` SDK (the `herald[mcp]` extra), which is
async: it runs on an event loop of its own thread (loop.py) and Herald's threads wait on it.

`[mcp_servers.NAME]` servers' tools are registered as tools named `mcp_<server>_<tool>`
(tools.py) and called through the Dispatcher like any other tool; each server is one connection
(connection.py), started on first use, reused for the session, restarted when it died, closed
with the Runtime. The server side, `herald mcp serve`, is the CLI's (cli/mcpserve.py).
"""
