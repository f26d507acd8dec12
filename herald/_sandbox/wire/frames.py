"""The wire contract: every frame Herald and its sandbox processes exchange, as types.

Each frame is a TypedDict below whose `type` (`op` on the fork server's socket) is a Literal tag.
Writers build frames as these types and encode them with protocol.encode_frame (length-prefixed
JSON, on the streams) or wire.encode_op (one JSON datagram, on the fork server's socket).
Readers never look into a decoded dict themselves: they pass it to their channel's guard in
wire/guards.py (`from_child`, `to_child`, `to_supervisor`, `from_supervisor`, `to_client`, `auth`,
`record`, `reply`, `from_zygote`, `to_zygote`), which checks its tag and fields against the table there
and returns the typed frame, or raises wire.FrameError. Stdlib only, Python >= 3.8, like the
rest of this package.

The channels (who writes -> who reads):

- RPC socket (script's child/client.py -> Herald's rpc/server.py, or the supervisor's supervisor/connections.py):
  AuthFrame first, then CallFrames; back: ReplyFrames (a ResultFrame or an ErrorFrame), a CwdFrame
  just before a reply when Herald moved the session's directory (host mode, when the script
  answers reads itself).
- Control pipe of a sandbox child (child/bootstrap.py <-> Herald's host/child.py, or a supervisor):
  to it StartFrame, then CodeFrames (kernel cells); from it ReadyFrame, DoneFrame,
  LeavingFrame, ExitFrame, RecordFrame (a call the script's process answered: child/selfserve.py).
- Exec channel of an in-backend run (Herald's backend/child.py <-> supervisor/loop.py): to it
  PrepareFrame, StartFrame, CodeFrame, KillFrame, CloseFrame, CwdFrame, ReplyFrames (with
  `conn`); from it ReadyFrame, OutputFrame, DoneFrame, ExitFrame, FailedFrame, RecordFrame,
  RemovedFrame, CallFrames (with `conn`).
- Fork server socket (child/zygote.py <-> its clients, procs/forking.py: Herald's host/zygote.py or a supervisor):
  ForkOp (+ 4 fds) and ReapOp to it; ForkedOp or ErrorOp, ChildExitOp, and in host mode one
  ZygoteReadyOp from it.

Calls and replies carry no tag (the hot path's bytes, and a refused frame's id read from the
front of its body: protocol.RefusedFrame): on a channel that carries them, a checked frame
without `type` is a call (from the script's side) or a reply (to it); the types are final, so
`"type" not in frame` tells a checker which. A reply is a ResultFrame or an ErrorFrame, which
its readers check with `guards.reply` (a malformed one breaks the link); Herald's Dispatcher
checks a call's tool and arguments and answers in words the script can act on
(runtime/dispatcher.py): a call is not dropped for its shape.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union, final

if sys.version_info >= (3, 11):  # for the checker: NotRequired is not in 3.8's typing
    from typing import Final, Literal, NotRequired, TypedDict
else:  # at run time the annotations below are never evaluated (postponed annotations)
    from typing import Final, Literal, TypedDict

    NotRequired = None
if TYPE_CHECKING:
    from .grant import ToolGrant, ToolSpec

AUTH: Final = "auth"
READY: Final = "ready"
DONE: Final = "done"
LEAVING: Final = "leaving"
EXIT: Final = "exit"
EOF: Final = "eof"
PREPARE: Final = "prepare"
START: Final = "start"
CODE: Final = "code"
KILL: Final = "kill"
CLOSE: Final = "close"
REMOVED: Final = "removed"
OUT: Final = "out"
ERR: Final = "err"
FAILED: Final = "failed"
RECORD: Final = "record"
CWD: Final = "cwd"
FORK: Final = "fork"
FORKED: Final = "forked"
REAP: Final = "reap"
ERROR: Final = "error"


# What a run's start frame says that its script hears from a supervisor (which gives it its own
# socket and token) as from Herald.
RUN_KEYS = ("mode", "cwd", "code", "sentinel", "line_buffered", "max_parallel")


# -- RPC socket ------------------------------------------------------------------------------


@final
class AuthFrame(TypedDict):
    type: Literal["auth"]
    token: str


@final
class RanOutput(TypedDict):
    """A terminal command the supervisor ran whose output passed its cap (beside/workers.py):
    Herald caps, spills and answers it (runtime/backend_tools.py `ran`)."""

    output: str  # latin-1 text, as OutputFrame's data
    skipped: int
    tail: str
    exit_code: int
    timed_out: bool
    note: str
    cwd: str
    command_path: str


@final
class CallFrame(TypedDict):
    id: int
    tool: str
    args: Dict[str, Any]
    conn: NotRequired[int]  # on the exec channel: which script connection it came from
    past_budget: NotRequired[bool]  # host mode: counted past the run's budget by the script's side
    ran: NotRequired[RanOutput]  # on the exec channel: a terminal call the supervisor ran, output over its cap


@final
class ErrorInfo(TypedDict):
    type: str  # ToolError's error_type in the script
    message: str  # what to do next
    rule: NotRequired[str]  # PolicyRefused: the rule that decided


@final
class ResultFrame(TypedDict):
    """A call's answer (Herald's: runtime/rpc/replies.py; next to the script: beside/answer.py)."""

    id: Any  # the call's (None for a frame refused before its id could be read: the link closes)
    result: Any
    conn: NotRequired[int]  # on the exec channel: the connection the call came from


@final
class ErrorFrame(TypedDict):
    """A call that failed or was refused: the script raises ToolError(message) of that type."""

    id: Any
    error: ErrorInfo
    conn: NotRequired[int]


# One guard reads both, wherever a reply arrives: guards.to_client (the script's RPC client),
# guards.to_supervisor (a supervisor relaying Herald's replies to its script's connections).
ReplyFrame = Union[ResultFrame, ErrorFrame]


@final
class CwdFrame(TypedDict):
    """Herald: the session's directory moved (a call it served ran `cd`)."""

    type: Literal["cwd"]
    cwd: str


# -- transactions: internal calls of the RPC socket ------------------------------------------
# A script's `transaction()` (child/transaction.py) sends these as the arguments of a CallFrame
# whose tool is TRANSACTION_CALL: no tool can have that name, no supervisor answers it, and
# Herald's Dispatcher serves it (runtime/transactions.py), checked by guards.transaction.

TRANSACTION_CALL: Final = "@transaction"


@final
class TransactionBegin(TypedDict):
    op: Literal["begin"]
    verify: Optional[str]  # the command whose exit status 0 keeps the changes
    timeout: Optional[float]  # the verify command's, seconds (None: terminal's default)
    workdir: Optional[str]  # the directory covered (None: the workspace); verify runs there


@final
class TransactionEnd(TypedDict):
    op: Literal["end"]
    id: str
    error: Optional[str]  # the exception the block raised (it rolls back), or None


TransactionRequest = Union[TransactionBegin, TransactionEnd]


@final
class TransactionOpened(TypedDict):
    id: str
    root: str  # the directory it covers, absolute on the backend


@final
class VerifyOutcome(TypedDict):
    command: str
    exit_code: Optional[int]  # None: it could not run (the error is in `output`)
    output: str  # the output's tail
    timed_out: bool


@final
class TransactionOutcome(TypedDict):
    committed: bool
    changed: List[str]  # relative to `root`, sorted; at most MAX_LISTED (`changed_count` has all)
    changed_count: int
    verify: Optional[VerifyOutcome]
    reason: Optional[str]  # why it rolled back
    conflicts: List[str]  # written by another run while it was open: kept as that run left them
    not_covered: List[str]  # left out of the snapshot by a limit: not rolled back


# -- control pipe and exec channel -----------------------------------------------------------


@final
class ReadyFrame(TypedDict):
    type: Literal["ready"]
    pid: NotRequired[int]  # a child's own pid (the supervisor's READY has none)


@final
class DoneFrame(TypedDict):
    """A kernel cell finished."""

    type: Literal["done"]
    exit_code: int


@final
class LeavingFrame(TypedDict):
    """A one-shot script flushes its output now; its ExitFrame follows (a supervisor sends both
    to Herald in one write; others ignore it)."""

    type: Literal["leaving"]


@final
class ExitFrame(TypedDict):
    """The script is over (its output sent), the process goes."""

    type: Literal["exit"]
    exit_code: int


@final
class EofFrame(TypedDict):
    """Never sent: made up by a reader when the control pipe closes."""

    type: Literal["eof"]


@final
class RecordFrame(TypedDict):
    """A call answered next to the script (beside/workers.py, child/selfserve.py): for Herald's count and
    transcript (runtime/backend_tools.py `record`)."""

    type: Literal["record"]
    tool: str
    args: Any  # a preview (supervisor) or the arguments as they came (script's process)
    duration_ms: float
    reply_bytes: int
    error: NotRequired[ErrorInfo]
    cwd: NotRequired[str]  # terminal: the directory after the command


@final
class PrepareEnv(TypedDict):
    passthrough: List[str]  # the names of the user's variables that travel (procs/environ.py)


@final
class PrepareFrame(TypedDict):
    """Herald: start the script interpreter (the supervisor's first frame)."""

    type: Literal["prepare"]
    env: PrepareEnv
    loader: str
    fork_server: Optional[str]  # the backend zygote's socket path, or None to spawn
    isolation: Optional[Dict[str, Any]]  # the script's confinement (confine/bwrap.py), or None
    tool_specs: NotRequired[Dict[str, ToolSpec]]  # schemas of the tools the supervisor may run


@final
class StartFrame(TypedDict):
    """A run. Herald's to a child's control pipe carries the socket and token; to a supervisor
    not (it gives the script its own); the supervisor's to its script the same as Herald's."""

    type: Literal["start"]
    mode: NotRequired[str]  # "oneshot" or "kernel"
    socket: NotRequired[str]
    token: NotRequired[str]
    cwd: NotRequired[Optional[str]]
    code: NotRequired[Optional[str]]  # one-shot
    sentinel: NotRequired[Optional[str]]  # kernel: ends each cell's output
    line_buffered: NotRequired[Optional[bool]]
    max_parallel: NotRequired[Optional[int]]
    tools: NotRequired[ToolGrant]  # the calls answered next to the script (checked by grant.take_grant)
    tool_specs: NotRequired[Dict[str, ToolSpec]]  # host mode: their schemas (in-backend, PREPARE brings them)


@final
class CodeFrame(TypedDict):
    """The next kernel cell."""

    type: Literal["code"]
    code: str
    line_buffered: NotRequired[Optional[bool]]
    tools: NotRequired[ToolGrant]  # the grant for this cell


@final
class KillFrame(TypedDict):
    """SIGTERM the script's tree, SIGKILL after `grace` seconds."""

    type: Literal["kill"]
    grace: float


@final
class CloseFrame(TypedDict):
    """SIGKILL the tree and leave; with `remove` (the Runtime closes) remove the sandbox
    directory on the way out, then send a RemovedFrame."""

    type: Literal["close"]
    remove: NotRequired[bool]


@final
class RemovedFrame(TypedDict):
    type: Literal["removed"]
    ok: bool  # whether the directory is gone


@final
class OutputFrame(TypedDict):
    type: Literal["out", "err"]
    data: str  # latin-1 text: every byte survives JSON


@final
class FailedFrame(TypedDict):
    """The supervisor itself broke (its last frame)."""

    type: Literal["failed"]
    error: str


# -- fork server socket ----------------------------------------------------------------------


@final
class ForkOp(TypedDict):
    """Client: a child, please (with 4 fds: stdout, stderr, control read, control write)."""

    op: Literal["fork"]
    sandbox_dir: str


@final
class ForkedOp(TypedDict):
    op: Literal["forked"]
    pid: int


@final
class ErrorOp(TypedDict):
    op: Literal["error"]
    message: str


@final
class ChildExitOp(TypedDict):
    """A forked child exited; `status` as Popen.returncode (-N: signal N)."""

    op: Literal["exit"]
    pid: int
    status: int


@final
class ReapOp(TypedDict):
    """The client is done with that pid: the zygote may reap it."""

    op: Literal["reap"]
    pid: int


@final
class ZygoteReadyOp(TypedDict):
    """Host mode: once, after the pre-imports; the zygote's own pid."""

    op: Literal["ready"]
    pid: int


# -- what each channel carries ---------------------------------------------------------------

FromChild = Union[ReadyFrame, DoneFrame, LeavingFrame, ExitFrame, RecordFrame]
ToChild = Union[StartFrame, CodeFrame]
ToSupervisor = Union[PrepareFrame, StartFrame, CodeFrame, KillFrame, CloseFrame, CwdFrame, ReplyFrame]
FromSupervisor = Union[ReadyFrame, OutputFrame, DoneFrame, ExitFrame, FailedFrame, RecordFrame, RemovedFrame, CallFrame]
ToClient = Union[CwdFrame, ReplyFrame]
ToZygote = Union[ForkOp, ReapOp]
FromZygote = Union[ZygoteReadyOp, ForkedOp, ErrorOp, ChildExitOp]
