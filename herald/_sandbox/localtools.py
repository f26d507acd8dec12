"""Backend mode: the tool calls a run's supervisor answers itself, next to the script.

Stdlib only, Python >= 3.8 (the sandbox package). Herald sends a grant with each run's start
frame (and each kernel cell's code frame), under the key "tools":

    {"allowed": [names],          every tool the script may call (the Dispatcher's allow-list)
     "local": {name: {"properties", "required", "refused"}},   the ones run here, with their schema
     "max_calls": n,               the run's call budget
     "cwd": "/dir",                the session's current directory (updated by CWD frames)
     "files": {"read_max_bytes", "read_max_line_chars", "read_max_chars"}}

Policy, in the Dispatcher's order (herald/runtime/dispatcher.py):
- A call of a tool not in "allowed" goes to Herald uncounted: Herald refuses it, as always.
- The budget: every allowed call is counted here. A call past the budget is held until the calls
  running here have reported, then goes to Herald, whose count then matches this one and which
  refuses it with its usual message. (Herald counts each call it serves and each record below,
  so its count never runs ahead of this one and it never refuses what was counted here.)
- A tool in "local" has its arguments bound here (toolcore.bind_arguments, the same messages),
  then runs on a worker thread with the tool core (textfiles.py) over OsFiles; calls touching
  the same path take turns. Its reply goes straight to the script, and a "record" frame to
  Herald, which logs it to the transcript and counts it:
      {"type": "record", "tool", "args": preview, "error"?: {...}, "duration_ms", "reply_bytes"}
- Anything the core does not answer (a missing file, whose "did you mean" needs Herald's walk, a
  `~` path, a failed write or any other OSError, whose words are the backend's, a result too
  large to encode) goes to Herald as the call it was, which runs it there the usual way: nothing
  has changed here before such a hand-over.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import frames
from .fileaccess import OsFiles, resolve_path
from .protocol import HEADER, ProtocolError, encode_frame
from .textfiles import TOOLS, FileMissing
from .toolcore import ToolError, bind_arguments, preview


class HandOver(Exception):
    """The call goes to Herald: a failed write is reported in the words of Herald's backend."""


class BackendFiles(OsFiles):
    """OsFiles whose failed writes hand the call over (the file is unchanged then)."""

    def write_bytes(self, path: str, data: bytes) -> None:
        try:
            super().write_bytes(path, data)
        except OSError:
            raise HandOver() from None


# A finished local call: (connection number, reply frame, record) or, handed over, (None, call, None).
Done = Tuple[Optional[int], Any, Optional[Dict[str, Any]]]


class LocalTools:
    """The supervisor's local tool calls. `route` is called on the supervisor's loop; workers
    report through `done` and a byte on `wake_fd`, and the loop collects them with `finished`."""

    def __init__(self, wake_fd: int, max_workers: int = 4) -> None:
        self.wake_fd = wake_fd
        self.max_workers = max(1, max_workers)
        self.grant: Optional[Dict[str, Any]] = None
        self.calls = 0
        self.in_flight = 0
        self.held: List[Dict[str, Any]] = []  # over the budget: go to Herald once nothing runs here
        self.cwd = "/"
        self.files = BackendFiles(0)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._done: List[Done] = []
        self._lock = threading.Lock()
        self._paths: Dict[str, List[Any]] = {}  # path -> [its lock, calls using it]

    def set_grant(self, grant: Any, max_parallel: Any = None) -> None:
        """A new run or kernel cell: its grant (None or malformed: every call goes to Herald)."""
        self.grant = grant if _valid(grant) else None
        self.calls = 0
        if self.grant is not None:
            self.cwd = self.grant["cwd"]
            self.files = BackendFiles(int(self.grant["files"]["read_max_bytes"]))
            if isinstance(max_parallel, int) and max_parallel > 0:
                self.max_workers = max_parallel

    def set_cwd(self, cwd: Any) -> None:
        if isinstance(cwd, str) and cwd.startswith("/"):
            self.cwd = cwd

    def route(self, call: Dict[str, Any]) -> bool:
        """True when the call is taken here (held or run); False: send it to Herald now."""
        grant = self.grant
        name = call.get("tool")
        if grant is None or not isinstance(name, str) or name not in grant["allowed"]:
            return False
        if self.calls >= grant["max_calls"]:
            if self.in_flight:
                self.held.append(call)
                return True
            return False
        self.calls += 1
        spec = grant["local"].get(name)
        if spec is None:
            return False
        path = call["args"].get("path") if isinstance(call.get("args"), dict) else None
        if isinstance(path, str) and path.startswith("~"):
            return False  # the backend's HOME: Herald's backend expands it
        self.in_flight += 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="herald-local-tool")
        self._pool.submit(self._run, call, spec, grant, self.cwd, self.files)
        return True

    def finished(self) -> List[Done]:
        """Calls done since the last look, then the held ones once nothing runs here."""
        with self._lock:
            done, self._done = self._done, []
        self.in_flight -= len(done)  # each one ran on a worker
        if self.held and not self.in_flight:
            held, self.held = self.held, []
            done.extend((None, call, None) for call in held)
        return done

    def wait_idle(self, timeout: float) -> None:
        """Let calls still running finish (the script exited while they ran), within `timeout`."""
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            with self._lock:
                pending = len(self._done)
            if self.in_flight <= pending:
                return
            time.sleep(0.005)

    # -- on a worker thread ----------------------------------------------------------------

    def _run(self, call: Dict[str, Any], spec: Dict[str, Any], grant: Dict[str, Any], cwd: str, files: OsFiles) -> None:
        name = call["tool"]
        started = time.perf_counter()
        try:
            try:
                bound = bind_arguments(name, spec["properties"], spec["required"], call.get("args"), spec["refused"])
                key = resolve_path(cwd, bound["path"]) if isinstance(bound.get("path"), str) and bound["path"].strip() else ""
                lock = self._hold(key)
                try:
                    with lock:
                        reply: Dict[str, Any] = {"result": TOOLS[name](files, cwd, grant["files"], bound)}
                finally:
                    self._release(key)
            except ToolError as exc:
                reply = {"error": {"type": exc.error_type, "message": str(exc)}}
            frame = encode_frame(dict(reply, id=call.get("id")))
        except (FileMissing, HandOver, OSError, ValueError, ProtocolError, TypeError, KeyError):
            self._finish((None, call, None))  # Herald runs it the usual way
            return
        except Exception:  # a bug here must not cost the script its call: Herald runs it
            self._finish((None, call, None))
            return
        record: Dict[str, Any] = {
            "type": frames.RECORD,
            "tool": name,
            "args": preview(call.get("args")),
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "reply_bytes": len(frame) - HEADER.size,
        }
        if "error" in reply:
            record["error"] = reply["error"]
        self._finish((call["conn"], frame, record))

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

    def _finish(self, item: Done) -> None:
        with self._lock:
            self._done.append(item)
        try:
            os.write(self.wake_fd, b"\0")
        except OSError:  # full: the loop is awake already
            pass

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _valid(grant: Any) -> bool:
    checks: List[Callable[[Any], bool]] = [
        lambda g: isinstance(g, dict),
        lambda g: isinstance(g.get("allowed"), list) and all(isinstance(n, str) for n in g["allowed"]),
        lambda g: isinstance(g.get("local"), dict) and all(
            isinstance(s, dict) and isinstance(s.get("properties"), dict) and isinstance(s.get("required"), list)
            and isinstance(s.get("refused"), dict) and n in TOOLS for n, s in g["local"].items()
        ),
        lambda g: isinstance(g.get("max_calls"), int),
        lambda g: isinstance(g.get("cwd"), str) and g["cwd"].startswith("/"),
        lambda g: isinstance(g.get("files"), dict) and all(isinstance(g["files"].get(k), int) for k in
                                                            ("read_max_bytes", "read_max_line_chars", "read_max_chars")),
    ]
    return all(check(grant) for check in checks)
