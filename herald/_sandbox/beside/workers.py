"""The supervisor's workers for the tool calls it answers itself (beside/localtools.py has the policy).

Stdlib only, Python >= 3.8 (the sandbox package). Each call runs on a worker thread: its
arguments bound (toolcore/base.py), the tool core (toolcore/textfiles.py) over the backend's own files, calls
touching one path taking turns, or the search (search/core.py, in beside/searchplace.py's place), which only
reads and takes no turns; the outcome is reported as a `Done` (see beside/localtools.py).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..shell.localshell import EMPTY_COMMAND, LocalShell, Overflow, ShellGone
from ..toolcore.base import ToolError, preview
from ..toolcore.fileaccess import OsFiles, resolve_path
from ..toolcore.textfiles import REFUSED, TOOLS, FileMissing
from ..wire import frames
from ..wire.framing import ProtocolError
from ..wire.grant import ToolSpec
from .answer import answer_call
from .taken import LocalGrant

# A finished local call: (connection number, reply frame, record) or, handed over, (None, call, None).
Done = Tuple[Optional[int], Any, Optional[frames.RecordFrame]]

class HandOver(Exception):
    """The call goes to Herald: a failed write is reported in the words of Herald's backend."""


class BackendFiles(OsFiles):
    """OsFiles whose failed writes hand the call over (the file is unchanged then)."""

    def write_bytes(self, path: str, data: bytes) -> None:
        try:
            super().write_bytes(path, data)
        except OSError:
            raise HandOver() from None


class Workers:
    """A pool of worker threads and the per-path locks of the calls running on it."""

    def __init__(self, max_workers: int, report: Callable[[Done], None]) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="herald-local-tool")
        self._report = report
        self._lock = threading.Lock()
        self._paths: Dict[str, List[Any]] = {}  # path -> [its lock, calls using it]
        self.shell: Optional[LocalShell] = None  # the terminal's, once a call needs it
        self._search_cache: Dict[str, Any] = {}  # whether ripgrep is here, once a search asked
        self._search_lock = threading.Lock()
        self._closed = threading.Event()  # stops the searches still running

    def submit(self, call: frames.CallFrame, spec: ToolSpec, grant: LocalGrant, cwd: str) -> None:
        self._pool.submit(self._run, call, spec, grant, cwd)

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=False)
        if self.shell is not None:
            self.shell.close()

    # -- on a worker thread ----------------------------------------------------------------

    def _run(self, call: frames.CallFrame, spec: ToolSpec, grant: LocalGrant, cwd: str) -> None:
        name = call["tool"]
        files = BackendFiles(int(grant["files"]["read_max_bytes"]), grant.get("confinement"))
        moved: List[str] = []  # terminal: the directory after the command

        def run(bound: Dict[str, Any]) -> Any:
            if name == "search_files":  # it only reads, and may take long: no path takes turns for it
                return self._search(bound, grant, files.default_max_bytes, cwd)
            key = (
                resolve_path(cwd, bound["path"]) if isinstance(bound.get("path"), str) and bound["path"].strip() else ""
            )
            lock = self._hold(key)
            try:
                with lock:  # terminal calls (no path) take turns in the one shell
                    if name != "terminal":
                        return TOOLS[name](files, cwd, grant["files"], bound)
                    result = self._terminal(bound, grant)
                    moved.append(self.shell.cwd if self.shell is not None else cwd)
                    return result
            finally:
                self._release(key)

        try:
            reply, frame, record = answer_call(
                name, spec, call.get("args"), call.get("id"), run, preview(call.get("args"))
            )
            if "error" in reply and reply["error"]["type"] == REFUSED:
                raise HandOver()  # a path that led out of reach: Herald's Gate words it
        except Overflow as over:  # Herald caps it and keeps the spill file: the answer is its
            assert self.shell is not None
            ran: frames.RanOutput = {
                "output": over.output.decode("latin-1"),
                "skipped": over.skipped,
                "tail": over.tail.decode("latin-1"),
                "exit_code": over.exit_code,
                "timed_out": over.timed_out,
                "note": over.note,
                "cwd": self.shell.cwd,
                "command_path": self.shell.scripts.command_path,
            }
            handed: frames.CallFrame = dict(call, ran=ran)  # type: ignore[assignment]
            self._report((None, handed, None))
            return
        except (FileMissing, HandOver, ShellGone, OSError, ValueError, ProtocolError, TypeError, KeyError):
            self._report((None, call, None))  # Herald runs it the usual way
            return
        except Exception:  # a bug here must not cost the script its call: Herald runs it
            self._report((None, call, None))
            return
        if moved:
            record["cwd"] = moved[0]
        self._report((call["conn"], frame, record))

    def _terminal(self, bound: Dict[str, Any], grant: LocalGrant) -> Dict[str, Any]:
        """The terminal tool, as Herald's handler and dispatcher run it (timeout cut to the run's time)."""
        spec = grant["shell"]
        if not bound["command"].strip():
            raise ToolError(EMPTY_COMMAND)
        if self.shell is None:
            self.shell = LocalShell(spec)
        elif self.shell.spec is not spec:
            self.shell.update(spec)
        limit = spec["timeout"] if bound["timeout"] is None else bound["timeout"]
        if spec.get("deadline") is not None:
            limit = min(limit, max(0.0, spec["deadline"] - time.monotonic()))
        workdir = bound.get("workdir")
        if workdir and (workdir == "~" or workdir.startswith("~/")):
            raise HandOver()  # the backend's HOME: Herald's backend expands it
        return self.shell.run(
            bound["command"], float(limit), resolve_path(self.shell.cwd, workdir) if workdir else None
        )

    def _search(self, bound: Dict[str, Any], grant: LocalGrant, read_max_bytes: int, cwd: str) -> Dict[str, Any]:
        """search_files, as Herald's handler and dispatcher run it (timeout cut to the run's time)."""
        # Imported at the first search, not with the workers: most runs never search, and the
        # search modules (globs, ignore files, dataclasses) would add to every supervisor's start.
        from ..search.core import search_files
        from .searchplace import SupervisorPlace, time_limit

        spec = grant["search"]
        limit = time_limit(bound, spec)
        if limit is None:
            raise HandOver()  # no run deadline and no timeout: Herald decides what that means
        place = SupervisorPlace(
            spec, read_max_bytes, cwd, self._search_cache, self._search_lock, self._closed, grant.get("confinement")
        )
        return search_files(place, dict(bound, timeout=limit))

    def follow(self, cwd: str) -> None:
        """Herald's shell ran a command: ours takes up its state and `cwd` before the next one."""
        if self.shell is not None:
            self.shell.follow(cwd)

    def _hold(self, key: str) -> threading.Lock:
        """The lock of calls touching `key` (one path): two patches of a file take turns."""
        with self._lock:
            entry = self._paths.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
            lock: threading.Lock = entry[0]
            return lock

    def _release(self, key: str) -> None:
        with self._lock:
            entry = self._paths[key]
            entry[1] -= 1
            if not entry[1]:
                del self._paths[key]  # a lock per path in use, not per path ever touched
