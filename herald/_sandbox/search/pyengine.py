"""search_files' pure-Python engine: a walk over a Tree (a Backend, or walk.OsTree), bounded by a
Deadline. Stdlib only, Python >= 3.8 (the sandbox package).

Herald, or in backend mode the supervisor, walks and reads the files; the regex runs in a worker
process (search/regex_worker.py), which is killed when the search's time is up, so a catastrophic
pattern costs a search its time limit and never stalls the process that searches (Python's `re`
holds the GIL). Files the reader refuses (devices, FIFOs, over files.read_max_bytes) are
skipped, like unreadable ones.
"""

from __future__ import annotations

import bisect
import itertools
import os
import select
import subprocess
import sys
from typing import Any, Callable, Iterator, List, Optional, Tuple

from ..toolcore.base import ToolError
from ..toolcore.deadline import Deadline
from ..toolcore.textfiles import looks_binary, split_lines
from .ignorefiles import Tree
from .walk import walk_files

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regex_worker.py")
# How the worker is started: subprocess.Popen's signature (Herald passes its spawner thread's).
Popen = Callable[..., "subprocess.Popen[bytes]"]
POLL_SECONDS = 0.05  # how often a wait for the worker looks at the call's cancel event
BATCH_BYTES = 1 << 20  # files go to the worker together up to this size or count
BATCH_FILES = 256


def relative(base: str, absolute: str) -> str:
    return absolute[len(base.rstrip("/")) + 1 :]


def _files(tree: Tree, root: str, base: str, keep: Callable[[str], bool], deadline: Deadline) -> Iterator[str]:
    """Absolute paths of the files under `root` that `keep` (given paths relative to `base`) keeps."""
    for path in walk_files(tree, root, ignore_files=True):
        deadline.check()
        if keep(relative(base, path)):
            yield path


def find_files(
    tree: Tree, root: str, base: str, keep: Callable[[str], bool], wanted: int, deadline: Deadline
) -> List[str]:
    """The first `wanted` kept files under `root`, relative to `base`."""
    found = []
    for path in _files(tree, root, base, keep, deadline):
        found.append(relative(base, path))
        if len(found) >= wanted:
            break
    return found


def find_matches(
    tree: Tree, root: str, base: str, keep: Callable[[str], bool], pattern: str, wanted: int,
    deadline: Deadline, popen: Popen = subprocess.Popen,
) -> List[Tuple[str, int, str]]:
    """The first `wanted` (absolute path, line number, line) whose line `pattern` matches."""
    found: List[Tuple[str, int, str]] = []
    batch: List[Tuple[str, List[str]]] = []  # files not yet sent: one round trip for many small files
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

    with _RegexWorker(pattern, deadline, popen) as worker:
        for path in _files(tree, root, base, keep, deadline):
            try:
                data = tree.read_bytes(path)
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
    """One search/regex_worker.py process for one search, started at its first file."""

    def __init__(self, pattern: str, deadline: Deadline, popen: Popen) -> None:
        self._pattern = pattern.encode("utf-8", "surrogatepass")
        self._deadline = deadline
        self._popen = popen
        self._proc: Optional["subprocess.Popen[bytes]"] = None

    def __enter__(self) -> "_RegexWorker":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is not None:
            self._proc.kill()  # it holds nothing worth a graceful stop
            self._proc.wait()
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.close()
            self._proc.stdout.close()

    def _start(self) -> "subprocess.Popen[bytes]":
        # Its own session: a terminal's Ctrl-C is for Herald, which stops the worker itself.
        proc = self._popen(
            [sys.executable, "-I", "-S", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={}, start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(b"%d\n%s" % (len(self._pattern), self._pattern))
        return proc

    def matching(self, lines: List[str], most: int) -> List[int]:
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
