"""The event loop the MCP SDK runs on: one daemon thread per process, started on first use.

Herald's threads (the dispatcher's, the CLI's) submit coroutines with `run`, which waits for the
answer while watching the call's cancel event, so an interrupted script stops its MCP calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_POLL = 0.05  # seconds between looks at the cancel event while a call runs

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


class Cancelled(Exception):
    """The caller's cancel event was set while the coroutine ran; it was cancelled."""


def loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            new = asyncio.new_event_loop()
            threading.Thread(target=new.run_forever, name="herald-mcp-loop", daemon=True).start()
            _loop = new
        return _loop


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None, cancel: threading.Event | None = None) -> T:
    """Run `coro` on the MCP loop and return its result. TimeoutError past `timeout` seconds,
    Cancelled once `cancel` is set; either way the coroutine is cancelled."""
    future = asyncio.run_coroutine_threadsafe(coro, loop())
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = None if cancel is None else _POLL
        if deadline is not None:
            left = deadline - time.monotonic()
            wait = left if wait is None else min(wait, left)
        try:
            return future.result(timeout=None if wait is None else max(0.0, wait))
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError (the same class in 3.11)
                raise
            if cancel is not None and cancel.is_set():
                future.cancel()
                raise Cancelled() from None
            if deadline is not None and time.monotonic() >= deadline:
                future.cancel()
                raise TimeoutError(f"no answer within {timeout:g} s") from None
