"""TCP connections made from inside a sandbox reached only through exec (Docker, Modal).

One relay process per sandbox (herald/_sandbox/tcprelay.py: stdlib Python, sent in its own
command line, run by the sandbox's python3) resolves names and opens connections there; every
connection is multiplexed over that one exec stream, so it works with the sandbox's network
off (its loopback still answers) and costs no process per connection. Each connection is handed
to the caller as one end of a socketpair, whose other end the relay's frames feed: a real
socket, which a proxy can select() on and an HTTP client can wrap in TLS.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
from pathlib import Path

from .._sandbox import tcprelay
from .._sandbox.tcprelay import ADDRS, CLOSE, CONNECT, HELLO, READY, RESOLVE, Mux
from .base import BackendError, Channel

START_TIMEOUT = 15.0
ANSWER_GRACE = 5.0  # past a request's own timeout, how long to wait for the relay's answer
RESOLVE_TIMEOUT = 10.0  # a name lookup asked without a timeout
_SOURCE = Path(tcprelay.__file__).read_text()
# The relay's text travels as the argument of `-c`; a sandbox without that python says so.
_START = ('command -v "$1" >/dev/null 2>&1 || { echo "$1 not found in the sandbox'"'"'s PATH"; exit 127; }; '
          'exec "$1" -I -S -c "$0"')


def relay_argv(python: str) -> list[str]:
    """The command that runs the relay with `python` (sandbox.remote_python)."""
    return ["/bin/sh", "-c", _START, _SOURCE, python]


class RelayStopped(ConnectionError):
    """The relay process ended before it answered (killed in the sandbox, the sandbox gone):
    nothing was sent anywhere, so a new relay may be asked again."""


class Relay:
    """The relay process on `channel`; `resolve` and `connect` are safe from any thread. `dead`
    says why it stopped (then the backend starts another)."""

    def __init__(self, channel: Channel, where: str) -> None:
        self._channel = channel
        self.where = where
        self._mux = Mux(channel.send)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[tuple[int, bytes]]]] = {}
        self.dead = ""
        self._greeted(channel)
        threading.Thread(target=self._read, name="herald-relay", daemon=True).start()

    def _greeted(self, channel: Channel) -> None:
        said = b""
        while len(said) < tcprelay.HEADER.size + len(tcprelay.GREETING):
            chunk = channel.recv(START_TIMEOUT)
            if not chunk:
                break
            said += chunk
        kind = tcprelay.HEADER.unpack_from(said)[0] if len(said) >= tcprelay.HEADER.size else 0
        frames = self._mux.feed(said) if kind == HELLO else []
        if frames != [(HELLO, 0, tcprelay.GREETING)]:
            channel.close()  # what it said instead is the news (python3 missing, a crash)
            text = said.decode("utf-8", "replace").strip() or "it did not start"
            raise BackendError(f"the network relay in the {self.where} did not start: {text[:300]}")

    def _read(self) -> None:
        try:
            while True:
                data = self._channel.recv(60.0)
                if data is None:
                    continue
                if not data:
                    break
                for kind, cid, payload in self._mux.feed(data):
                    self._answered(kind, cid, payload)
        except Exception as exc:  # a broken stream: the connections end, the next open starts a relay
            self.dead = f"its stream broke ({exc})"
        finally:
            self.dead = self.dead or "it exited"
            self._mux.close_all()
            with self._lock:
                waiting, self._waiting = self._waiting, {}
            for event, _ in waiting.values():
                event.set()

    def _answered(self, kind: int, cid: int, payload: bytes) -> None:
        with self._lock:
            waiter = self._waiting.pop(cid, None)
        if waiter is None:
            if kind == READY:  # connected after its caller gave up: let it go
                self._mux.send(CLOSE, cid)
            return
        event, answer = waiter
        if kind == READY:
            self._mux.start(cid)  # pumping before the caller wakes: DATA may follow at once
        answer.append((kind, payload))
        event.set()

    def _ask(self, kind: int, cid: int, host: str, port: int, timeout: float | None) -> tuple[int, bytes]:
        if self.dead:
            raise RelayStopped(f"the network relay in the {self.where} stopped: {self.dead}")
        event: threading.Event = threading.Event()
        answer: list[tuple[int, bytes]] = []
        with self._lock:
            self._waiting[cid] = (event, answer)
        self._mux.send(kind, cid, json.dumps({"host": host, "port": port, "timeout": timeout}).encode())
        wait = (RESOLVE_TIMEOUT if timeout is None else timeout) + ANSWER_GRACE
        if not event.wait(wait) or not answer:
            with self._lock:
                self._waiting.pop(cid, None)
            if self.dead:
                raise RelayStopped(f"the network relay in the {self.where} stopped: {self.dead}")
            raise TimeoutError(f"no answer from the {self.where} within {wait:g} s")
        return answer[0]

    def _failed(self, what: str, payload: bytes) -> OSError:
        try:
            said = json.loads(payload.decode())
            number, message = int(said.get("errno") or 0), str(said.get("message") or "failed")
        except (ValueError, AttributeError):
            number, message = 0, payload[:200].decode("utf-8", "replace")
        text = f"{what}: {message} (in the {self.where})"
        return OSError(number, text) if number > 0 else OSError(text)

    def resolve(self, host: str, port: int, timeout: float | None) -> list[str]:
        """The addresses `host` has in the sandbox."""
        kind, payload = self._ask(RESOLVE, next(self._ids), host, port, timeout)
        if kind != ADDRS:
            raise self._failed(f"resolving {host}", payload)
        found = json.loads(payload.decode())
        return [str(address) for address in found]

    def connect(self, host: str, port: int, timeout: float | None) -> socket.socket:
        """A connection from the sandbox to `host`:`port` (the sandbox resolves a name)."""
        cid = next(self._ids)
        mine, relayed = socket.socketpair()
        self._mux.add(cid, relayed)  # registered first: its frames go nowhere else
        try:
            kind, payload = self._ask(CONNECT, cid, host, port, timeout)
        except BaseException:
            self._drop(cid, mine, relayed)
            raise
        if kind != READY:
            self._drop(cid, mine, relayed)
            raise self._failed(f"connecting to {host}:{port}", payload)
        return mine

    def _drop(self, cid: int, *sockets: socket.socket) -> None:
        self._mux.forget(cid)
        for sock in sockets:
            sock.close()

    def close(self) -> None:
        self.dead = self.dead or "closed"
        with contextlib.suppress(Exception):
            self._channel.close()
