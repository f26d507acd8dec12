"""The sandbox child's side of the RPC: thread-safe calls, one connection per calling thread.

Part of the sandbox package (see __init__.py for its rules): stdlib only, Python >= 3.8.

Concurrency policy: a call borrows an idle connection (the most recently used one), sends its
frame and reads its own reply on it, then gives the connection back. Threads that call at once
get connections of their own, opened on demand up to `max_connections`, the run's cap on
concurrent calls (further callers wait for a free one). Why not one shared connection: a reply
then has to be handed from whichever thread read it to the thread that owns it, and on this
kind of machine every such cross-thread wake-up costs about as much as the socket round trip.
With a connection per caller, a reply wakes exactly the thread that waits for it.

In host mode a run's grant may let the script's process answer some calls itself (`offer`,
selfserve.py): those never reach a connection unless they are handed over. The grant is taken
up at the first call, not when the run starts: a script that calls no tool pays nothing for it
(making it touches pages a forked child shares with its zygote, ~0.4 ms of copies here).
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import frames
from .protocol import FrameReader, ProtocolError, encode_frame

if TYPE_CHECKING:
    from .selfserve import SelfServe

# A run's grant as its start frame (or kernel cell) offers it: (grant, schemas, control pipe fd).
Offer = Tuple[Any, Any, int]
# Where a call goes, by SelfServe.take: answered here if it can be, to Herald, or to Herald marked
# as past the run's budget by this process's count.
HERE, HERALD, PAST_BUDGET = "here", "herald", "past budget"


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
        self._offered: Optional[Offer] = None  # a grant not taken up yet (`offer`)
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
        call_id = next(self._ids)
        call: frames.CallFrame = {"id": call_id, "tool": tool, "args": args}
        local = self._local if self._offered is None else self._take_offer()
        if local is not None:
            where = local.take(tool)
            if where == HERE:
                answered = local.answer(tool, args, call_id)
                if answered is not None:
                    return answered[0]
            elif where == PAST_BUDGET:
                call["past_budget"] = True
        frame = encode_frame(call)
        link = self._take(tool)
        try:
            link.sock.sendall(frame)
            # The only call in flight looks for its reply a while before sleeping: a small
            # call's reply comes sooner than a wake-up would (FrameReader._poll). With several,
            # polling threads would only take the interpreter from each other.
            alone = self._open - len(self._idle) == 1
            reply = link.frames.read(poll=REPLY_POLL_SECONDS if alone else 0.0)
            while reply is not None and reply.get("type") == frames.CWD:  # sent with the reply, just before it
                if local is not None:
                    local.moved(reply.get("cwd"))
                reply = link.frames.read()
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
        if "error" in reply:
            err = reply["error"] or {}
            error_type = str(err.get("type", "ToolError"))
            message = str(err.get("message", "tool call failed"))
            if error_type == "ConnectionLost":
                raise ConnectionLost(message, error_type, tool)
            raise ToolError(message, error_type, tool)
        return reply.get("result")

    def offer(self, offer: Optional[Offer]) -> None:
        """What this process may answer itself from now on (None: nothing): a run's grant, its
        schemas and the control pipe for the records (selfserve.py)."""
        with self._cond:
            self._offered, self._local = offer, None

    def forget_answers(self) -> None:
        """After a fork: both processes would count the run's budget from the same number, so
        Herald answers all. No lock: the forked child has only this thread (a fork in the middle
        of a call is the script's own race)."""
        self._offered = self._local = None

    def _take_offer(self) -> Optional[SelfServe]:
        with self._cond:  # once, whichever thread calls first
            if self._offered is not None:
                from .selfserve import SelfServe

                self._local = SelfServe.from_start(*self._offered)
                self._offered = None
            return self._local

    def _take(self, tool: str) -> _Link:
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


def configure(connect: Any, token: str, max_connections: int = DEFAULT_MAX_CONNECTIONS,
              offer: Optional[Offer] = None) -> None:
    """Point this process's tool calls at the parent (done by the sandbox bootstrap)."""
    global _default
    _default = RpcClient(connect, token, max_connections)
    _default.offer(offer)


def answer_here(offer: Optional[Offer]) -> None:
    """What this process may answer itself from now on (a kernel cell's grant; None: nothing)."""
    if _default is not None:
        _default.offer(offer)


def _after_fork() -> None:
    if _default is not None:
        _default.forget_answers()


os.register_at_fork(after_in_parent=_after_fork, after_in_child=_after_fork)


def call(tool: str, args: Dict[str, Any]) -> Any:
    if _default is None:
        raise ToolError(
            "hermes_tools only works inside a Herald execute_code run (no connection configured).",
            "NotInSandbox",
            tool,
        )
    return _default.call(tool, args)
