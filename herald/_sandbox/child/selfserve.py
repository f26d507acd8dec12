"""Host mode: the file reads a script's own process answers, without a round trip to Herald.

Stdlib only, Python >= 3.8 (the sandbox package). With the local backend a host-mode script runs
on the machine whose files its tools read, and its own `open()` already reads what `read_file`
reads there, so answering `read_file` in the script's process gives it nothing new and saves the
trip through Herald (policy/grant.py says which runs get a grant, and why it is safe).
The grant comes in the start frame ("tools", with the schemas in "tool_specs"; a kernel's with
each cell) as the supervisor's does (wire/grant.py); it always carries "roots": the paths
Herald's policy lets the tool read that this process also sees as Herald does.

Policy:
- Counting is Herald's: every call of a tool in "allowed" counts, answered here or not. Past
  "max_calls" a call goes to Herald marked "past_budget", and Herald refuses it (its own count
  may lag behind the records still in the pipe).
- Answered here: a granted tool whose path lies inside "roots" (and outside their masks) as
  written and, checked on the file the core opened, where its links lead, when the core answers
  without an error. Anything else (a `~` path, a missing file and
  its "did you mean", a masked credential file, any error at all) goes to Herald as the call it
  was, which answers it in its own words: nothing has happened here before such a hand-over.
- Each answer is reported on the control pipe as a RECORD frame (one write under PIPE_BUF,
  atomic beside other threads' records) before the call returns: Herald counts and logs it, and
  a killed script's records are still in the pipe for Herald to read.
- After a fork (multiprocessing) neither process answers anything itself (child/client.py): their
  counts would each start from the same number. A kernel's grant lasts one cell.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional

from ..beside.answer import answer_call
from ..beside.budget import CallBudget
from ..beside.localtools import inside_roots
from ..beside.taken import LocalGrant, take_grant
from ..toolcore.callroots import Confinement
from ..toolcore.fileaccess import OsFiles
from ..toolcore.textfiles import TOOLS
from ..wire.framing import encode_frame
from ..wire.grant import GrantError, tool_specs
from .routes import HERALD, HERE, PAST_BUDGET

# The tools a script's own process may answer: the reads. A write stays with Herald, whose
# per-path locks order it with the other calls touching the file.
READ_TOOLS = ("read_file",)
PIPE_ATOMIC_BYTES = 4096  # PIPE_BUF on Linux: a write of at most this many bytes is never split


class SelfServe:
    """One run's (or kernel cell's) answers in the script's process; thread-safe."""

    def __init__(self, grant: LocalGrant, confinement: Confinement, ctl_fd: int) -> None:
        self._grant = grant
        self._ctl_fd = ctl_fd
        self._allowed = frozenset(grant["allowed"])
        self._budget = CallBudget(grant["max_calls"])
        self._confinement = confinement
        self._files = OsFiles(int(grant["files"]["read_max_bytes"]), self._confinement)
        self.cwd: str = grant["cwd"]

    @classmethod
    def from_start(cls, grant: Any, specs: Any, ctl_fd: int) -> Optional[SelfServe]:
        """The answers a start frame's "tools" and "tool_specs" grant; None when none (or malformed)."""
        try:
            taken = take_grant(grant, {k: v for k, v in tool_specs(specs).items() if k in READ_TOOLS})
        except GrantError:
            return None
        if taken["confinement"] is None:
            return None  # without roots nothing could be answered here
        return cls(taken, taken["confinement"], ctl_fd)

    def take(self, tool: str) -> str:
        """Count a call of `tool` and say where it goes: HERE (try `answer`), HERALD, or
        PAST_BUDGET (to Herald, marked)."""
        if tool not in self._allowed:
            return HERALD  # Herald refuses it, uncounted
        if not self._budget.take():
            return PAST_BUDGET
        return HERE if tool in self._grant["local"] else HERALD

    def answer(self, tool: str, args: Any, call_id: int) -> Optional[List[Any]]:
        """[the result] of a call `take` sent HERE, reported to Herald; None: send it to Herald."""
        path = args.get("path") if isinstance(args, dict) else None
        if not isinstance(path, str) or not path or path.startswith("~"):
            return None
        cwd = self.cwd
        if not inside_roots(path, cwd, self._confinement, False):
            return None
        try:
            # The arguments as they came in the record (Herald previews them): a few short values.
            reply, _, said = answer_call(tool, self._grant["local"][tool], args, call_id,
                                         lambda bound: TOOLS[tool](self._files, cwd, self._grant["files"], bound),
                                         args, encode=False)
            if "error" in reply:
                return None  # an error of any kind is Herald's to word (see the module's policy)
            record = encode_frame(said)
        except Exception:
            return None
        if len(record) > PIPE_ATOMIC_BYTES:
            return None  # a record that long could interleave with another thread's
        try:
            os.write(self._ctl_fd, record)
        except OSError:  # Herald is gone: its own call says so
            return None
        return [reply["result"]]

    def moved(self, cwd: Any) -> None:
        """Herald's session directory moved (a CWD frame before a reply)."""
        if isinstance(cwd, str) and cwd.startswith("/"):
            self.cwd = cwd


def warm_up(rounds: int = 12) -> None:
    """Answer a few reads of this module's own file (records into /dev/null), so that a
    zygote's forks find the path ready: the interpreter specialises code as it runs it, and a
    fork that did that itself copied the pages it wrote (~0.3 ms of a run's first read here).
    Never raises: the zygote serves without it."""
    here = os.path.dirname(os.path.abspath(__file__))
    number = {"type": "integer", "minimum": 1, "default": 1}
    spec = {"properties": {"path": {"type": "string"}, "offset": number, "limit": number},
            "required": ["path"], "refused": {}, "writes": False}
    grant = {"allowed": ["read_file"], "local": ["read_file"], "max_calls": rounds, "cwd": here,
             "files": {"read_max_bytes": 1 << 20, "read_max_line_chars": 2000, "read_max_chars": 100000},
             "roots": {"write": [], "read": [here + "/"], "masked": []}}
    try:
        sink = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for _ in range(rounds):
            serve = SelfServe.from_start(grant, {"read_file": spec}, sink)
            if serve is not None and serve.take("read_file") == HERE:
                serve.answer("read_file", {"path": os.path.basename(__file__), "limit": 5}, 1)
    except Exception:
        pass
    finally:
        os.close(sink)

