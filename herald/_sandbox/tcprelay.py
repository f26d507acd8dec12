"""TCP connections multiplexed over one byte stream: the relay that lets Herald's browser and
web_extract reach a sandbox's network (its loopback, its names) through an exec stream.

Run as a script in the sandbox (`python3 -I -S -c SOURCE`: stdlib only, Python >= 3.8, nothing
else of Herald), it reads frames on stdin and writes frames on stdout; Herald's end
(herald/backends/relay.py) imports `Mux` from here, so both ends speak one implementation.

A frame is a header (kind, connection id, payload length) and its payload. Herald asks
RESOLVE (the addresses a name has in the sandbox) and CONNECT (a TCP connection from the
sandbox); each connection then carries DATA both ways, EOF (the sender's side is done
sending: a half close; a connection is over once EOF went both ways), CLOSE (given up: an
error on one side, the other side closes at once, dropping what it has not written). Each side
acknowledges the DATA it has
written to its socket (ACK), and a side's reader waits once WINDOW bytes are unacknowledged, so
one slow connection never holds up the stream the others share.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import struct
import sys
import threading
from typing import Callable, Dict, List, Tuple

HEADER = struct.Struct(">BII")
COUNT = struct.Struct(">I")
HELLO, RESOLVE, ADDRS, CONNECT, READY, FAIL, DATA, ACK, EOF, CLOSE = range(1, 11)
GREETING = b"herald-tcprelay 1"
CHUNK = 65536
WINDOW = 1 << 20  # bytes a connection may have in flight unacknowledged, each way
_ABORT = object()


class Stream:
    """One connection's two pumps: its socket's bytes to DATA frames (within the window), and
    DATA frames written to its socket (acknowledged)."""

    def __init__(self, mux: Mux, cid: int, sock: socket.socket) -> None:
        self._mux = mux
        self.cid = cid
        self._sock = sock
        self._out: queue.Queue[object] = queue.Queue()
        self._window = threading.Condition()
        self._unacked = 0
        self._aborted = False
        self._ends = 0  # pumps finished (2: the connection is done)

    def start(self) -> None:
        for pump in (self._read_loop, self._write_loop):
            threading.Thread(target=pump, name="herald-tcprelay-%d" % self.cid, daemon=True).start()

    def deliver(self, kind: int, payload: bytes) -> None:
        if kind == DATA:
            self._out.put(payload)
        elif kind == ACK and len(payload) == COUNT.size:
            with self._window:
                self._unacked -= COUNT.unpack(payload)[0]
                self._window.notify_all()
        elif kind == EOF:
            self._out.put(None)
        elif kind == CLOSE:
            self._stop(tell=False)

    def _read_loop(self) -> None:
        try:
            while True:
                with self._window:
                    while self._unacked >= WINDOW and not self._aborted:
                        self._window.wait()
                    if self._aborted:
                        return
                data = self._sock.recv(CHUNK)
                if not data:
                    self._mux.send(EOF, self.cid)
                    break
                with self._window:
                    self._unacked += len(data)
                self._mux.send(DATA, self.cid, data)
        except OSError:
            self._stop(tell=True)
        finally:
            self._ended()

    def _write_loop(self) -> None:
        try:
            while True:
                item = self._out.get()
                if item is _ABORT:
                    return
                if item is None:
                    try:
                        self._sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                try:
                    self._sock.sendall(item)  # type: ignore[arg-type]  # bytes: the markers are gone
                except OSError:
                    self._stop(tell=True)
                    return
                self._mux.send(ACK, self.cid, COUNT.pack(len(item)))  # type: ignore[arg-type]  # bytes, as above
        finally:
            self._ended()

    def _ended(self) -> None:
        with self._window:
            self._ends += 1
            done = self._ends == 2
        if done:  # both ways finished (each end sent EOF): the other end finishes on its own
            self._stop(tell=False)

    def _stop(self, tell: bool) -> None:
        with self._window:
            if self._aborted:
                return
            self._aborted = True
            self._window.notify_all()
        self._mux.forget(self.cid)
        self._out.put(_ABORT)
        if tell:
            self._mux.send(CLOSE, self.cid)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a pump blocked on the socket
        except OSError:
            pass
        self._sock.close()


class Mux:
    """Connections multiplexed over one stream: `write` sends bytes on it, `feed` takes what
    came; frames that are not a known connection's are returned to the caller (requests,
    answers)."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._streams: Dict[int, Stream] = {}
        self._buffer = b""
        self.broken = False

    def send(self, kind: int, cid: int, payload: bytes = b"") -> None:
        frame = HEADER.pack(kind, cid, len(payload)) + payload
        with self._send_lock:
            if self.broken:
                return
            try:
                self._write(frame)
            except (OSError, ValueError):
                self.broken = True

    def add(self, cid: int, sock: socket.socket) -> Stream:
        """Register a connection (its frames are taken from now on); `start()` it to pump."""
        stream = Stream(self, cid, sock)
        with self._lock:
            self._streams[cid] = stream
        return stream

    def start(self, cid: int) -> None:
        """Start pumping a registered connection (once its other end is connected)."""
        with self._lock:
            stream = self._streams.get(cid)
        if stream is not None:
            stream.start()

    def forget(self, cid: int) -> None:
        with self._lock:
            self._streams.pop(cid, None)

    def feed(self, data: bytes) -> List[Tuple[int, int, bytes]]:
        """Handle the frames `data` completes; return [(kind, cid, payload)] of the others."""
        self._buffer += data
        others: List[Tuple[int, int, bytes]] = []
        while len(self._buffer) >= HEADER.size:
            kind, cid, length = HEADER.unpack_from(self._buffer)
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            payload, self._buffer = self._buffer[HEADER.size:end], self._buffer[end:]
            if kind in (DATA, ACK, EOF, CLOSE):
                with self._lock:
                    stream = self._streams.get(cid)
                if stream is not None:
                    stream.deliver(kind, payload)
            else:
                others.append((kind, cid, payload))
        return others

    def close_all(self) -> None:
        """The stream ended: every connection ends with it."""
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.deliver(CLOSE, b"")


# -- the relay process (in the sandbox) ----------------------------------------------------------


def _failure(exc: BaseException) -> bytes:
    number = exc.errno if isinstance(exc, OSError) and isinstance(exc.errno, int) else 0
    if isinstance(exc, socket.timeout):
        number = 110  # ETIMEDOUT: Herald raises TimeoutError for it
    message = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
    return json.dumps({"errno": number, "message": message}).encode()


def _answer(mux: Mux, kind: int, cid: int, payload: bytes) -> None:
    try:
        ask = json.loads(payload.decode())
        host, port, timeout = str(ask["host"]), int(ask["port"]), ask.get("timeout")
        if kind == RESOLVE:
            infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
            found: List[str] = []
            for info in infos:
                if str(info[4][0]) not in found:
                    found.append(str(info[4][0]))
            mux.send(ADDRS, cid, json.dumps(found).encode())
        elif kind == CONNECT:
            sock = socket.create_connection((host, port), timeout)
            sock.settimeout(None)
            mux.add(cid, sock).start()  # registered before READY: DATA may follow it at once
            mux.send(READY, cid)
    except Exception as exc:
        mux.send(FAIL, cid, _failure(exc))


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def main() -> None:
    # Only frames may reach stdout (stderr is merged into it by the launch wrapper).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    mux = Mux(_write_all)
    mux.send(HELLO, 0, GREETING)
    while True:
        try:
            data = os.read(0, CHUNK)
        except OSError:
            data = b""
        if not data or mux.broken:
            break
        for kind, cid, payload in mux.feed(data):
            if kind in (RESOLVE, CONNECT):
                threading.Thread(target=_answer, args=(mux, kind, cid, payload), daemon=True).start()
    mux.close_all()
    sys.exit(0)


if __name__ == "__main__":
    main()
