"""The supervisor's side of the script's `hermes_tools` connections (supervisor/loop.py): the private
Unix socket the script connects to, the token each connection must show first, and the
numbering that tags each connection's calls on the stream to Herald. Stdlib only, Python >= 3.8.

Only what a call is made of is relayed (id, tool, args, connection number): a script must not
pass for the supervisor, and Herald must be able to decode any call it is sent.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from typing import Any, Callable, Dict, List, Optional

from ..child.client import at_unix_path
from ..wire import frames
from ..wire import guards as wire
from ..wire.framing import nested_deeper_than
from .sinks import Conn, Sink

AF_UNIX_PATH_MAX = 100
MAX_RELAYED_NESTING = 100  # tool arguments never nest this deep; Herald decodes them in a deep stack


class Relay:
    """Accepts the script's connections and turns their frames into calls for `route`."""

    def __init__(self, route: Callable[[frames.CallFrame], None]) -> None:
        self.route = route  # a call, tagged with its connection's number: answer here or send on
        self.token = secrets.token_urlsafe(24)
        self.listener: Optional[socket.socket] = None
        self.socket_path = ""
        self.conns: Dict[int, Conn] = {}
        self.conn_numbers = 0

    def listen(self, sandbox_dir: str, *, abstract_ok: bool = True) -> None:
        """Listen in `sandbox_dir`; a path too long for a socket becomes an abstract name when
        `abstract_ok` (not for a script in its own network namespace), else is bound through
        its directory (client.at_unix_path)."""
        path = os.path.join(sandbox_dir, "rpc-%s.sock" % secrets.token_hex(6))
        if len(path.encode()) > AF_UNIX_PATH_MAX and sys.platform.startswith("linux") and abstract_ok:
            path = "\0herald-rpc-%s" % secrets.token_hex(12)  # abstract: the token guards it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        at_unix_path(path, listener.bind)
        if not path.startswith("\0"):
            os.chmod(path, 0o600)
        listener.listen(64)
        listener.setblocking(False)
        self.listener, self.socket_path = listener, path

    def readers(self) -> List[int]:
        fds = [conn.fd for conn in self.conns.values()]
        if self.listener is not None:
            fds.append(self.listener.fileno())
        return fds

    def sinks(self) -> List[Sink]:
        return [conn.out for conn in self.conns.values()]

    def reply(self, number: Any, frame: bytes) -> None:
        """A reply (an encoded frame) to the connection that made the call, if it is still open."""
        conn = self.conns.get(number)
        if conn is not None:
            conn.out.push(frame)

    def owns(self, fd: int) -> bool:
        return (self.listener is not None and fd == self.listener.fileno()) or any(
            conn.fd == fd for conn in self.conns.values()
        )

    def readable(self, fd: int, read: Callable[[int], Optional[bytes]]) -> None:
        """`fd` (the listener or a connection) has something for us."""
        if self.listener is not None and fd == self.listener.fileno():
            self.accept()
            return
        conn = next((c for c in self.conns.values() if c.fd == fd), None)
        if conn is None:
            return
        chunk = read(fd)
        if chunk is None:
            return
        keep = bool(chunk)
        try:
            for message in conn.frames.feed(chunk) if keep else []:
                if not self.from_conn(conn, message):
                    keep = False
                    break
        except Exception:  # a bad frame (or one too big to relay) costs its connection only
            keep = False
        if not keep:
            del self.conns[conn.number]
            conn.sock.close()

    def accept(self) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        self.conn_numbers += 1
        self.conns[self.conn_numbers] = Conn(sock, self.conn_numbers)

    def from_conn(self, conn: Conn, message: Dict[str, Any]) -> bool:
        """Relay one frame; False closes the connection (no valid token first)."""
        try:
            if not conn.authenticated:
                conn.authenticated = secrets.compare_digest(wire.auth(message)["token"], self.token)
                return conn.authenticated
            call = wire.relayed_call(message, conn.number)
        except wire.FrameError:
            return False
        if nested_deeper_than(call, MAX_RELAYED_NESTING):
            return False
        self.route(call)
        return True

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
            if not self.socket_path.startswith("\0"):
                try:
                    os.unlink(self.socket_path)
                except OSError:
                    pass
