"""Recording a run's tool calls (format.py) off the calls' path: the Dispatcher hands each
script call and its outcome to `Recorder.seen`, which only appends it to a list; a writer thread
encodes and writes them in batches, buffered, and `close` flushes at the run's end. A failure to
write is said once (the `problem` `close` returns) and never fails the run or its calls.

Every result must reach Herald to be recorded, so a recording run's grant answers nothing beside
the script (`sandbox.backend_tools` off: RECORDING_SETTINGS); the answers are the same either way.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO, Any

from ...fastjson import record_line
from ..calls import CallOutcome, ToolCall
from .format import call_record

# What a run that records (or replays) needs of its settings: every call comes to Herald.
RECORDING_SETTINGS = {"sandbox.backend_tools": False}
# Records wait in memory until this many, or this long, then are encoded and written together.
BATCH = 256
BATCH_SECONDS = 0.25


class Recorder:
    """A `CallTap` (calls.py) that writes every script call of a run to one recording file."""

    def __init__(self, path: Path) -> None:
        # Opened now: a place that cannot be written is an error before anything runs. Owner
        # only, as a new file: it holds whole results (a file's content a script read).
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._file: IO[str] | None = open(fd, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                          buffering=1 << 16)
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._wake = threading.Event()
        self._closing = False
        self._calls = 0
        self.problem: str | None = None
        self._writer = threading.Thread(target=self._write_all, name="herald-recorder", daemon=True)
        self._writer.start()

    def start(self, header: dict[str, Any]) -> None:
        """The header line: before any call."""
        with self._lock:
            self._pending.append(header)

    # -- CallTap ---------------------------------------------------------------------------

    def starting(self, call: ToolCall) -> None:
        pass

    def answer(self, call: ToolCall) -> CallOutcome | None:
        return None

    def seen(self, call: ToolCall, outcome: CallOutcome) -> None:
        if call.who != "script" or call.inner:  # an inner call's outcome is in its caller's
            return
        with self._lock:  # a list append: the encoding waits for the writer's next batch
            self._calls += 1
            self._pending.append(call_record(self._calls, str(call.name), call.args, outcome))
            full = len(self._pending) >= BATCH
        if full:
            self._wake.set()

    # -- the end ---------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        return self._calls

    def close(self, end: dict[str, Any]) -> str | None:
        """Write the end line (`end`, with the count of calls), flush and close; what went wrong
        writing, if anything (said once)."""
        with self._lock:
            self._pending.append({"end": {"calls": self._calls, **end}})
            self._closing = True
        self._wake.set()
        self._writer.join()
        return self.problem

    def _write_all(self) -> None:
        """Batches, not a wake-up per call: a thread woken for each call would take the GIL from
        the calls' threads each time (measured: ~80 µs a call, against ~2 µs of work)."""
        closing = False
        while not closing:
            self._wake.wait(BATCH_SECONDS)
            self._wake.clear()
            with self._lock:
                batch, self._pending = self._pending, []
                closing = self._closing
            for record in batch:
                self._write(record_line(record))
        self._write(None)
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self._failed(exc)

    def _write(self, line: str | None) -> None:
        """Write `line`, or flush (None)."""
        if self._file is None:
            return
        try:
            if line is None:
                self._file.flush()
            else:
                self._file.write(line)
        except (OSError, ValueError) as exc:  # a full disk, a removed mount: the run goes on
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        if self.problem is None:
            self.problem = f"the recording {self.path} could not be written ({exc}); the run itself was not affected"
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except (OSError, ValueError):
                pass
