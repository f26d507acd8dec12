"""One MCP server of one session: started on first use, reused, restarted when it died, closed.

The SDK's `Client` must be entered and left by one task, so each connection is one long-lived
task on the MCP loop (`_serve`) that opens the client, hands it over and waits to be stopped;
calls from Herald's threads are submitted to the same loop. A stdio server's stderr goes to a
temporary file whose tail is quoted when the server fails to start or dies.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import shlex
import tempfile
import threading
from typing import IO, TYPE_CHECKING, Any

from ...config import McpServerSettings
from ...deadlines import DeadlinePassed, check_deadline, time_left
from ..registry import ToolError
from . import loop

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult

log = logging.getLogger(__name__)
STDERR_TAIL = 2000  # bytes of a server's stderr quoted in errors
STOP_TIMEOUT = 10.0


class McpServerError(ToolError):
    """The server could not be started or reached; the message names it and its stderr tail."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "McpServerError")


class McpListingTooLarge(McpServerError):
    """The server lists more tools, or more bytes, than its settings allow: kept as its listing
    (tools.py), so later sessions withhold it without listing it again."""


class McpConnection:
    def __init__(self, server: McpServerSettings) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._task: concurrent.futures.Future[None] | None = None
        self._errlog: IO[bytes] | None = None
        self._failed: str | None = None  # why the last start failed: later calls fail at once
        self.restarts = 0

    @property
    def describe(self) -> str:
        """The command line, or the URL: what errors and `herald mcp list` name."""
        if self.server.url:
            return self.server.url
        return shlex.join([self.server.command, *self.server.args])

    @property
    def started(self) -> bool:
        return self._client is not None

    # -- lifecycle ---------------------------------------------------------------------------

    def client(self) -> Client:
        """The running client, started now if it is not. Waiting for another call's start, and
        the start itself, end by the current call's deadline (herald/deadlines.py)."""
        wait = time_left()
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            raise DeadlinePassed(f"MCP server {self.server.name!r} was still starting for another call")
        try:
            if self._client is None:
                if self._failed is not None:
                    raise McpServerError(self._failed)
                self._start()
            assert self._client is not None
            return self._client
        finally:
            self._lock.release()

    def _start(self) -> None:
        check_deadline(f"the start of MCP server {self.server.name!r}")
        ready: concurrent.futures.Future[tuple[Client, asyncio.Event]] = concurrent.futures.Future()
        # Kept open for the life of the server (its stderr), closed by _stop_current.
        self._errlog = tempfile.TemporaryFile("w+b") if not self.server.url else None  # noqa: SIM115
        self._task = asyncio.run_coroutine_threadsafe(self._serve(ready), loop.loop())
        startup = self.server.startup_timeout_sec
        wait = time_left(startup)
        try:
            self._client, self._stop = ready.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            self._task.cancel()
            if wait is not None and wait < startup:  # the run's deadline, not the server: it may start next time
                self._task = self._stop = None
                self._close_errlog()
                raise DeadlinePassed(f"MCP server {self.server.name!r} was still starting") from None
            self._failed = self._start_error(f"it did not answer within {startup:g} s "
                                             "(setting startup_timeout_sec)")
            raise McpServerError(self._failed) from None
        except Exception as exc:
            self._failed = self._start_error(_reason(exc))
            raise McpServerError(self._failed) from None

    def _start_error(self, reason: str) -> str:
        kind = "at" if self.server.url else "started with"
        tail = self.stderr_tail()
        text = f"MCP server {self.server.name!r} ({kind} {self.describe}) failed to start: {reason}."
        if tail:
            text += f" Its stderr ends with:\n{tail}"
        return (
            text
            + f"\nFix its [mcp_servers.{self.server.name}] settings (check with `herald mcp list`) or call other tools."
        )

    async def _serve(self, ready: concurrent.futures.Future[tuple[Client, asyncio.Event]]) -> None:
        from mcp import Client

        stop = asyncio.Event()
        try:
            async with Client(self._transport(), mode="legacy") as client:
                ready.set_result((client, stop))
                await stop.wait()
        except BaseException as exc:  # a start failure goes to the starter; a late one is logged
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                log.debug("MCP server %s closed with %r", self.server.name, exc)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise

    def _transport(self) -> Any:
        if self.server.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = create_mcp_http_client(headers=dict(self.server.headers))
            return streamable_http_client(self.server.url, http_client=client)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=self.server.command, args=list(self.server.args), env=dict(self.server.env) or None,
            cwd=os.path.expanduser(self.server.cwd) if self.server.cwd else None,
        )
        return stdio_client(params, errlog=self._errlog)  # type: ignore[arg-type]  # the server's stderr: any file

    def stderr_tail(self) -> str:
        errlog = self._errlog
        if errlog is None:
            return ""
        try:
            errlog.flush()
            size = os.fstat(errlog.fileno()).st_size
            data = os.pread(errlog.fileno(), STDERR_TAIL, max(0, size - STDERR_TAIL))
        except (OSError, ValueError):
            return ""
        return data.decode("utf-8", "replace").strip()

    def close(self) -> None:
        with self._lock:
            self._stop_current()

    def _stop_current(self) -> None:
        stop, task, errlog = self._stop, self._task, self._errlog
        self._client = self._stop = self._task = self._errlog = None
        if stop is not None:
            loop.loop().call_soon_threadsafe(stop.set)
        if task is not None:
            with contextlib.suppress(Exception):
                task.result(timeout=STOP_TIMEOUT)
            task.cancel()
        if errlog is not None:
            errlog.close()

    def _close_errlog(self) -> None:
        errlog, self._errlog = self._errlog, None
        if errlog is not None:
            errlog.close()

    # -- calls -------------------------------------------------------------------------------

    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools as MCP dicts (by alias: inputSchema, ...). A listing that takes
        longer than `list_timeout_sec`, or holds more than `max_tools` tools or
        `max_listing_bytes` bytes, fails this server (McpServerError saying which limit); one cut
        short by the run's deadline raises DeadlinePassed (the next session may list it)."""
        server = self.server
        client = self.client()
        limit = server.list_timeout_sec
        wait = time_left(limit)
        over: list[str] = []

        async def every_page() -> list[dict[str, Any]]:
            tools: list[dict[str, Any]] = []
            size = 0
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                if len(tools) + len(page.tools) > server.max_tools:
                    over.append(f"it lists more than {server.max_tools} tools (setting max_tools)")
                    return tools
                for tool in page.tools:
                    spec = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
                    size += len(json.dumps(spec))
                    if size > server.max_listing_bytes:
                        over.append(f"its listing is larger than {server.max_listing_bytes:,} bytes "
                                    "(setting max_listing_bytes)")
                        return tools
                    tools.append(spec)
                cursor = page.next_cursor
                if not cursor:
                    return tools

        failed = f"MCP server {server.name!r} ({self.describe}) could not list its tools"
        try:
            listed = loop.run(every_page(), timeout=wait)
        except TimeoutError:
            if wait is not None and wait < limit:
                raise DeadlinePassed(f"MCP server {server.name!r} was still listing its tools") from None
            raise McpServerError(f"{failed}: it did not finish within {limit:g} s (setting list_timeout_sec); "
                                 "its tools are not offered") from None
        except Exception as exc:
            raise McpServerError(f"{failed}: {_reason(exc)}") from None
        if over:
            raise McpListingTooLarge(f"{failed}: {over[0]}; its tools are not offered. Raise the limit in "
                                 f"[mcp_servers.{server.name}] if the listing is meant to be that large.")
        return listed
    def call(self, tool: str, args: dict[str, Any], *, read_only: bool,
             cancel: threading.Event | None) -> tuple[CallToolResult, str | None]:
        """The server's answer, and a note when the server had to be restarted for it. A
        server that died is restarted once; the call is sent again only when the tool says it
        is read-only (a mutating call may have taken effect before the server died)."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        client = self.client()
        try:
            return self._call(client, tool, args, cancel), None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise ToolError(f"{tool}: MCP server {self.server.name!r} refused the call: {exc}. If the server's "
                                "tools changed, `herald mcp list` renews Herald's listing of them.") from None
        except Exception as exc:  # the transport broke under the call (a write to a dead server)
            if not _connection_lost(exc):
                raise
        tail = self._restart(client)
        died = f"MCP server {self.server.name!r} had died" + (f" (its stderr ends with: {tail})" if tail else "")
        if not read_only:
            raise ToolError(
                f"{died}; it was restarted. {tool} is not marked read-only and may have taken effect before the "
                "server died, so it was not sent again: check its effect, then call it again if needed.",
                "McpServerRestarted",
            )
        return self._call(
            self.client(), tool, args, cancel
        ), f"{died}; it was restarted and this call ran on the new process."

    def _restart(self, dead: Client) -> str:
        with self._lock:
            tail = self.stderr_tail()
            if self._client is dead:
                self._stop_current()
                self.restarts += 1
                self._start()
            return tail

    def _call(self, client: Client, tool: str, args: dict[str, Any], cancel: threading.Event | None) -> CallToolResult:
        timeout = self.server.tool_timeout_sec
        check_deadline(f"the call of {tool} on MCP server {self.server.name!r}")
        # The SDK's own read timeout, then ours (a little later: a stuck SDK still ends), cut to
        # what the run has left: at the run's deadline the call is cancelled.
        wait = time_left(timeout + 5)
        cut = wait is not None and wait < timeout + 5
        try:
            return loop.run(client.call_tool(tool, args, read_timeout_seconds=timeout), wait, cancel)
        except loop.Cancelled:
            raise ToolError(
                f"{tool}: interrupted; the MCP server was asked to cancel the call.", "Interrupted"
            ) from None
        except TimeoutError:
            if cut:
                raise DeadlinePassed(
                    f"{tool} was still waiting for MCP server {self.server.name!r}; it was asked to cancel the call"
                ) from None
            raise ToolError(
                f"{tool}: MCP server {self.server.name!r} did not answer within {timeout:g} s "
                "(setting tool_timeout_sec)",
                "Timeout",
            ) from None


def _connection_lost(exc: BaseException) -> bool:
    import anyio

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    lost = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, BrokenPipeError,
            ConnectionError)
    return isinstance(exc, lost)


def _reason(exc: BaseException) -> str:
    """The innermost useful message of `exc` (anyio wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
