"""Backend mode: `search_files` in the supervisor, over the backend's own files.

Stdlib only, Python >= 3.8 (the sandbox package). The search is the one Herald runs
(search/core.py); this is the place it runs in next to the script: the file system through `OsTree`,
ripgrep in a `bash` of its own (not the session's shell, so a search never waits for a terminal
command, nor a command for a search) with the same command lines as on Herald's side, its output
captured up to the session shell's cap (past it the search walks instead, as Herald's does) and
its time bounded by the call's deadline: out of time, or once the run is over, the command is
killed with everything it started.

The grant's "search" carries what Herald's side reads from its settings:
    {"python_only": bool, "bin": "bash", "max_output_bytes": n, "timeout": s (terminal's, for a
     None timeout), "time_left": s or None (the run's), "deadline" (set here from time_left)}
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from typing import Any, ContextManager, Dict, List, NamedTuple, Optional

from ..search.ignorefiles import Tree
from ..search.place import Held, held_dir
from ..search.pyengine import Popen
from ..search.walk import OsTree
from ..toolcore.callroots import Confinement
from ..wire.grant import SearchGrant

POLL_SECONDS = 0.05  # how often a wait for ripgrep looks at the run's cancel event


class ShellRan(NamedTuple):
    """What search.Ran asks for."""

    output: str
    exit_code: int
    timed_out: bool = False
    truncated: bool = False
    note: str = ""


class SupervisorPlace:
    """A search next to the script (what search.Place asks for)."""

    def __init__(
        self,
        spec: SearchGrant,
        read_max_bytes: int,
        cwd: str,
        cache: Dict[str, Any],
        cache_lock: threading.Lock,
        cancel: threading.Event,
        confinement: Optional[Confinement] = None,
    ) -> None:
        self.tree: Tree = OsTree(read_max_bytes, confinement)
        self._confinement = confinement
        self.cwd = cwd
        self.python_only = bool(spec["python_only"])
        self.cache = cache
        self.cache_lock = cache_lock
        self.cancel: Optional[threading.Event] = cancel
        self.popen: Popen = subprocess.Popen
        self._bin = str(spec.get("bin") or "bash")
        self._cap = int(spec["max_output_bytes"])

    def held(self, directory: str) -> ContextManager[Held]:
        return held_dir(directory, self._confinement)

    def run(self, command: str, timeout: float, workdir: Optional[str] = None) -> ShellRan:
        proc = subprocess.Popen(
            [self._bin, "--noprofile", "--norc", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir or "/",
            start_new_session=True,
        )
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        chunks: List[bytes] = []
        got = 0
        timed_out = truncated = False
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or (self.cancel is not None and self.cancel.is_set()):
                    timed_out = True
                    break
                if not select.select([fd], [], [], min(left, POLL_SECONDS))[0]:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
                if got > self._cap:  # cut in the middle: the caller walks instead
                    truncated = True
                    break
        finally:
            if timed_out or truncated:
                _kill_group(proc)
            exit_code = proc.wait()
            proc.stdout.close()
        output = b"".join(chunks).decode("utf-8", "replace")
        if output.endswith("\n"):  # as the session's shell reports a command's output
            output = output[:-1]
        return ShellRan(output, exit_code, timed_out, truncated)


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # bash and the pipeline it started (rg, head)
    except OSError:
        pass


def time_limit(bound: Dict[str, Any], spec: SearchGrant) -> Optional[float]:
    """The call's `timeout` as Herald's dispatcher cuts it: to the time the run has left (a None
    meaning the terminal's timeout then); None when Herald must decide (no run deadline)."""
    limit = bound.get("timeout")
    deadline = spec.get("deadline")
    if deadline is None:
        return None if limit is None else float(limit)
    if limit is None:
        limit = spec["timeout"]
    return min(float(limit), max(0.0, float(deadline) - time.monotonic()))
