"""Backend mode: the tool calls a run's supervisor answers itself, next to the script.

Stdlib only, Python >= 3.8 (the sandbox package). The schemas of the tools that may run here
come once, in the supervisor's prepare frame ("tool_specs"), so each run's start frame, on the
run's critical path, stays small; each run's start frame (and each kernel cell's code frame)
brings its grant ("tools"). Their types and their guard are wire/grant.py's (ToolSpec, ToolGrant,
take_grant); the frames are wire/frames.py's.

Policy, in the Dispatcher's order (herald/runtime/dispatcher.py):
- A call of a tool not in "allowed" goes to Herald uncounted: Herald refuses it, as always.
- The budget: every allowed call is counted here. A call past the budget is held until the calls
  running here have reported, then goes to Herald, whose count then matches this one and which
  refuses it with its usual message. (Herald counts each call it serves and each record below,
  so its count never runs ahead of this one and it never refuses what was counted here.)
- With "roots", a call whose path (or its schema's default path, for search_files ".") lies
  outside the workspace or in a mask as written goes to Herald, whose policy decides (and
  refuses in its words). Where it leads is checked on the object the tool opens, after the
  call's turn came (toolcore/fileaccess.py, toolcore/callroots.py): a path whose links lead out goes to Herald
  then, before anything was read or written.
- A tool in "local" has its arguments bound here (toolcore.bind_arguments, the same messages),
  then runs on a worker thread with the tool core (toolcore/textfiles.py) over OsFiles; calls touching
  the same path take turns; `search_files` runs the search core (search/core.py) over the same files,
  ripgrep in a bash of its own when the backend has it. Its reply goes straight to the script,
  and a RecordFrame (wire/frames.py) to Herald, which logs it to the transcript and counts it.
- `terminal` runs in the supervisor's shell (shell/localshell.py), one command at a time; its record
  carries the directory after it ("cwd"), which Herald's session shell takes up. Output past the
  cap goes to Herald as the call with the output it made ("ran"), and Herald caps, spills, counts
  and answers it. A terminal call Herald runs (handed over, or not granted) makes ours take up
  the state file again before its next command.
- Anything the core does not answer (a missing file, whose "did you mean" needs Herald's walk, a
  `~` path, a failed write or any other OSError, whose words are the backend's, a result too
  large to encode) goes to Herald as the call it was, which runs it there the usual way: nothing
  has changed here before such a hand-over.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..toolcore.callroots import Confinement
from ..wire.frames import CallFrame
from ..wire.grant import GrantError, ToolSpec, tool_specs
from .budget import CallBudget
from .taken import LocalGrant, take_grant

if TYPE_CHECKING:
    from .workers import Done, Workers

# The tool core (textfiles.TOOLS, the terminal, the search: grant.TOOL_NAMES), those modules and
# the workers (beside/workers.py) are imported by `load`, once the script is starting, so that a
# supervisor starts as fast as before.


class LocalTools:
    """The supervisor's local tool calls. `route` is called on the supervisor's loop; workers
    report through `done` and a byte on `wake_fd`, and the loop collects them with `finished`."""

    def __init__(self, wake_fd: int, max_workers: int = 16) -> None:
        self.wake_fd = wake_fd
        self.max_workers = max(1, max_workers)  # the script's client runs at most 16 calls at once too
        self.grant: Optional[LocalGrant] = None
        self.specs: Dict[str, ToolSpec] = {}  # the schemas of the tools that may run here (set_specs)
        self.budget = CallBudget(0)  # the run's, as counted here (set_grant)
        self.in_flight = 0
        self.held: List[CallFrame] = []  # over the budget: go to Herald once nothing runs here
        self.cwd = "/"
        self._workers: Optional[Workers] = None  # once loaded
        self._done: List[Done] = []
        self._lock = threading.Lock()

    def set_specs(self, specs: Any) -> None:
        """The prepare frame's "tool_specs" (malformed: none, so every call goes to Herald)."""
        try:
            self.specs = tool_specs(specs)
        except GrantError:
            self.specs = {}

    def set_grant(self, grant: Any) -> None:
        """A new run or kernel cell: its grant (None or malformed: every call goes to Herald)."""
        try:
            self.grant = take_grant(grant, self.specs)
        except GrantError:
            self.grant = None
        self.budget = CallBudget(0 if self.grant is None else self.grant["max_calls"])
        if self.grant is not None:
            self.cwd = self.grant["cwd"]

    def load(self) -> None:
        """Import the tool core and start the workers (the supervisor calls this while the
        script's interpreter starts; the first local call would otherwise)."""
        if self._workers is None:
            from .workers import Workers

            self._workers = Workers(self.max_workers, self._finish)

    def set_cwd(self, cwd: Any) -> None:
        """Herald's shell moved (a call it served): so do the tools here."""
        if isinstance(cwd, str) and cwd.startswith("/"):
            self.cwd = cwd
            self._follow()

    def route(self, call: CallFrame) -> bool:
        """True when the call is taken here (held or run); False: send it to Herald now."""
        grant = self.grant
        name = call.get("tool")
        if grant is None or not isinstance(name, str) or name not in grant["allowed"]:
            return False
        if name == "terminal" and name not in grant["local"]:
            self._follow()  # Herald's shell runs it: ours takes up what it leaves
        if not self.budget.take():
            if self.in_flight:
                self.held.append(call)
                return True
            return False
        spec = grant["local"].get(name)
        if spec is None:
            return False
        path = call["args"].get("path") if isinstance(call.get("args"), dict) else None
        if path is None:  # search_files' path is optional: the policy looks at its default
            path = spec["properties"].get("path", {}).get("default")
        if isinstance(path, str) and path.startswith("~"):
            return False  # the backend's HOME: Herald's backend expands it
        confinement = grant.get("confinement")
        if confinement is not None and isinstance(path, str) and not inside_roots(
                path, self.cwd, confinement, bool(spec.get("writes"))):
            return False  # Herald's policy decides (and refuses in its words)
        self.in_flight += 1
        self.load()
        assert self._workers is not None
        self._workers.submit(call, spec, grant, self.cwd)
        return True

    def finished(self) -> List[Done]:
        """Calls done since the last look, then the held ones once nothing runs here."""
        with self._lock:
            done, self._done = self._done, []
        self.in_flight -= len(done)  # each one ran on a worker
        for number, frame, record in done:
            if record is not None and isinstance(record.get("cwd"), str):
                self.cwd = record["cwd"]  # a `cd` in the terminal here moves the file tools too
            elif number is None and isinstance(frame, dict) and isinstance(frame.get("ran"), dict):
                self.cwd = frame["ran"]["cwd"]  # ran here; Herald only caps its output
            elif number is None and isinstance(frame, dict) and frame.get("tool") == "terminal":
                self._follow()  # handed over: Herald's shell runs it
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

    def _follow(self) -> None:
        if self._workers is not None:
            self._workers.follow(self.cwd)

    def _finish(self, item: Done) -> None:
        with self._lock:
            self._done.append(item)
        try:
            os.write(self.wake_fd, b"\0")
        except OSError:  # full: the loop is awake already
            pass

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()


def inside_roots(path: str, cwd: str, confinement: Confinement, writes: bool) -> bool:
    """Whether `path`, as written (relative to `cwd`), is within reach of `confinement`: a quick
    look that sends what is plainly out to Herald at once. Where its links lead is checked by
    the file operation on what it opens (toolcore/fileaccess.py)."""
    full = posixpath.normpath(posixpath.join(cwd, path))
    return "\0" not in full and confinement.refusal(full, full, writes) is None
