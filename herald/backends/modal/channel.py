"""Modal SDK calls, kept thin: an event loop thread that bounds every call with a timeout, and a
Channel over one `Sandbox.exec` process (its stdin stream and stdout stream).

The process is started through the wrapper in `..remote` (stderr merged into stdout, process id
on the first line), and stopped with its descendants by the shared kill-tree command, exactly as
in the Docker backend; only the SDK calls here are Modal's own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..base import BackendError, Channel
from ..remote import GO, kill_tree_argv, launch_argv, read_pid

T = TypeVar("T")
START_TIMEOUT = 60.0  # exec in a running sandbox, and the wrapper's first line
IO_TIMEOUT = 60.0  # one stdin write


class SDKTimeout(Exception):
    """A Modal call did not finish within its bound (the SDK itself retries for much longer)."""


class LoopThread:
    """An asyncio loop on a daemon thread; `call` runs a coroutine there, bounded in time."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="herald-modal", daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise SDKTimeout(f"no answer within {timeout:g} s") from None

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Cancel what still runs (an abandoned SDK retry loop, stream readers), stop the loop."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(2.0)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(2)


class ModalChannel(Channel):
    """`argv` in `sandbox` as a Channel: stdin writes, stdout chunks through a queue."""

    def __init__(self, loop: LoopThread, sandbox: Any, argv: list[str], *, cwd: str | None,
                 env: dict[str, str], grace: float) -> None:
        self._loop = loop
        self._sandbox = sandbox
        self._grace = grace
        self._chunks: queue.Queue[bytes] = queue.Queue()
        self._eof = False
        self._closed = False
        self._code: int | None = None
        self._pending = b""
        try:
            self._process = loop.call(
                sandbox.exec.aio(*launch_argv(argv, cwd), text=False, env=env or None), START_TIMEOUT
            )
        except Exception as exc:
            raise BackendError(f"could not start {argv[0]!r} in the Modal sandbox: {exc}") from None
        loop.spawn(self._pump())
        self.send(GO)
        try:
            self.pid, self._pending = read_pid(self._read, START_TIMEOUT)
        except ValueError as exc:
            self._eof = True
            raise BackendError(f"could not start {argv[0]!r} in the Modal sandbox: {exc}") from None

    async def _pump(self) -> None:
        try:
            async for chunk in self._process.stdout:
                self._chunks.put(bytes(chunk))
        except Exception:
            pass  # the stream broke: the process counts as gone
        finally:
            self._chunks.put(b"")

    async def _write(self, data: bytes) -> None:
        self._process.stdin.write(data)
        await self._process.stdin.drain.aio()

    def _read(self, timeout: float) -> bytes | None:
        if self._eof:
            return b""
        try:
            chunk = self._chunks.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if chunk == b"":
            self._eof = True
        return chunk

    # -- Channel ---------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        try:
            self._loop.call(self._write(data), IO_TIMEOUT)
        except Exception:
            pass  # the process is gone; the next recv reports it

    def recv(self, timeout: float) -> bytes | None:
        if self._pending:
            pending, self._pending = self._pending, b""
            return pending
        return self._read(timeout)

    @property
    def returncode(self) -> int | None:
        if self._code is None and self._eof:
            try:
                self._code = self._loop.call(self._process.wait.aio(), 10)
            except Exception:
                return None
        return self._code

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._eof and self.pid:
            try:
                killer = self._loop.call(self._sandbox.exec.aio(*kill_tree_argv(self.pid, self._grace)), START_TIMEOUT)
                self._loop.call(killer.wait.aio(), self._grace + START_TIMEOUT)
            except Exception:
                pass  # the sandbox is gone, and the processes with it
        self._eof = True
