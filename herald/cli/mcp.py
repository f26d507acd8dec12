"""`herald mcp serve | list`: Herald as an MCP server, and the MCP servers Herald uses.

`serve` offers execute_code (and with --direct-tools the direct tools) over stdio, or over
streamable HTTP with --http HOST:PORT, with the same flags as `exec`. `list` starts each
configured server ([mcp_servers.NAME]) and shows its tools, or why it failed (and renews the
tool listings sessions start from).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .common import (
    UsageError,
    add_runtime_options,
    console,
    ensure_data_dir,
    escape,
    load,
    open_backend,
    runtime_flags,
)

INSTALL = "the MCP SDK is not installed: pip install 'herald[mcp]'"


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("mcp", parents=parents, help="serve Herald over MCP, or list the MCP servers Herald uses")
    mcp_sub = p.add_subparsers(dest="mcp_command", required=True)
    serve = mcp_sub.add_parser("serve", parents=parents, help="offer execute_code to MCP clients (stdio by default)")
    add_runtime_options(serve)
    serve.add_argument(
        "--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio"
    )
    serve.add_argument("--direct-tools", action="store_true", help="offer the direct tools too, not only execute_code")
    serve.add_argument("--token-file", metavar="FILE",
                       help="with --http: the clients' bearer tokens, NAME:TOKEN lines (mode 600); default: "
                            "DATA_DIR/mcp/tokens, generated on first use")
    serve.add_argument("--no-auth", action="store_true",
                       help="with --http on a loopback address only: no authentication (any local user can connect)")
    serve.set_defaults(func=cmd_serve)
    sessions = mcp_sub.add_parser("sessions", parents=parents,
                                  help="the clients of each running herald mcp serve --http and their runs")
    sessions.add_argument("--json", action="store_true", help="print the servers' status as JSON")
    sessions.set_defaults(func=cmd_sessions)
    listing = mcp_sub.add_parser("list", parents=parents, help="start each configured MCP server and show its tools")
    listing.add_argument("--json", action="store_true", help="print the servers, their tools and status as JSON")
    listing.set_defaults(func=cmd_list)


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL) from None


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--http {text}: expected HOST:PORT, e.g. --http 127.0.0.1:8765")
    return host.strip("[]"), int(port)


def cmd_serve(args: argparse.Namespace) -> int:
    from ..policy import Policy
    from ..runtime import Runtime
    from ..runtime.sandbox.errors import SandboxStartError
    from .mcpauth import auth_setup
    from .mcplimits import Clients, status_path
    from .mcpserve import Approvals, build_server, serve_http, serve_stdio

    _require_sdk()
    address = _address(args.http) if args.http else None
    if address is None and (args.no_auth or args.token_file):
        raise UsageError("--no-auth and --token-file are for --http: over stdio the client that started Herald "
                         "is the only one")
    settings = load(args, runtime_flags(args))
    ensure_data_dir(settings)
    auth = clients = None
    if address is not None:
        auth = auth_setup(settings, *address, no_auth=args.no_auth, token_file=args.token_file)
        serve = settings.serve
        clients = Clients(max_concurrent=serve.max_concurrent_runs, per_minute=serve.max_runs_per_minute,
                          status=status_path(settings.data_dir),
                          about={"url": f"http://{address[0]}:{address[1]}/mcp", "auth": serve.auth if
                                 not args.no_auth else "none", "session_scope": serve.session_scope})
    backend = open_backend(settings.backend, settings, args.cwd)
    # The approver for the policy's `ask` rules: it asks the MCP client (elicitation).
    approvals = Approvals()
    try:
        try:
            runtime = Runtime(backend, settings=settings, policy=Policy.from_settings(settings, approve=approvals))
        except (ValueError, SandboxStartError) as exc:
            raise UsageError(str(exc)) from None
        with runtime:
            server = build_server(runtime, direct_tools=args.direct_tools, approvals=approvals, clients=clients,
                                  session_scope=settings.serve.session_scope if address else "shared")
            try:
                if address is None or auth is None:
                    serve_stdio(server)
                else:
                    err = console(stderr=True)
                    err.print(f"herald: serving MCP at http://{address[0]}:{address[1]}/mcp", style="dim")
                    print(f"herald: {auth.describe}", file=sys.stderr, flush=True)  # a token is printed whole
                    serve_http(server, *address, auth=auth if auth.verifier else None,
                               max_request_bytes=settings.serve.max_request_bytes)
            except KeyboardInterrupt:  # Ctrl-C: the Runtime and backend are closed on the way out
                return 130
    finally:
        if clients is not None:
            clients.close()
        backend.close()
    return 0


def server_status(settings: Any) -> list[dict[str, Any]]:
    """Each configured server: started now, its tools (Herald's names) or the error."""
    from ..tools.mcp.connection import McpConnection, McpServerError
    from ..tools.mcp.tools import list_and_keep, mcp_tools, read_only_claim

    rows = []
    for name, server in settings.mcp_servers.items():
        connection = McpConnection(server)
        row: dict[str, Any] = {"name": name, "transport": "http" if server.url else "stdio",
                               "target": connection.describe, "enabled": server.enabled}
        if not server.enabled:
            row["status"] = "disabled"
            rows.append(row)
            continue
        try:
            listed = list_and_keep(connection, settings)  # renews the listing later sessions start from
            row["status"] = "ok"
            row["tools"] = [{"name": t.name, "mcp_name": spec.get("name"), "read_only": not t.mutates,
                             "read_only_hint": read_only_claim(server, spec)[0],
                             "scripts": t.sandbox, "summary": t.description.splitlines()[0]}
                            for t, spec in zip(mcp_tools(server, listed), listed, strict=True)]
        except McpServerError as exc:
            row["status"] = "failed"
            row["error"] = str(exc)
        finally:
            connection.close()
        rows.append(row)
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    _require_sdk()
    settings = load(args)
    rows = server_status(settings)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0 if all(r["status"] != "failed" for r in rows) else 1
    out = console()
    if not rows:
        out.print("No MCP servers configured: add [mcp_servers.NAME] tables (command/args/env/cwd or url/headers) "
                  "to the config file.")
        return 0
    for row in rows:
        style = {"ok": "green", "failed": "red"}.get(row["status"], "yellow")
        out.print(
            f"[bold]{escape(row['name'])}[/] ({row['transport']}: {escape(row['target'])}) [{style}]{row['status']}[/]"
        )
        if row["status"] == "failed":
            out.print(f"  {escape(row['error'])}", style="red")
        for tool in row.get("tools", []):
            flags = ("read-only (trusted)" if tool["read_only"] else
                     "says read-only, not trusted: counts as changing state" if tool["read_only_hint"] else
                     "may change state") + ("" if tool["scripts"] else ", direct only")
            out.print(f"  [cyan]{escape(tool['name'])}[/] ({flags}): {escape(tool['summary'])}")
    return 0 if all(r["status"] != "failed" for r in rows) else 1


def cmd_sessions(args: argparse.Namespace) -> int:
    from .mcplimits import live_servers

    settings = load(args)
    servers = live_servers(settings.data_dir)
    if args.json:
        print(json.dumps(servers, indent=2, ensure_ascii=False))
        return 0
    out = console()
    if not servers:
        out.print(f"No herald mcp serve --http is running with the data directory {escape(str(settings.data_dir))}.")
        return 0
    now = time.time()
    for server in servers:
        out.print(f"[bold]{escape(server.get('url', '?'))}[/] (pid {server.get('pid')}, auth {server.get('auth')}, "
                  f"kernel sessions per {server.get('session_scope')})")
        if not server.get("clients"):
            out.print("  no client yet", style="dim")
        for client in server.get("clients", []):
            last = client.get("last_call")
            ago = f", last call {now - last:.0f} s ago" if isinstance(last, int | float) else ""
            out.print(f"  [cyan]{escape(client['identity'])}[/]: {len(client['mcp_sessions'])} MCP session(s), "
                      f"{client['runs']} call(s), {client['refused']} refused{ago}")
            for run in client.get("in_flight", []):
                kernel = f" in kernel session {run['kernel_session']!r}" if run.get("kernel_session") else ""
                out.print(f"    #{run['id']} {escape(run['tool'])}{escape(kernel)}: {run['state']} for "
                          f"{now - run['since']:.0f} s (MCP session {escape(run['mcp_session'][:12])})")
    return 0
