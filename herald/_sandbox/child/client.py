"""The sandbox child's side of the RPC: thread-safe calls, one connection per calling thread.

Part of the sandbox package (see __init__.py for its rules): stdlib only, Python >= 3.8.

Concurrency policy: a call borrows an idle connection (the most recently used one), sends its
frame and reads its own reply on it, then gives the connection back. Threads that call at once
get connections of their own, opened on demand up to `max_connections`, the run's cap on
concurrent calls (further callers wait for a free one). Why not one shared connection: a reply
then has to be handed from whichever thread read it to the thread that owns it, and on this
kind of machine every such cross-thread wake-up costs about as much as the socket round trip.
With a connection per caller, a reply wakes exactly the thread that waits for it.

In host mode a run's grant may let the script's process answer some calls itself (`hold_grant`,
child/selfserve.py): those never reach a connection unless they are handed over. The grant is taken
up at the first call, not when the run starts: a script that calls no tool pays nothing for it
(making it touches pages a forked child shares with its zygote, ~0.4 ms of copies here).
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..wire import frames
from ..wire import guards as wire
from ..wire.framing import FrameReader, ProtocolError, encode_frame
from .routes import HERE, PAST_BUDGET

if TYPE_CHECKING:
    from .selfserve import SelfServe

# A run's grant as its start frame (or kernel cell) brings it, not taken up yet: (grant, schemas, control pipe fd).
PendingGrant = Tuple[Any, Any, int]
_Queued = Tuple[int, str, int, bytes]  # (index in the calls, tool, call id, frame)


class ToolError(Exception):
    """A tool call failed; the message says why and what to do next."""

    def __init__(self, message: str, error_type: str = "ToolError", tool: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
        self.tool = tool


class ConnectionLost(ToolError):
    """The parent process went away or closed the connection (for example after a bad token)."""


# Scripts know these as hermes_tools.ToolError / hermes_tools.ConnectionLost (they are exported
# there): tracebacks and reprs should say so, not name this private module.
ToolError.__module__ = ConnectionLost.__module__ = "hermes_tools"

DEFAULT_MAX_CONNECTIONS = 16
REPLY_POLL_SECONDS = 0.0002
CLOSED_BY_HERALD = "Herald closed the connection (the run ended or the token was rejected)"


class _Link:
    """One authenticated connection, used by one thread at a time."""

    __slots__ = ("frames", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.frames = FrameReader(sock)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class RpcClient:
    def __init__(self, connect: Any, token: str, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self._pending: Optional[PendingGrant] = None  # a grant not taken up yet (`hold_grant`)
        self._local: Optional[SelfServe] = None  # the calls this process answers itself (host mode)
        self._connect = connect  # zero-argument callable returning a connected socket-like object
        self._token = token
        self._max = max(1, max_connections)
        self._ids = itertools.count(1)
        self._cond = threading.Condition(threading.Lock())
        self._idle: List[_Link] = []
        self._open = 0
        self._pid = os.getpid()
        self._broken: Optional[str] = None

    def call(self, tool: str, args: Dict[str, Any]) -> Any:
        call_id, frame, answered = self._outgoing(tool, args)
        if answered is not None:
            return answered[0]
        link = self._take(tool)
        try:
            link.sock.sendall(frame)
            # The only call in flight looks for its reply a while before sleeping: a small
            # call's reply comes sooner than a wake-up would (FrameReader._poll). With several,
            # polling threads would only take the interpreter from each other.
            alone = self._open - len(self._idle) == 1
            reply = self._reply(link, REPLY_POLL_SECONDS if alone else 0.0)
            if reply is not None and reply.get("id") != call_id:
                raise ProtocolError("reply %r answers another call than %d" % (reply.get("id"), call_id))
        except (OSError, ProtocolError) as exc:
            raise self._lose(link, "lost the connection to Herald: %s" % exc, tool) from None
        except BaseException:
            # Interrupted mid-call (say, KeyboardInterrupt from a signal handler): the reply may
            # still come, so this connection cannot serve another call. Others are unaffected.
            self._discard(link, None)
            raise
        if reply is None:
            raise self._lose(link, CLOSED_BY_HERALD, tool)
        self._give(link)
        return _result(reply, tool)

    def call_many(self, calls: Sequence[Tuple[str, Dict[str, Any]]], limit: int) -> List[Any]:
        """Make `calls` from this one thread on one connection, up to `limit` in flight, sent
        together and answered in any order (Herald runs calls sent together side by side:
        rpc/server.py): parallel() of tool stubs (child/helpers.py) without a thread or a connection
        per call (starting 16 threads costs ~2 ms here, and Herald spends more on each new
        connection than on a call). Each outcome is the call's result or the exception call()
        would have raised."""
        outcomes: List[Any] = [None] * len(calls)
        queued = self._queue(calls, outcomes)
        if not queued:
            return outcomes
        flying: Dict[Any, Tuple[int, str]] = {}  # call id -> (index, tool)
        try:
            link = self._take(queued[-1][1])
        except ConnectionLost as exc:
            for index, tool, _, _ in queued:
                outcomes[index] = ConnectionLost(str(exc), "ConnectionLost", tool)
            return outcomes
        try:
            self._exchange(link, queued, flying, outcomes, limit)
        except (OSError, ProtocolError, EOFError) as exc:
            reason = str(exc) if isinstance(exc, EOFError) else "lost the connection to Herald: %s" % exc
            self._lose(link, reason, "")
            for index, tool in [*flying.values(), *((i, t) for i, t, _, _ in queued)]:
                outcomes[index] = ConnectionLost(reason, "ConnectionLost", tool)
            return outcomes
        except BaseException:
            self._discard(link, None)  # replies may still come: this connection goes
            raise
        self._give(link)
        return outcomes

    def _queue(self, calls: Sequence[Tuple[str, Dict[str, Any]]], outcomes: List[Any]) -> List[_Queued]:
        """The calls for Herald, last first; the outcomes of the others (answered here, or
        arguments that cannot be sent) go into `outcomes`."""
        queued: List[_Queued] = []
        for index, (tool, args) in enumerate(calls):
            try:
                call_id, frame, answered = self._outgoing(tool, args)
            except Exception as exc:  # arguments that cannot be sent (ProtocolError): this call's outcome
                outcomes[index] = exc
                continue
            if answered is not None:
                outcomes[index] = answered[0]
            else:
                queued.append((index, tool, call_id, frame))
        queued.reverse()
        return queued

    def _exchange(self, link: _Link, queued: List[_Queued], flying: Dict[Any, Tuple[int, str]],
                  outcomes: List[Any], limit: int) -> None:
        """Send the queued calls, up to `limit` in flight, and take their replies as they come."""
        while queued or flying:
            sending = []
            while queued and len(flying) < limit:
                index, tool, call_id, frame = queued.pop()
                flying[call_id] = (index, tool)
                sending.append(frame)
            if sending:
                link.sock.sendall(b"".join(sending))
            reply = self._reply(link, 0.0)
            if reply is None:
                raise EOFError(CLOSED_BY_HERALD)
            answers = flying.pop(reply.get("id"), None)
            if answers is None:
                raise ProtocolError("reply %r answers no call in flight" % (reply.get("id"),))
            index, tool = answers
            try:
                outcomes[index] = _result(reply, tool)
            except ToolError as exc:
                outcomes[index] = exc

    def _outgoing(self, tool: str, args: Dict[str, Any]) -> Tuple[int, bytes, Optional[List[Any]]]:
        """(call id, its frame for Herald, None), or (call id, b"", [result]) when this process
        answered it itself (child/selfserve.py)."""
        call_id = next(self._ids)
        call: frames.CallFrame = {"id": call_id, "tool": tool, "args": args}
        local = self._local if self._pending is None else self._take_grant()
        if local is not None:
            where = local.take(tool)
            if where == HERE:
                answered = local.answer(tool, args, call_id)
                if answered is not None:
                    return call_id, b"", answered
            elif where == PAST_BUDGET:
                call["past_budget"] = True
        return call_id, encode_frame(call), None

    def _reply(self, link: _Link, poll: float) -> Optional[frames.ReplyFrame]:
        """The next reply on `link` (None: the peer closed), after any CWD frame sent just before it."""
        message = link.frames.read(poll=poll)
        while message is not None:
            frame = wire.to_client(message)
            if "type" not in frame:
                return frame
            local = self._local
            if local is not None:
                local.moved(frame["cwd"])
            message = link.frames.read()
        return None

    def hold_grant(self, pending: Optional[PendingGrant]) -> None:
        """What this process may answer itself from now on (None: nothing): a run's grant, its
        schemas and the control pipe for the records (child/selfserve.py)."""
        with self._cond:
            self._pending, self._local = pending, None

    def forget_answers(self) -> None:
        """After a fork: both processes would count the run's budget from the same number, so
        Herald answers all. No lock: the forked child has only this thread (a fork in the middle
        of a call is the script's own race)."""
        self._pending = self._local = None

    def _take_grant(self) -> Optional[SelfServe]:
        with self._cond:  # once, whichever thread calls first
            if self._pending is not None:
                from .selfserve import SelfServe

                self._local = SelfServe.from_start(*self._pending)
                self._pending = None
            return self._local

    def _take(self, tool: str) -> _Link:
        """An idle connection, or a new one; when every one is in use, wait for one."""
        with self._cond:
            if self._pid != os.getpid():
                # A forked child must not share its parent's connections: replies would be split.
                # Forget them without closing (closing is the parent's business).
                self._idle, self._open, self._broken, self._pid = [], 0, None, os.getpid()
            while True:
                if self._broken:
                    raise ConnectionLost(self._broken, "ConnectionLost", tool)
                if self._idle:
                    return self._idle.pop()
                if self._open < self._max:
                    self._open += 1
                    break
                self._cond.wait()
        try:
            sock = self._connect()
            auth: frames.AuthFrame = {"type": frames.AUTH, "token": self._token}
            sock.sendall(encode_frame(auth))
        except OSError as exc:
            self._discard(None, "could not connect to Herald: %s" % exc)
            raise ConnectionLost("could not connect to Herald: %s" % exc, "ConnectionLost", tool) from None
        return _Link(sock)

    def _give(self, link: _Link) -> None:
        with self._cond:
            self._idle.append(link)
            self._cond.notify()

    def _lose(self, link: _Link, reason: str, tool: str) -> ConnectionLost:
        """The parent hung up or the stream broke: this run's calls are over."""
        self._discard(link, reason)
        return ConnectionLost(reason, "ConnectionLost", tool)

    def _discard(self, link: Optional[_Link], broken: Optional[str]) -> None:
        if link is not None:
            link.close()
        with self._cond:
            self._open -= 1
            if broken:
                self._broken = broken
                for idle in self._idle:
                    idle.close()
                self._idle, self._open = [], self._open - len(self._idle)
            self._cond.notify_all()


UNIX_PATH_MAX = 107  # sockaddr_un.sun_path, less its terminating NUL


def at_unix_path(path: str, call: Callable[[str], None]) -> None:
    """`call(path)` for socket.bind/connect; a path too long for AF_UNIX (a deep TMPDIR) is
    reached through /proc/self/fd of its directory instead."""
    if len(os.fsencode(path)) <= UNIX_PATH_MAX:
        call(path)
        return
    directory = os.open(os.path.dirname(path), getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)
    try:
        call("/proc/self/fd/%d/%s" % (directory, os.path.basename(path)))
    finally:
        os.close(directory)


def unix_connector(path: str, timeout: Optional[float] = None) -> Any:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        at_unix_path(path, sock.connect)
        return sock

    return connect


_default: Optional[RpcClient] = None


def _result(reply: frames.ReplyFrame, tool: str) -> Any:
    """A reply's result, or the ToolError (ConnectionLost) it carries, raised."""
    if "error" in reply:  # its type and message checked by the guard (wire.reply)
        error_type, message = reply["error"]["type"], reply["error"]["message"]
        if error_type == "ConnectionLost":
            raise ConnectionLost(message, error_type, tool)
        raise ToolError(message, error_type, tool)
    return reply["result"]


def configure(connect: Any, token: str, max_connections: int = DEFAULT_MAX_CONNECTIONS,
              pending: Optional[PendingGrant] = None) -> None:
    """Point this process's tool calls at the parent (done by the sandbox bootstrap)."""
    global _default
    _default = RpcClient(connect, token, max_connections)
    _default.hold_grant(pending)


def answer_here(pending: Optional[PendingGrant]) -> None:
    """What this process may answer itself from now on (a kernel cell's grant; None: nothing)."""
    if _default is not None:
        _default.hold_grant(pending)


def _after_fork() -> None:
    if _default is not None:
        _default.forget_answers()


os.register_at_fork(after_in_parent=_after_fork, after_in_child=_after_fork)


class Deferred:
    """What a tool stub returns while parallel() asks which call it makes (`ask`)."""

    __slots__ = ("args", "tool")

    def __init__(self, tool: str, args: Dict[str, Any]) -> None:
        self.tool, self.args = tool, args


_asking = threading.local()


def ask(stub: Callable[..., Any], args: Tuple[Any, ...]) -> Any:
    """The call the tool stub `stub` makes with `args`, as a Deferred, without making it (its
    own argument errors raise here); what anything else returns, as it is."""
    _asking.on = True
    try:
        return stub(*args)
    finally:
        _asking.on = False


def call_many(calls: Sequence[Tuple[str, Dict[str, Any]]], limit: int) -> List[Any]:
    """`calls` at once from this thread (RpcClient.call_many): each outcome a result or an exception."""
    if _default is None:
        return [_not_configured(tool) for tool, _ in calls]
    return _default.call_many(calls, limit)


def _not_configured(tool: str) -> ToolError:
    return ToolError(
        "hermes_tools only works inside a Herald execute_code run (no connection configured).",
        "NotInSandbox",
        tool,
    )


def call(tool: str, args: Dict[str, Any]) -> Any:
    if getattr(_asking, "on", False):  # parallel() asks which call a stub makes (`ask`)
        return Deferred(tool, args)
    if _default is None:
        raise _not_configured(tool)
    return _default.call(tool, args)
