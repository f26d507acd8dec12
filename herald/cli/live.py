"""What `herald exec` shows while a script runs: its output as it comes, and on a terminal a
status line (tool calls so far, elapsed time) kept below it on stderr.

The status line is drawn only at the start of a line and erased before any output is written, so
the script's own text is never interleaved with it; piped output never sees it. While an
approval question is on screen (`suspended()`), the status line is erased and not drawn, and the
script's output waits until the answer is given. With `--json --events` the same happenings go
to stdout as JSON lines instead.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

TICK_SECONDS = 0.2
CLEAR_LINE = "\r\x1b[K"
HOLD_LIMIT = 1 << 20  # output held back during a question beyond this is written anyway


class LiveView:
    def __init__(self, *, status_line: bool, profile: str = "") -> None:
        self._lock = threading.Lock()
        # A permission profile other than the default is named on the line (full: no confinement).
        self._profile = f" · profile {profile}" if profile and profile != "workspace-write" else ""
        self._started = time.monotonic()
        self._calls = 0
        self._failed = 0
        self._refused = 0  # not run at all: the call limit, a budget, the permission policy
        self._last_tool = ""
        self._status_line = status_line
        self._shown = False
        self._at_line_start = True
        self._stdout_broken = False
        self._suspended = False
        self._held: list[tuple[str, bytes]] = []  # output that came while a question was on screen
        self._held_bytes = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if status_line:
            self._ticker = threading.Thread(target=self._tick, name="herald-live", daemon=True)
            self._ticker.start()

    # -- what the runtime reports ----------------------------------------------------------

    def output(self, stream: str, data: bytes) -> None:
        with self._lock:
            if self._suspended and self._held_bytes < HOLD_LIMIT:
                self._held.append((stream, data))
                self._held_bytes += len(data)
                return
            self._write(stream, data)

    def _write(self, stream: str, data: bytes) -> None:
        self._erase()
        target = sys.stdout if stream == "stdout" else sys.stderr
        if stream == "stdout" and self._stdout_broken:
            return
        try:
            target.buffer.write(data)
            target.flush()
        except BrokenPipeError:  # `herald exec x.py | head`: stop writing, keep running
            if stream == "stdout":
                self._stdout_broken = True
            return
        self._at_line_start = data.endswith(b"\n")
        self._draw()

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """While a question is asked on the terminal: no status line, output held back."""
        with self._lock:
            self._erase()
            if not self._at_line_start:
                sys.stderr.write("\n")
                sys.stderr.flush()
                self._at_line_start = True
            self._suspended = True
        try:
            yield
        finally:
            with self._lock:
                self._suspended = False
                held, self._held, self._held_bytes = self._held, [], 0
                for stream, data in held:
                    self._write(stream, data)
                self._draw()

    def tool_call(self, tool: str, error: str | None) -> None:
        from ..runtime.scope import REFUSALS  # loaded by now: the runtime reports this call

        with self._lock:
            self._calls += 1
            self._refused += error in REFUSALS
            self._failed += error is not None and error not in REFUSALS
            self._last_tool = tool
            self._draw()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._erase()
            if not self._at_line_start:  # the summary starts on a line of its own
                sys.stderr.write("\n")
                sys.stderr.flush()

    # -- the status line -------------------------------------------------------------------

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        if not self._status_line or not self._at_line_start or self._suspended or self._stop.is_set():
            return
        elapsed = time.monotonic() - self._started
        text = f"running{self._profile} · {self._calls} tool call(s)"
        trouble = [f"{n} {what}" for n, what in ((self._failed, "failed"), (self._refused, "refused")) if n]
        if trouble:
            text += f" ({', '.join(trouble)})"
        if self._last_tool:
            text += f" · last: {self._last_tool}"
        text += f" · {elapsed:.1f} s"
        sys.stderr.write(f"{CLEAR_LINE}\x1b[2m{text}\x1b[0m")
        sys.stderr.flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            sys.stderr.write(CLEAR_LINE)
            sys.stderr.flush()
            self._shown = False


class EventStream:
    """`--json --events`: one JSON object per line on stdout as things happen; the caller
    prints the result object as the last line."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out or sys.stdout
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._calls = 0

    def emit(self, event: dict[str, Any]) -> None:
        event["elapsed"] = round(time.monotonic() - self._started, 3)
        with self._lock:
            self._out.write(json.dumps(event, ensure_ascii=False) + "\n")
            self._out.flush()

    def output(self, stream: str, data: bytes) -> None:
        self.emit({"event": stream, "data": data.decode("utf-8", "replace")})

    def tool_call(self, tool: str, error: str | None) -> None:
        with self._lock:
            self._calls += 1
            calls = self._calls
        event: dict[str, Any] = {"event": "tool_call", "tool": tool, "ok": error is None, "calls": calls}
        if error is not None:
            event["error"] = error
        self.emit(event)
