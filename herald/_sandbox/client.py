"""The sandbox child's side of the RPC: thread-safe calls matched to replies by id.

Part of the sandbox package (see __init__.py for its rules): stdlib only, Python >= 3.8.

Concurrency policy (leader/follower): any number of threads may call at once. The first waiting
thread becomes the reader and delivers every reply it reads to the thread that owns its id; when
its own reply arrives it hands the reader role to another waiter. A lone caller therefore reads
its own reply with no thread hand-off, which keeps a single call near one socket round trip.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from typing import Any, Dict, Optional

from . import frames
from .protocol import FrameReader, ProtocolError, encode_frame


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


class _Slot:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = False
        self.reply: Optional[Dict[str, Any]] = None


class RpcClient:
    def __init__(self, connect: Any, token: str) -> None:
        self._connect = connect  # zero-argument callable returning a connected socket-like object
        self._token = token
        self._sock: Any = None
        self._frames: Any = None
        self._pid = -1
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._pending: Dict[int, _Slot] = {}
        self._reading = False
        self._broken: Optional[str] = None

    def _ensure_connected(self) -> Any:
        # A forked child must not share its parent's connection: replies would be split.
        if self._sock is None or self._pid != os.getpid():
            sock = self._connect()
            sock.sendall(encode_frame({"type": frames.AUTH, "token": self._token}))
            self._sock = sock
            self._frames = FrameReader(sock)  # read only by the thread that holds the reader role
            self._pid = os.getpid()
            self._pending = {}
            self._reading = False
            self._broken = None
        return self._sock

    def call(self, tool: str, args: Dict[str, Any]) -> Any:
        slot = _Slot()
        with self._cond:
            sock = self._ensure_connected()
            frames = self._frames
            if self._broken:
                raise ConnectionLost(self._broken, "ConnectionLost", tool)
            call_id = next(self._ids)
            self._pending[call_id] = slot
        frame = encode_frame({"id": call_id, "tool": tool, "args": args})
        try:
            with self._send_lock:
                sock.sendall(frame)
        except OSError as exc:
            self._fail("lost the connection to Herald while sending: %s" % exc)
        self._wait(call_id, slot, frames)
        reply = slot.reply or {}
        if "error" in reply:
            err = reply["error"] or {}
            error_type = str(err.get("type", "ToolError"))
            message = str(err.get("message", "tool call failed"))
            if error_type == "ConnectionLost":
                raise ConnectionLost(message, error_type, tool)
            raise ToolError(message, error_type, tool)
        return reply.get("result")

    def _wait(self, call_id: int, slot: _Slot, frames: FrameReader) -> None:
        with self._cond:
            while not slot.done and self._reading:
                self._cond.wait()
            if slot.done:
                return
            self._reading = True
        try:
            while True:
                try:
                    message = frames.read()
                except (OSError, ProtocolError) as exc:
                    message = None
                    reason = "lost the connection to Herald: %s" % exc
                else:
                    reason = "Herald closed the connection (the run ended or the token was rejected)"
                if message is None:
                    self._fail(reason)
                    return
                with self._cond:
                    owner = self._pending.pop(message.get("id", 0), None)  # ids start at 1
                    if owner is not None:
                        owner.reply = message
                        owner.done = True
                    if slot.done:
                        self._reading = False
                    self._cond.notify_all()
                    if slot.done:
                        return
        except BaseException:
            with self._cond:
                self._reading = False
                self._cond.notify_all()
            raise

    def _fail(self, reason: str) -> None:
        with self._cond:
            self._broken = reason
            for pending in self._pending.values():
                pending.reply = {"error": {"type": "ConnectionLost", "message": reason}}
                pending.done = True
            self._pending.clear()
            self._reading = False
            self._cond.notify_all()


def unix_connector(path: str, timeout: Optional[float] = None) -> Any:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(path)
        return sock

    return connect


_default: Optional[RpcClient] = None


def configure(connect: Any, token: str) -> None:
    """Point this process's tool calls at the parent (done by the sandbox bootstrap)."""
    global _default
    _default = RpcClient(connect, token)


def call(tool: str, args: Dict[str, Any]) -> Any:
    if _default is None:
        raise ToolError(
            "hermes_tools only works inside a Herald execute_code run (no connection configured).",
            "NotInSandbox",
            tool,
        )
    return _default.call(tool, args)
