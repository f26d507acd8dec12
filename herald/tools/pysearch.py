"""search_files' pure-Python engine: a walk over the Backend protocol, bounded by a Deadline.

Herald walks and reads the files (through the backend, wherever they are); the regex runs in a
worker process (regex_worker.py), which is killed when the search's time is up, so a
catastrophic pattern costs a search its time limit and never stalls Herald. Files the backend
refuses to read (devices, FIFOs, over files.read_max_bytes) are skipped, like unreadable ones.
"""

from __future__ import annotations

import bisect
import itertools
import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ..backends.base import Backend
from ..runtime.sandbox import spawner
from .deadline import Deadline
from .files import looks_binary, split_lines
from .registry import ToolError
from .walk import walk_files

WORKER = Path(__file__).with_name("regex_worker.py")
POLL_SECONDS = 0.05  # how often a wait for the worker looks at the call's cancel event
BATCH_BYTES = 1 << 20  # files go to the worker together up to this size or count
BATCH_FILES = 256


def relative(base: str, absolute: str) -> str:
    return absolute[len(base.rstrip("/")) + 1 :]


def _files(backend: Backend, root: str, base: str, keep: Callable[[str], bool], deadline: Deadline) -> Iterator[str]:
    """Absolute paths of the files under `root` that `keep` (given paths relative to `base`) keeps."""
    for path in walk_files(backend, root, ignore_files=True):
        deadline.check()
        if keep(relative(base, path)):
            yield path


def find_files(
    backend: Backend, root: str, base: str, keep: Callable[[str], bool], wanted: int, deadline: Deadline
) -> list[str]:
    """The first `wanted` kept files under `root`, relative to `base`."""
    found = []
    for path in _files(backend, root, base, keep, deadline):
        found.append(relative(base, path))
        if len(found) >= wanted:
            break
    return found


def find_matches(
    backend: Backend, root: str, base: str, keep: Callable[[str], bool], pattern: str, wanted: int,
    deadline: Deadline,
) -> list[tuple[str, int, str]]:
    """The first `wanted` (absolute path, line number, line) whose line `pattern` matches."""
    found: list[tuple[str, int, str]] = []
    batch: list[tuple[str, list[str]]] = []  # files not yet sent: one round trip for many small files
    batch_chars = 0

    def send() -> None:
        nonlocal batch_chars
        lines = [line for _, file_lines in batch for line in file_lines]
        starts = list(itertools.accumulate((len(file_lines) for _, file_lines in batch), initial=0))
        for number in worker.matching(lines, wanted - len(found)):
            at = bisect.bisect_right(starts, number - 1) - 1  # the file holding batch line `number`
            path, file_lines = batch[at]
            found.append((path, number - starts[at], file_lines[number - starts[at] - 1]))
        batch.clear()
        batch_chars = 0

    with _RegexWorker(pattern, deadline) as worker:
        for path in _files(backend, root, base, keep, deadline):
            try:
                data = backend.read_bytes(path)
            except OSError:
                continue
            if looks_binary(data):
                continue
            lines = split_lines(data.decode("utf-8", "replace"))
            if lines:
                batch.append((path, lines))
                batch_chars += len(data)
            if batch_chars >= BATCH_BYTES or len(batch) >= BATCH_FILES:
                send()
                if len(found) >= wanted:
                    break
        if batch and len(found) < wanted:
            send()
    return found


class _RegexWorker:
    """One regex_worker.py process for one search, started at its first file."""

    def __init__(self, pattern: str, deadline: Deadline) -> None:
        self._pattern = pattern.encode("utf-8", "surrogatepass")
        self._deadline = deadline
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _RegexWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()  # it holds nothing worth a graceful stop
            self._proc.wait()
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.close()
            self._proc.stdout.close()

    def _start(self) -> subprocess.Popen[bytes]:
        # Its own session: a terminal's Ctrl-C is for Herald, which stops the worker itself.
        proc = spawner.popen(
            [sys.executable, "-I", "-S", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={}, start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(b"%d\n%s" % (len(self._pattern), self._pattern))
        return proc

    def matching(self, lines: list[str], most: int) -> list[int]:
        """The numbers (from 1) of the first `most` lines that match."""
        if self._proc is None:
            self._proc = self._start()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        text = "\n".join(lines).encode("utf-8", "surrogatepass")
        try:
            # The worker reads a whole request before it matches: this write never waits on a
            # regex, and the reply is awaited before the next one.
            self._proc.stdin.write(b"%d %d\n%s" % (len(text), most, text))
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise self._failed() from None
        reply = b""
        out = self._proc.stdout.fileno()
        while not reply.endswith(b"\n"):
            self._deadline.check()  # the caller's exit kills the worker, mid-regex or not
            ready, _, _ = select.select([out], [], [], min(self._deadline.left(), POLL_SECONDS))
            if ready:
                chunk = os.read(out, 1 << 16)
                if not chunk:
                    raise self._failed()
                reply += chunk
        return [int(number) for number in reply.split()]

    def _failed(self) -> ToolError:
        assert self._proc is not None
        status = self._proc.wait()
        return ToolError(f"search_files: the regex worker process ended unexpectedly (exit status {status}).")
