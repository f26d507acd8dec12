"""The file system a file tool call works on, with the checks that must come right before it acts.

tools/files.py hands the tool core (_sandbox/toolcore/textfiles.py) the session's backend through
`GuardedFiles`:
- a write first checks the call's cancel event and the run's deadline (herald/deadlines.py): a
  call whose run ended while it worked (a patch of a large file, timed out half-way) must not
  write once `Runtime.execute()` has returned;
- what a read loads counts against the run's cap on bytes held in flight (herald/inflight.py),
  times what the tool builds from it, until the call ends: past the cap the call fails, before
  it builds anything, with what to do instead.
"""

from __future__ import annotations

from typing import Any

from ..backends.shell import current_cancel
from ..deadlines import check_deadline
from ..inflight import MIB, hold_bytes
from .registry import ToolError

# Bytes a call holds at its peak per byte of the file it loads, measured with tracemalloc on an
# 11.6 MB file of short ASCII lines: patch 11.6 (the text, the new text, both split into lines
# for the diff), read_file 4.2 (the text and its lines). Non-ASCII text takes more.
HELD_PER_BYTE = {"patch": 12, "read_file": 5, "write_file": 1}


class GuardedFiles:
    """`files` (a Backend) as the tool core of `tool` uses it: stat, read_bytes, write_bytes."""

    __slots__ = ("_files", "_held", "_tool")

    def __init__(self, files: Any, tool: str) -> None:
        self._files = files
        self._tool = tool
        self._held = HELD_PER_BYTE.get(tool, 1)

    def stat(self, path: str) -> Any:
        return self._files.stat(path)

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        data: bytes = self._files.read_bytes(path, max_bytes)
        hold_bytes(len(data) * self._held, f"{self._tool} of {path} ({len(data) / MIB:.1f} MiB)")
        return data

    def write_bytes(self, path: str, data: bytes) -> None:
        cancel = current_cancel()
        if cancel is not None and cancel.is_set():
            raise ToolError(f"{self._tool}: {path} was not written: the run was interrupted or ended first; "
                            "the file is unchanged.", "Interrupted")
        check_deadline(f"{self._tool}'s write of {path} (the file is unchanged)")
        self._files.write_bytes(path, data)
