"""MCP servers' tools as Herald tools: `mcp_<server>_<tool>`, direct tools and script stubs.

Each tool's parameters are its `inputSchema` (the stubs' typed signature and docstring come from
it), its return type comes from `outputSchema` when present, and a tool without `readOnlyHint`
counts as mutating (`Tool.mutates`, for permission profiles) unless the user trusts it as read-only in
the server's table: a server's `readOnlyHint` is shown, never trusted by itself. An answer
beyond the server's `max_result_bytes` is cut (head + tail) and spilled whole to a file. Calls go through the Dispatcher
like any other tool's; the handler finds the session's connections in the ToolContext cache,
where they are made on first use and closed with the Runtime.

Which tools a server has is known before its first call: the listing is kept in
`data_dir/mcp/`, keyed on the server's settings, so a session starts a server only when a tool
of it is called. Without a kept listing the server is started once to list its tools;
`herald mcp list` lists every server afresh and renews what is kept. A listing past the server's
limits (max_tools, max_listing_bytes) is kept as that verdict, so later sessions withhold the
server at once; one that took too long (list_timeout_sec) is tried again by the next session.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import keyword
import logging
import os
import re
import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict

from ...backends.shell import current_cancel
from ...capture import CappedCapture
from ...config import McpServerSettings, Settings
from ...deadlines import DeadlinePassed
from ..context import ToolContext
from ..registry import Registry, Tool, ToolError
from ..stubgen import render_stub
from .connection import STOP_TIMEOUT, McpConnection, McpListingTooLarge, McpServerError

if TYPE_CHECKING:
    from mcp.types import CallToolResult

log = logging.getLogger(__name__)
CACHE_KEY = "mcp.connections"
TOO_LARGE = "listing_too_large"  # a kept listing that is this verdict, not tools
PREFIX = "mcp_"


def tool_name(server: str, tool: str) -> str:
    """`mcp_<server>_<tool>` as a Python identifier: other characters become `_`."""
    return PREFIX + _ident(server) + "_" + _ident(tool)


def _ident(text: str) -> str:
    return re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "x"


def connections(ctx: ToolContext) -> dict[str, McpConnection]:
    """The session's MCP connections (none started yet), made on first use, closed with it."""
    with ctx.cache_lock:
        found: dict[str, McpConnection] | None = ctx.cache.get(CACHE_KEY)
        if found is None:
            found = {name: McpConnection(server) for name, server in ctx.settings.mcp_servers.items()}
            ctx.cache[CACHE_KEY] = found

            def close_all() -> None:
                # Side by side: the SDK gives each stdio server 2 s to exit once its stdin
                # closes, and the session's end must not wait that long once per server.
                closing = [threading.Thread(target=c.close, name="herald-mcp-close", daemon=True)
                           for c in found.values()]
                for thread in closing:
                    thread.start()
                for thread in closing:
                    thread.join(STOP_TIMEOUT + 1)

            ctx.closers.append(close_all)
        return found


def register_mcp_tools(registry: Registry, settings: Settings) -> dict[str, str]:
    """Register every enabled server's tools; returns {server: why its tools are missing}. A
    server that cannot be listed is registered as one unavailable tool `mcp_<server>` whose
    reason names the failure, so the other tools work and `herald tools` shows why."""
    problems: dict[str, str] = {}
    for name, server in settings.mcp_servers.items():
        if not server.enabled:
            continue
        try:
            listed = cached_listing(server, settings)
        except (McpServerError, DeadlinePassed) as exc:  # that server's tools withheld, with the reason
            reason = str(exc)
            if isinstance(exc, DeadlinePassed):
                reason += (" when the run's time limit was reached: its tools are not offered in this run "
                           "(the next one lists them again)")
            problems[name] = reason
            registry.register(_broken(server, reason, set(registry.names())))
            continue
        for tool in mcp_tools(server, listed, taken=set(registry.names())):
            registry.register(tool)
    return problems


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`, ...: two names may be the same once sanitised."""
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    taken.add(candidate)
    return candidate


def _broken(server: McpServerSettings, reason: str, taken: set[str]) -> Tool:
    def handler(args: dict[str, Any], ctx: ToolContext) -> Any:
        raise McpServerError(reason)

    return Tool(
        name=_unique(PREFIX + _ident(server.name), taken), description=f"The tools of MCP server {server.name!r}.",
        parameters={"type": "object", "properties": {}}, handler=handler, sandbox=False,
        unavailable=lambda settings: reason,
    )


def cached_listing(server: McpServerSettings, settings: Settings) -> list[dict[str, Any]]:
    """The server's tools as MCP dicts (by alias: inputSchema, ...), kept per server settings."""
    path = _listing_path(server, settings)
    try:
        if path.stat().st_size <= server.max_listing_bytes:
            listed = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(listed, list) and len(listed) <= server.max_tools:
                return listed
            if isinstance(listed, dict) and isinstance(listed.get(TOO_LARGE), str):
                raise McpListingTooLarge(f"{listed[TOO_LARGE]} (as listed earlier; `herald mcp list` lists it again)")
    except (OSError, ValueError):
        pass
    connection = McpConnection(server)
    try:
        return list_and_keep(connection, settings)
    finally:
        connection.close()


def list_and_keep(connection: McpConnection, settings: Settings) -> list[dict[str, Any]]:
    """List the (started) server's tools now and keep the listing for later sessions; a listing
    past the server's limits is kept as that verdict (listing it costs the time the limits cap)."""
    try:
        listed = connection.list_tools()
    except McpListingTooLarge as exc:
        _keep(connection.server, settings, {TOO_LARGE: str(exc)})
        raise
    _keep(connection.server, settings, listed)
    return listed


def _keep(server: McpServerSettings, settings: Settings, listing: list[dict[str, Any]] | dict[str, str]) -> None:
    path = _listing_path(server, settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(listing), encoding="utf-8")
    except OSError as exc:  # a read-only data dir costs a start per session, nothing more
        log.warning("could not keep the tool listing of MCP server %s: %s", server.name, exc)


def _listing_path(server: McpServerSettings, settings: Settings) -> Path:
    return settings.data_dir / "mcp" / f"{_ident(server.name)}-{_settings_key(server)}.json"


def _settings_key(server: McpServerSettings) -> str:
    return hashlib.sha256(repr(server).encode()).hexdigest()[:16]


def mcp_tools(server: McpServerSettings, listed: list[dict[str, Any]], taken: set[str] | None = None) -> list[Tool]:
    taken = set(taken or ())
    tools = []
    for spec in listed:
        if isinstance(spec, dict):
            tools.append(_tool(server, spec, _unique(tool_name(server.name, str(spec.get("name", ""))), taken)))
    return tools


def _tool(server: McpServerSettings, spec: dict[str, Any], name: str) -> Tool:
    remote = str(spec.get("name", ""))
    hinted, read_only = read_only_claim(server, spec)
    parameters = _parameters(spec.get("inputSchema"))
    output = spec.get("outputSchema") if isinstance(spec.get("outputSchema"), dict) else None
    # A parameter that is not a Python identifier cannot be a stub's keyword: direct calls only.
    scriptable = all(p.isidentifier() and not keyword.iskeyword(p) and p not in ("_call", "args")
                     for p in parameters["properties"])
    texts = [spec.get("description"), spec.get("title"), f"Tool {remote} of MCP server {server.name}."]
    description = next(t for t in texts if isinstance(t, str) and t.strip()).strip()
    description += f"\n(MCP server {server.name!r}, tool {remote!r}; {_trust_note(server, hinted, read_only)}.)"

    def handler(args: dict[str, Any], ctx: ToolContext) -> Any:
        connection = connections(ctx).get(server.name)
        if connection is None:
            raise ToolError(f"{name}: MCP server {server.name!r} is not configured in this session.")
        result, note = connection.call(remote, args, read_only=read_only, cancel=current_cancel())
        return capped_result(_result(name, result, note), server.max_result_bytes, ctx)

    return _scriptable(Tool(
        name=name, description=description, parameters=parameters, handler=handler,
        returns=None if output else McpTextResult, output_schema=output, sandbox=scriptable, mutates=not read_only,
    ))


def read_only_claim(server: McpServerSettings, spec: dict[str, Any]) -> tuple[bool, bool]:
    """(the server says the tool is read-only, Herald takes it as read-only). The server's
    readOnlyHint is only a claim: a tool counts as read-only when the user trusts it in the
    server's table (`read_only_tools`, or `trust_read_only_hints` for every hinted tool)."""
    annotations = spec.get("annotations")
    hinted = isinstance(annotations, dict) and annotations.get("readOnlyHint") is True
    trusted = str(spec.get("name", "")) in server.read_only_tools or (hinted and server.trust_read_only_hints)
    return hinted, trusted


def _trust_note(server: McpServerSettings, hinted: bool, read_only: bool) -> str:
    if read_only:
        return "read-only, trusted in Herald's config"
    if hinted:
        return (f"the server says it is read-only (readOnlyHint), which Herald does not trust: it counts as changing "
                f"state; the config's [mcp_servers.{server.name}] read_only_tools can trust it")
    return "may change state"


def _parameters(schema: Any) -> dict[str, Any]:
    """The inputSchema as a Tool's parameters: an object whose `required` names only properties,
    each property a schema whose parts the stubs use (description, enum, default) are well-formed:
    a server's schema is untrusted, and one bad default must not break every script's stubs."""
    out: dict[str, Any] = dict(schema) if isinstance(schema, dict) else {}
    props = out.get("properties")
    out["type"] = "object"
    out["properties"] = {str(k): _property(v) for k, v in props.items()} if isinstance(props, dict) else {}
    required = out.get("required")
    out["required"] = [r for r in required if r in out["properties"]] if isinstance(required, list) else []
    return out


def _property(schema: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(schema) if isinstance(schema, dict) else {}
    if not isinstance(out.get("description", ""), str):
        out.pop("description")
    if "enum" in out and not isinstance(out["enum"], list):
        out.pop("enum")
    if "default" in out:
        try:  # a literal the stub can write: finite JSON (no NaN, no Infinity)
            json.dumps(out["default"], allow_nan=False)
        except (TypeError, ValueError):
            out.pop("default")
    return out


def _scriptable(tool: Tool) -> Tool:
    """`tool`, or a direct-only copy when its stub would not compile (checked before the
    session's hermes_tools is written: one server's odd tool must not break the others)."""
    if not tool.sandbox:
        return tool
    try:
        compile(render_stub(tool), f"<stub of {tool.name}>", "exec")
    except (ValueError, SyntaxError, TypeError, AttributeError) as exc:
        log.warning("MCP tool %s is offered to direct calls only: its stub cannot be made (%s)", tool.name, exc)
        return dataclasses.replace(tool, sandbox=False)
    return tool


class McpTextResult(TypedDict):
    """The answer of an MCP tool that declares no outputSchema."""

    text: Annotated[str, "the tool's text answer, often JSON: use json_parse"]
    content: NotRequired[Annotated[list[dict[str, Any]], "its other blocks (images, audio), data omitted"]]
    truncated: NotRequired[Literal[True]]
    bytes: NotRequired[int]
    spill_path: NotRequired[str]
    note: NotRequired[str]


def _result(name: str, result: CallToolResult, note: str | None) -> Any:
    texts = [str(getattr(block, "text", "")) for block in result.content if getattr(block, "type", "") == "text"]
    if result.is_error:
        message = "\n".join(texts).strip() or "the MCP tool reported an error without a message"
        raise ToolError(f"{name}: {message}" + (f" (Note: {note})" if note else ""), "McpToolError")
    if result.structured_content is not None:
        value: Any = result.structured_content
        out = dict(value) if isinstance(value, dict) else {"result": value}
    else:
        out = {"text": "\n".join(texts)}
        other = [block.model_dump(mode="json", exclude_none=True) for block in result.content
                 if getattr(block, "type", "") != "text"]
        for block in other:  # images and audio: say what they are, not megabytes of base64
            if isinstance(block.get("data"), str):
                block["data"] = f"<{len(block['data'])} base64 characters omitted>"
        if other:
            out["content"] = other
    if note:
        out["note"] = note
    return out



def capped_result(out: dict[str, Any], limit: int, ctx: ToolContext) -> dict[str, Any]:
    """`out` as it is when its JSON fits in `limit` bytes; else its text (the JSON of a
    structured answer) cut to a head and a tail, the whole of it spilled to a file charged to
    the run's spill budget, as a terminal command's output is."""
    text = out["text"] if set(out) <= {"text", "note"} and isinstance(out.get("text"), str) else None
    data = (text if text is not None else json.dumps(out, ensure_ascii=False)).encode("utf-8", "replace")
    if len(data) <= limit:
        return out
    suffix = "txt" if text is not None else "json"
    capture = CappedCapture(limit, spill_dir=ctx.spill_dir,
                            spill_name=f"mcp-{os.getpid()}-{secrets.token_hex(4)}.{suffix}")
    try:
        capture.feed(data)
    finally:
        capture.close()
    cut: dict[str, Any] = {"text": capture.text("answer"), "truncated": True, "bytes": len(data)}
    if capture.spill_path is not None:
        cut["spill_path"] = str(capture.spill_path)
    notes = [out["note"]] if out.get("note") else []
    if text is None:
        notes.append("the structured answer was larger than the server's max_result_bytes: this is its JSON, cut; "
                     "read the spill file for the whole of it")
    if notes:
        cut["note"] = " ".join(notes)
    return cut
