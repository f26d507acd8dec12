"""Per-client limits and the record of live clients for `herald mcp serve`.

`Clients.admit` lets a call in or says why not: an identity (a token's name) may have at most
`serve.max_concurrent_runs` calls running or waiting, and start at most `serve.max_runs_per_minute`
in any 60 s. `FairTurns` hands the one Runtime to the waiting identities in turn (round robin), so
a client that queues many runs delays another client by at most one run of its own.

The server keeps its state in `data_dir/mcp/serve-PID.json` (0600, replaced whole at most every
STATUS_EVERY s while it changes): its URL, authentication, and each client (identity, MCP sessions, last call) with its
runs in flight. `herald mcp sessions` reads those files (`live_servers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WINDOW = 60.0  # seconds: max_runs_per_minute counts the runs started in the last WINDOW
IDLE = 30 * 60.0  # seconds without a call after which an MCP session is no longer listed (the SDK's idle timeout)
STATUS_EVERY = 0.2  # seconds: the status file is rewritten at most this often (its cost grows with the clients)


@dataclass
class Run:
    id: int
    identity: str
    mcp_session: str
    tool: str
    kernel_session: str | None
    state: str = "waiting"  # waiting (for the Runtime) | running
    since: float = field(default_factory=time.time)


@dataclass
class _Client:
    identity: str
    sessions: dict[str, float] = field(default_factory=dict)  # MCP session id -> last call (time.time)
    started: deque[float] = field(default_factory=deque)  # monotonic starts within WINDOW
    runs: int = 0
    refused: int = 0


class Clients:
    """The server's clients: admission against the limits, runs in flight, the status file."""

    def __init__(self, *, max_concurrent: int, per_minute: int, status: Path | None = None,
                 about: dict[str, Any] | None = None, idle: float = IDLE) -> None:
        self.max_concurrent, self.per_minute, self.idle = max_concurrent, per_minute, idle
        # Told (identity, MCP session) of each session gone idle: its kernel sessions can go.
        self.on_idle: Callable[[str, str], None] | None = None
        self._clients: dict[str, _Client] = {}
        self._runs: dict[int, Run] = {}
        self._ids = itertools.count(1)
        self._status, self._about = status, dict(about or {}, pid=os.getpid(), started=time.time())
        self._pending = False
        self._write()

    def admit(self, identity: str, mcp_session: str, tool: str, kernel_session: str | None) -> Run | str:
        """A Run (waiting) for this call, or the error that says which limit refused it."""
        client = self._clients.setdefault(identity, _Client(identity))
        client.sessions[mcp_session] = wall = time.time()
        for other in self._clients.values():  # a client that went away is swept by the others' calls
            for idle in [s for s, last in other.sessions.items() if last < wall - self.idle]:
                del other.sessions[idle]  # the SDK has closed it by now
                if self.on_idle is not None:
                    self.on_idle(other.identity, idle)
        now = time.monotonic()
        while client.started and client.started[0] <= now - WINDOW:
            client.started.popleft()
        in_flight = sum(1 for run in self._runs.values() if run.identity == identity)
        refusal = None
        if self.max_concurrent > 0 and in_flight >= self.max_concurrent:
            refusal = (f"Refused: client {identity!r} already has {in_flight} call(s) running or waiting, its limit "
                       f"(serve.max_concurrent_runs = {self.max_concurrent}). Wait for one to finish, then call again.")
        elif self.per_minute > 0 and len(client.started) >= self.per_minute:
            wait = max(1, round(client.started[0] + WINDOW - now))
            refusal = (f"Refused: client {identity!r} started {len(client.started)} calls in the last minute, its "
                       f"limit (serve.max_runs_per_minute = {self.per_minute}). Call again in {wait} s; put more "
                       "work in each script instead of making many small calls.")
        if refusal is not None:
            client.refused += 1
            self._changed()
            return refusal
        client.started.append(now)
        client.runs += 1
        run = Run(next(self._ids), identity, mcp_session, tool, kernel_session)
        self._runs[run.id] = run
        self._changed()
        return run

    def running(self, run: Run) -> None:
        run.state, run.since = "running", time.time()
        self._changed()

    def finish(self, run: Run) -> None:
        self._runs.pop(run.id, None)
        self._changed()

    def snapshot(self) -> dict[str, Any]:
        clients = []
        for client in self._clients.values():
            clients.append({"identity": client.identity, "mcp_sessions": sorted(client.sessions),
                            "last_call": max(client.sessions.values(), default=None), "runs": client.runs,
                            "refused": client.refused,
                            "in_flight": [asdict(run) for run in self._runs.values()
                                          if run.identity == client.identity]})
        return dict(self._about, clients=clients)

    def close(self) -> None:
        status, self._status = self._status, None
        if status is not None:
            with contextlib.suppress(OSError):
                status.unlink()

    def _changed(self) -> None:
        """Write the status soon (on the server's event loop), once for the changes until then."""
        if self._status is None or self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write()
            return
        self._pending = True
        loop.call_later(STATUS_EVERY, self._write)

    def _write(self) -> None:
        self._pending = False
        if self._status is None:
            return
        data = json.dumps(self.snapshot(), ensure_ascii=False)
        partial = self._status.with_name(self._status.name + ".part")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(data)
            os.replace(partial, self._status)
        except OSError:  # the status is for people looking on: serving goes on without it
            pass


class FairTurns:
    """One holder at a time (the Runtime runs one script), handed to waiting identities in turn."""

    def __init__(self) -> None:
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._rotation: deque[str] = deque()  # identities with waiters, the next one first
        self._held = False
        self._holder: str | None = None  # whose turn it is (or was last)

    @contextlib.asynccontextmanager
    async def turn(self, identity: str) -> AsyncIterator[None]:
        if self._held or self._rotation:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue = self._waiting.setdefault(identity, deque())
            if not queue:
                self._rotation.append(identity)
            queue.append(future)
            try:
                await future
            except BaseException:
                if future.done() and not future.cancelled():  # the turn came as the call was cancelled
                    self._pass_on()
                else:
                    self._forget(identity, future)
                raise
        else:
            self._held = True
        self._holder = identity
        try:
            yield
        finally:
            self._pass_on()

    def _forget(self, identity: str, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(identity)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._waiting[identity]
                self._rotation.remove(identity)

    def _pass_on(self) -> None:
        if len(self._rotation) > 1 and self._rotation[0] == self._holder:
            self._rotation.rotate(-1)  # the client that just had its turn goes behind the others
        while self._rotation:
            identity = self._rotation.popleft()
            queue = self._waiting[identity]
            future = queue.popleft()
            if queue:
                self._rotation.append(identity)  # behind the others that wait
            else:
                del self._waiting[identity]
            if not future.done():
                future.set_result(None)
                return
        self._held = False


def status_path(data_dir: Path) -> Path:
    directory = data_dir / "mcp"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory / f"serve-{os.getpid()}.json"


def live_servers(data_dir: Path) -> list[dict[str, Any]]:
    """The status of each `herald mcp serve --http` running with this data directory."""
    found = []
    for path in sorted((data_dir / "mcp").glob("serve-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            os.kill(int(data["pid"]), 0)
        except ProcessLookupError:  # its server is gone without removing it
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.append(data)
    return found
