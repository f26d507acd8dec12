"""Backend mode: the tool calls a run's supervisor answers itself, next to the script.

Stdlib only, Python >= 3.8 (the sandbox package). The schemas of the tools that may run here
come once, in the supervisor's prepare frame (they are the Runtime's, the same for every run),
under the key "tool_specs": {name: {"properties", "required", "refused", "writes"}}; so each
run's start frame, on the run's critical path, stays small. Herald sends a grant with each
run's start frame (and each kernel cell's code frame), under the key "tools":

    {"allowed": [names],          every tool the script may call (the Dispatcher's allow-list)
     "local": [names],             the ones run here (each with its schema in "tool_specs")
     "max_calls": n,               the run's call budget
     "cwd": "/dir",                the session's current directory (updated by CWD frames)
     "files": {"read_max_bytes", "read_max_line_chars", "read_max_chars"},
     "roots"?: {"write": ["/dir/"], "read": [...], "masked"?, "unmasked"?, "unmasked_read"?},
                                   the call's confinement (confinement.py): under a confining
                                   profile the workspace, and on the local backend the masks
     "shell"?: {"state_path", "cwd", "has_state", "bin", "max_output_bytes", "timeout", "time_left"},
                                   with "terminal" in "local": the session shell to share (localshell.py)
     "search"?: {"python_only", "bin", "max_output_bytes", "timeout", "time_left"}}
                                   with "search_files" in "local": what its place needs (searchplace.py)

Policy, in the Dispatcher's order (herald/runtime/dispatcher.py):
- A call of a tool not in "allowed" goes to Herald uncounted: Herald refuses it, as always.
- The budget: every allowed call is counted here. A call past the budget is held until the calls
  running here have reported, then goes to Herald, whose count then matches this one and which
  refuses it with its usual message. (Herald counts each call it serves and each record below,
  so its count never runs ahead of this one and it never refuses what was counted here.)
- With "roots", a call whose path (or its schema's default path, for search_files ".") lies
  outside the workspace or in a mask as written goes to Herald, whose policy decides (and
  refuses in its words). Where it leads is checked on the object the tool opens, after the
  call's turn came (fileaccess.py, confinement.py): a path whose links lead out goes to Herald
  then, before anything was read or written.
- A tool in "local" has its arguments bound here (toolcore.bind_arguments, the same messages),
  then runs on a worker thread with the tool core (textfiles.py) over OsFiles; calls touching
  the same path take turns; `search_files` runs the search core (search.py) over the same files,
  ripgrep in a bash of its own when the backend has it. Its reply goes straight to the script,
  and a "record" frame to Herald, which logs it to the transcript and counts it:
      {"type": "record", "tool", "args": preview, "error"?: {...}, "duration_ms", "reply_bytes"}
- `terminal` runs in the supervisor's shell (localshell.py), one command at a time; its record
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
from typing import Any, Callable, Dict, List, Optional, Tuple

from .confinement import Confinement
from .frames import CallFrame, RecordFrame

# The tools the core can run (textfiles.TOOLS, the terminal, the search): those modules and the
# workers (localcall.py) are imported by `load`, once the script is starting, so that a
# supervisor starts as fast as before.
TOOL_NAMES = ("read_file", "write_file", "patch", "terminal", "search_files")


# A finished local call: (connection number, reply frame, record) or, handed over, (None, call, None).
Done = Tuple[Optional[int], Any, Optional[RecordFrame]]


class LocalTools:
    """The supervisor's local tool calls. `route` is called on the supervisor's loop; workers
    report through `done` and a byte on `wake_fd`, and the loop collects them with `finished`."""

    def __init__(self, wake_fd: int, max_workers: int = 16) -> None:
        self.wake_fd = wake_fd
        self.max_workers = max(1, max_workers)  # the script's client runs at most 16 calls at once too
        self.grant: Optional[Dict[str, Any]] = None
        self.specs: Dict[str, Any] = {}  # the schemas of the tools that may run here (set_specs)
        self.calls = 0
        self.in_flight = 0
        self.held: List[CallFrame] = []  # over the budget: go to Herald once nothing runs here
        self.cwd = "/"
        self._workers: Any = None  # localcall.Workers, once loaded
        self._done: List[Done] = []
        self._lock = threading.Lock()

    def set_specs(self, specs: Any) -> None:
        """The prepare frame's "tool_specs" (malformed: none, so every call goes to Herald)."""
        self.specs = specs if valid_specs(specs) else {}

    def set_grant(self, grant: Any) -> None:
        """A new run or kernel cell: its grant (None or malformed: every call goes to Herald).
        Its "local" names become {name: schema} from the specs."""
        self.grant = resolved_grant(grant, self.specs)
        self.calls = 0
        if self.grant is not None:
            self.cwd = self.grant["cwd"]
            roots = self.grant.get("roots")
            self.grant["confinement"] = None if roots is None else Confinement.from_wire(roots)
            for timed in (self.grant.get("shell"), self.grant.get("search")):
                if timed is not None and timed.get("time_left") is not None:
                    timed["deadline"] = time.monotonic() + timed["time_left"]

    def load(self) -> None:
        """Import the tool core and start the workers (the supervisor calls this while the
        script's interpreter starts; the first local call would otherwise)."""
        if self._workers is None:
            from .localcall import Workers

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


def resolved_grant(grant: Any, specs: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """`grant` with its "local" names resolved to their schemas from `specs` (set_specs);
    None when it is None, malformed or names a tool without a schema."""
    if isinstance(grant, dict) and isinstance(grant.get("local"), list):
        names = grant["local"]
        known = all(isinstance(name, str) and name in specs for name in names)
        grant = dict(grant, local={name: specs[name] for name in names}) if known else None
    return grant if _valid(grant) else None


def inside_roots(path: str, cwd: str, confinement: Confinement, writes: bool) -> bool:
    """Whether `path`, as written (relative to `cwd`), is within reach of `confinement`: a quick
    look that sends what is plainly out to Herald at once. Where its links lead is checked by
    the file operation on what it opens (fileaccess.py)."""
    full = posixpath.normpath(posixpath.join(cwd, path))
    return "\0" not in full and confinement.refusal(full, full, writes) is None


def valid_specs(specs: Any) -> bool:
    return isinstance(specs, dict) and all(
        isinstance(s, dict) and isinstance(s.get("properties"), dict) and isinstance(s.get("required"), list)
        and isinstance(s.get("refused"), dict) and n in TOOL_NAMES for n, s in specs.items()
    )


def _prefixes(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, str) and p.startswith("/") for p in value)


def _valid(grant: Any) -> bool:
    """A grant whose "local" names were resolved to their specs (set_grant)."""
    checks: List[Callable[[Any], bool]] = [
        lambda g: isinstance(g, dict),
        lambda g: isinstance(g.get("allowed"), list) and all(isinstance(n, str) for n in g["allowed"]),
        lambda g: isinstance(g.get("local"), dict) and valid_specs(g["local"]),
        lambda g: isinstance(g.get("max_calls"), int),
        lambda g: isinstance(g.get("cwd"), str) and g["cwd"].startswith("/"),
        lambda g: isinstance(g.get("files"), dict) and all(isinstance(g["files"].get(k), int) for k in
                                                            ("read_max_bytes", "read_max_line_chars", "read_max_chars")),
        lambda g: "terminal" not in g["local"] or (isinstance(g.get("shell"), dict) and all(
            isinstance(g["shell"].get(k), str) for k in ("state_path", "cwd", "bin")) and all(
            isinstance(g["shell"].get(k), (int, float)) for k in ("max_output_bytes", "timeout"))),
        lambda g: "search_files" not in g["local"] or (isinstance(g.get("search"), dict) and all(
            isinstance(g["search"].get(k), t) for k, t in (("python_only", bool), ("bin", str), ("max_output_bytes", int),
                                                           ("timeout", (int, float)), ("time_left", (int, float, type(None)))))),
        lambda g: g.get("roots") is None or (isinstance(g["roots"], dict) and "write" in g["roots"]
                                             and "read" in g["roots"] and all(_prefixes(g["roots"].get(k, [])) for k in
                                                                              ("write", "read", "masked", "unmasked",
                                                                               "unmasked_read"))),
    ]
    return all(check(grant) for check in checks)
