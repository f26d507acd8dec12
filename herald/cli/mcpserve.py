"""`herald mcp serve`: a Runtime offered to MCP clients, over stdio or streamable HTTP.

Tools: `execute_code` (its description generated from the session's stubs, as the agent's is;
`session` runs it in a kernel session whose globals persist, `reset` starts that one afresh) and,
with `direct_tools`, every direct tool the session offers, with its own schema and a
`readOnlyHint` from `Tool.mutates`. While a script runs, each of its tool calls is sent as a
progress notification (when the client asked for progress); a cancellation from the client
interrupts the script (its whole tree is killed) and the call ends. The result is the
ExecutionResult as structured content, plus a text rendering of it.

Runs are serialised, as on the Runtime, and taken by the waiting clients in turn; direct calls
run alongside them on worker threads. Over HTTP each call is admitted against its client's
limits (mcplimits.py), and a client's kernel sessions are named by the Runtime after the client
(`kernel_name`), so no other client can reach them. The transcript says which client made each
call (records `mcp_call`, `mcp_done`, `mcp_refused` with `client`).

`Approvals` is the approver for the policy's `ask` rules: it asks the client of the call being
served through MCP elicitation (a yes/no form), or, when that client cannot be asked, raises
with the reason, so the call is refused saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.server.context import ServerRequestContext
    from mcp.types import (
        CallToolRequestParams,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
    )

    from ..runtime import Runtime
    from .mcpauth import AuthSetup
    from .mcplimits import Clients

EXECUTE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "The Python script. Print what you want to see."},
        "session": {"type": "string", "description": "Run in this kernel session: its globals persist across calls."},
        "reset": {"type": "boolean", "description": "With session: start that session afresh.", "default": False},
    },
    "required": ["code"],
}
INTERRUPT_EVERY = 0.2  # seconds: an interrupt that came before the run started is sent again
APPROVAL_TIMEOUT = 600.0  # seconds a person has to answer an approval form
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Run this call?", "default": False}},
    "required": ["approve"],
}
_direct_request: contextvars.ContextVar[Any] = contextvars.ContextVar("herald_mcp_request", default=None)


class Approvals:
    """`approve(call) -> bool` for the policy's `ask` rules (call: tool, args, rule, origin).

    A direct call asks the client that made it; a script's call asks the client whose
    execute_code runs the script (runs are serialised, so there is one)."""

    def __init__(self) -> None:
        self._run: tuple[Any, asyncio.AbstractEventLoop] | None = None

    @contextlib.contextmanager
    def running(self, ctx: Any, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        self._run = (ctx, loop)
        try:
            yield
        finally:
            self._run = None

    def __call__(self, call: Any) -> bool:
        current = _direct_request.get() or self._run
        if current is None:
            raise RuntimeError("no MCP request is being served, so there is no one to ask")
        ctx, loop = current
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            raise RuntimeError("the MCP client does not support elicitation, so no one can be asked; "
                               "allow the call with a policy rule instead")
        args = json.dumps(getattr(call, "args", {}), ensure_ascii=False, default=str)
        message = (f"Herald: {getattr(call, 'tool', '?')} needs approval (rule '{getattr(call, 'rule', '?')}', "
                   f"{getattr(call, 'origin', 'a')} call). Arguments: {args[:2000]}")
        future = asyncio.run_coroutine_threadsafe(
            ctx.session.elicit_form(message, APPROVAL_SCHEMA, related_request_id=ctx.request_id), loop)
        answer = future.result(timeout=APPROVAL_TIMEOUT)
        return answer.action == "accept" and (answer.content or {}).get("approve") is True


def build_server(runtime: Runtime, *, direct_tools: bool = False, approvals: Approvals | None = None,
                 clients: Clients | None = None, session_scope: str = "shared") -> Server[Any]:
    """The MCP server for `runtime` (the caller owns the Runtime and closes it). `approvals`, when
    the Runtime's policy uses it as its approver, is told which request is being served.
    `clients` admits each call (per-client limits) and records it; `session_scope` says whose
    kernel sessions a client reaches (setting serve.session_scope; "shared": every client's)."""
    from mcp import types
    from mcp.server import Server

    from .. import __version__
    from .mcplimits import Clients, FairTurns

    offered = [t for t in runtime.dispatcher.tools if direct_tools and not t.runs_scripts]
    by_name = {t.name: t for t in offered}
    listing = [types.Tool(name=runtime.execute_tool.name, description=runtime.execute_tool.description,
                          input_schema=EXECUTE_PARAMETERS,
                          annotations=types.ToolAnnotations(read_only_hint=False, open_world_hint=True))]
    listing += [
        types.Tool(
            name=t.name,
            description=t.description + (f"\nReturns: {t.returns_shape}" if t.returns_shape else ""),
            input_schema=t.parameters,
            annotations=types.ToolAnnotations(read_only_hint=not t.mutates),
        )
        for t in offered
    ]
    turns = FairTurns()  # runs are serialised on the Runtime, taken by the waiting clients in turn
    admission = clients or Clients(max_concurrent=0, per_minute=0)
    if session_scope == "client":  # a client's kernel sessions end with its MCP session
        admission.on_idle = lambda identity, mcp_session: threading.Thread(
            target=end_kernels, args=(runtime, identity, mcp_session), name="herald-mcp-end-kernels", daemon=True
        ).start()

    async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        args = dict(params.arguments or {})
        executes = params.name == runtime.execute_tool.name
        if not executes and params.name not in by_name:
            known = ", ".join([runtime.execute_tool.name, *by_name])
            hint = "" if direct_tools else " (start herald mcp serve with --direct-tools to offer the direct tools)"
            return _text_result(f"Unknown tool {params.name!r}{hint}. Tools: {known}.", error=True)
        identity, mcp_session = _caller(ctx)
        session = args.get("session") if executes and isinstance(args.get("session"), str) else None
        run = admission.admit(identity, mcp_session, params.name, session)
        if isinstance(run, str):
            _audit(runtime, "mcp_refused", identity, mcp_session, params.name, session, reason=run)
            return _text_result(run, error=True)
        _audit(runtime, "mcp_call", identity, mcp_session, params.name, session)
        result = None
        try:
            if executes:
                async with turns.turn(identity):
                    admission.running(run)
                    with approvals.running(ctx, asyncio.get_running_loop()) if approvals else contextlib.nullcontext():
                        kernel = None if session is None else kernel_name(session_scope, identity, mcp_session, session)
                        result = await _execute(runtime, ctx, args, kernel)
            else:
                admission.running(run)
                result = await _direct(runtime, ctx, params.name, args)
            return result
        finally:
            admission.finish(run)
            _audit(runtime, "mcp_done", identity, mcp_session, params.name, session,
                   outcome="cancelled" if result is None else "error" if result.is_error else "success")

    return Server("herald", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool,
                  instructions="Run Python scripts that call Herald's tools with execute_code; put many tool "
                               "calls in one script and print only what matters.")


def kernel_name(scope: str, identity: str, mcp_session: str, name: str) -> str:
    """The Runtime's name for a client's kernel session `name`: one no other client can name
    (unless serve.session_scope shares it)."""
    if scope == "shared":
        return name
    return json.dumps([identity, mcp_session if scope == "client" else "", name], ensure_ascii=False)


def end_kernels(runtime: Runtime, identity: str, mcp_session: str) -> list[str]:
    """End the kernel sessions of one client's MCP session (serve.session_scope "client"), once
    that session has gone idle (the SDK has closed it): nothing could reach them any more."""

    def owned(name: str) -> bool:
        try:
            parts = json.loads(name)
        except ValueError:
            return False
        return isinstance(parts, list) and parts[:2] == [identity, mcp_session]

    return runtime.end_sessions(owned)


def _caller(ctx: ServerRequestContext[Any]) -> tuple[str, str]:
    """(identity, MCP session id) of the request: the authenticated token's name, else "anonymous"
    over HTTP without auth and "stdio" on stdio."""
    from .mcpauth import identity_of

    request = ctx.request
    if request is None:
        return "stdio", "stdio"
    headers = getattr(request, "headers", None)
    mcp_session = headers.get("mcp-session-id") if headers is not None else None
    return identity_of(request) or "anonymous", mcp_session or "-"


def _audit(runtime: Runtime, kind: str, identity: str, mcp_session: str, tool: str, session: str | None,
           **extra: Any) -> None:
    """A transcript record naming the client of a call (the records of its run follow it)."""
    if runtime.transcript is not None:
        runtime.transcript.write({"type": kind, "client": identity, "mcp_session": mcp_session, "tool": tool,
                                  "session": session, **extra})


async def _direct(runtime: Runtime, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any]) -> CallToolResult:
    from mcp import types

    cancel = threading.Event()
    _direct_request.set((ctx, asyncio.get_running_loop()))  # copied into the worker thread's context
    reply = await _in_thread(lambda: runtime.dispatcher.call_direct(name, args, cancel=cancel), on_cancel=cancel.set)
    if "error" in reply:
        return _text_result(f"{reply['error']['type']}: {reply['error']['message']}", error=True)
    result = reply["result"]
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    structured = result if isinstance(result, dict) else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)


async def _execute(runtime: Runtime, ctx: ServerRequestContext[Any], args: dict[str, Any],
                   kernel: str | None) -> CallToolResult:
    from mcp import types

    from ..runtime.scope import REFUSALS

    code, session, reset = args.get("code"), args.get("session"), bool(args.get("reset", False))
    if not isinstance(code, str):
        return _text_result("execute_code needs code: the Python script to run, as a string.", error=True)
    if session is not None and not isinstance(session, str):
        return _text_result("session must be a string naming a kernel session.", error=True)
    loop = asyncio.get_running_loop()
    calls = 0
    sent: list[Any] = []
    lock = threading.Lock()

    def on_call(tool: str, error: str | None) -> None:  # on the dispatcher's threads
        nonlocal calls
        with lock:
            calls += 1
            message = tool + ("" if error is None else " (refused)" if error in REFUSALS else " (failed)")
            sent.append(asyncio.run_coroutine_threadsafe(ctx.session.report_progress(calls, None, message), loop))

    runtime.dispatcher.on_script_call = on_call
    try:
        result = await _in_thread(lambda: runtime.execute(code, session=kernel, reset=reset),
                                  on_cancel=runtime.interrupt, repeat_cancel=True)
    finally:
        runtime.dispatcher.on_script_call = None
        with lock:  # every progress notification goes out before the result
            pending = [asyncio.wrap_future(f) for f in sent]
        await asyncio.gather(*pending, return_exceptions=True)
    if session is not None:
        result = dataclasses.replace(result, session=session)  # the client's own name for it
    data = result.to_dict()
    return types.CallToolResult(content=[types.TextContent(type="text", text=_render(data))],
                                structured_content=data, is_error=result.status != "success")


async def _in_thread(work: Any, *, on_cancel: Any, repeat_cancel: bool = False) -> Any:
    """Run blocking `work` on a worker thread. If the request is cancelled, `on_cancel` stops the
    work (again every INTERRUPT_EVERY s when `repeat_cancel`) and the cancellation goes on once
    the work has ended: nothing of a cancelled call keeps running."""
    import anyio

    done = threading.Event()

    def run() -> Any:
        try:
            return work()
        finally:
            done.set()

    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            on_cancel()
            while not await anyio.to_thread.run_sync(done.wait, INTERRUPT_EVERY):
                if repeat_cancel:
                    on_cancel()
        raise


def _render(data: dict[str, Any]) -> str:
    parts = [data.get("output") or ""]
    if data.get("error"):
        parts.append(f"[stderr]\n{data['error']}")
    parts.append(f"[{data.get('status')}: exit {data.get('exit_code')}, {data.get('tool_calls_made')} tool call(s), "
                 f"{data.get('duration_seconds', 0):.2f} s]")
    return "\n".join(p for p in parts if p)


def _text_result(text: str, *, error: bool = False) -> CallToolResult:
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


def serve_stdio(server: Server[Any]) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def serve_http(server: Server[Any], host: str, port: int, *, auth: AuthSetup | None = None,
               max_request_bytes: int | None = None) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp until the process is stopped; with `auth`, every
    request needs a token its verifier accepts."""
    import uvicorn
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

    app = server.streamable_http_app(host=host, auth=auth.settings if auth else None,
                                     token_verifier=auth.verifier if auth else None,
                                     max_request_body_size=max_request_bytes or DEFAULT_MAX_REQUEST_BODY_SIZE)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    uvicorn.Server(config).run()
