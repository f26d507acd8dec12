"""Every frame type Herald and its sandbox processes exchange, by channel. A frame is a JSON object
(protocol.py); its `type` (`op` on the fork server's socket) is one of these names.

RPC socket (script -> Herald; replies carry the call's `id` and `result` or `error`):
    AUTH      {"type": AUTH, "token"}                          first frame of every connection
    a call may say "past_budget": true: the script's side counted it past the run's budget
    (host mode, selfserve.py), and Herald refuses it whatever its own count says
    CWD       {"type": CWD, "cwd"}                             Herald, just before a reply: the session's
              directory moved (host mode, when the script answers file reads itself)

Control pipe of a sandbox child (bootstrap.py -> Herald):
    READY     {"type": READY, "pid"}                           it can take a run
    DONE      {"type": DONE, "exit_code"}                      a kernel cell finished
    LEAVING   {"type": LEAVING}                                a one-shot script flushes its output now;
              its EXIT follows (a supervisor sends both to Herald in one write; others ignore it)
    EXIT      {"type": EXIT, "exit_code"}                      the script is over, the process goes
    RECORD    as on the exec channel: a call the script's process answered itself (selfserve.py)
    EOF       (made up by the reader when the pipe closes)
    Herald's start frame (StartFrame) and kernel cells (CodeFrame) come the other way; in host mode
    they may carry "tools", the grant of the calls the script answers itself, and the start frame
    their schemas, "tool_specs"

Exec channel of in-backend runs (Herald <-> supervisor.py):
    PREPARE   {"type": PREPARE, "env", "loader", "fork_server"}  Herald: start the script interpreter
              (fork_server: the backend zygote's socket path, or null to spawn)
    START     {"type": START, "mode", "cwd", "code"|"sentinel", "line_buffered"}
    CODE      {"type": CODE, "code", "line_buffered"}          the next kernel cell
    KILL      {"type": KILL, "grace"}                          SIGTERM the tree, SIGKILL after grace
    CLOSE     {"type": CLOSE, "remove"?: true}                 SIGKILL the tree and leave; with "remove"
              (the Runtime is closing), remove the sandbox directory on the way out, then say:
    REMOVED   {"type": REMOVED, "ok"}                          supervisor: whether the directory is gone
    OUT, ERR  {"type": OUT|ERR, "data"}                        the script's output (latin-1 text)
    READY, DONE, EXIT as on the control pipe; FAILED {"type": FAILED, "error"}: the supervisor broke
    START and CODE may carry "tools": the grant of the tools the supervisor runs itself, whose
    schemas came once in PREPARE's "tool_specs" (localtools.py)
    RECORD    {"type": RECORD, "tool", "args", "error"?, "duration_ms", "reply_bytes"}  supervisor:
              a call it answered itself, for Herald's transcript and call count
    CWD       {"type": CWD, "cwd"}                             Herald: the session's directory moved

Fork server socket (client <-> zygote.py), key "op"; the client is Herald in host mode, a
run's supervisor (scriptproc.py) in the backend:
    FORK      {"op": FORK, "sandbox_dir"} + fds                 client: a child, please
    FORKED    {"op": FORKED, "pid"} or ERROR {"op": ERROR, "message"}
    EXIT      {"op": EXIT, "pid", "status"}                     a forked child exited
    REAP      {"op": REAP, "pid"}                               the client is done with that pid
    READY     {"op": READY, "pid"}                              host mode: once, after the pre-imports; its own pid

The TypedDicts below give each frame's shape; senders build frames as these types so a checker
sees a misspelt key, and readers cast a decoded frame once they have checked its `type`.
Stdlib only, Python >= 3.8, like the rest of this package.
"""

from __future__ import annotations

import sys
from typing import Any, Dict

if sys.version_info >= (3, 11):  # for the checker: NotRequired is not in 3.8's typing
    from typing import NotRequired, TypedDict
else:  # at run time the annotations below are never evaluated (postponed annotations)
    from typing import TypedDict

    NotRequired = None

AUTH = "auth"
READY = "ready"
DONE = "done"
LEAVING = "leaving"
EXIT = "exit"
EOF = "eof"
PREPARE = "prepare"
START = "start"
CODE = "code"
KILL = "kill"
CLOSE = "close"
REMOVED = "removed"
OUT = "out"
ERR = "err"
FAILED = "failed"
RECORD = "record"
CWD = "cwd"
FORK = "fork"
FORKED = "forked"
REAP = "reap"
ERROR = "error"


# -- shapes ---------------------------------------------------------------------------------
# RPC socket


class AuthFrame(TypedDict):
    type: str  # AUTH
    token: str


class CallFrame(TypedDict):
    id: int
    tool: str
    args: Dict[str, Any]
    conn: NotRequired[int]  # on the exec channel: which script connection it came from
    past_budget: NotRequired[bool]  # host mode: counted past the run's budget by the script's side


class ErrorInfo(TypedDict):
    type: str
    message: str


class ReplyFrame(TypedDict, total=False):
    id: int
    result: Any
    error: ErrorInfo
    conn: int


# Control pipe and exec channel


class ReadyFrame(TypedDict):
    type: str  # READY
    pid: NotRequired[int]


class LeavingFrame(TypedDict):
    type: str  # LEAVING


class StatusFrame(TypedDict):
    type: str  # DONE or EXIT
    exit_code: int


class PrepareFrame(TypedDict):
    type: str  # PREPARE
    env: Dict[str, Any]
    loader: str
    tool_specs: NotRequired[Dict[str, Any]]


class StartFrame(TypedDict, total=False):
    type: str  # START on the exec channel; absent on a child's control pipe
    mode: str  # "oneshot" or "kernel"
    socket: str
    token: str
    cwd: str
    code: str
    sentinel: str
    line_buffered: bool
    max_parallel: int
    tools: Dict[str, Any]  # the grant of the calls answered next to the script (localtools.py, selfserve.py)
    tool_specs: Dict[str, Any]  # host mode: their schemas (in-backend, PREPARE brings them)


class CodeFrame(TypedDict, total=False):
    type: str  # CODE on the exec channel
    code: str
    line_buffered: bool
    tools: Dict[str, Any]  # the grant for this cell (the supervisor's, or the script's own in host mode)


class KillFrame(TypedDict):
    type: str  # KILL
    grace: float


class OutputFrame(TypedDict):
    type: str  # OUT or ERR
    data: str  # latin-1 text: every byte survives JSON


class FailedFrame(TypedDict):
    type: str  # FAILED
    error: str


# Fork server socket


class ForkFrame(TypedDict):
    op: str  # FORK
    sandbox_dir: str


class ForkedFrame(TypedDict):
    op: str  # FORKED
    pid: int


class ChildExitFrame(TypedDict):
    op: str  # EXIT
    pid: int
    status: int

