"""TCP connections made from the SSH host: `direct-tcpip` channels on the session's connection
(what `ssh -L` uses), so the host's localhost and the names and addresses it reaches are what
the browser and web_extract reach with `browser.network = "backend"`.

With an address check (a policy), names are resolved on the host (`getent ahosts`, one exec,
kept RESOLVE_TTL seconds) and the channel is opened to an address that was checked, so what
sshd connects to is an address the policy saw. Without one, sshd resolves the name itself.

Each channel is handed to the caller as one end of a socketpair, two threads copying between
the other end and the channel (half-closes included): a real socket, which a proxy can
select() on and an HTTP client can wrap in TLS.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable

import paramiko

from ...webguard import open_checked
from ..shell import shell_quote
from .connection import SSHConnection

RESOLVE_TTL = 30.0  # a name's addresses on the host, reused this long (each connection still goes to a checked one)
CHUNK = 65536
OPEN_FAILED = {1: "administratively prohibited", 2: "connect failed", 3: "unknown channel type", 4: "resource shortage"}


class Tunnels:
    """`open(host, port, timeout, check)`: Backend.open_tcp for one SSH backend."""

    def __init__(self, connection: Callable[[], SSHConnection], where: str) -> None:
        self._connection = connection
        self._where = where
        self._names: dict[str, tuple[float, list[str]]] = {}
        self._lock = threading.Lock()

    def open(self, host: str, port: int, timeout: float | None, check: Callable[[str], None] | None) -> socket.socket:
        return open_checked(host, port, timeout, check, self.resolve, self.connect)

    def resolve(self, host: str, port: int, timeout: float | None) -> list[str]:
        """The addresses `host` has on the SSH host."""
        now = time.monotonic()
        with self._lock:
            known = self._names.get(host)
        if known is not None and now - known[0] < RESOLVE_TTL:
            return known[1]
        conn = self._connection()
        status, said = conn.exec(f"getent ahosts {shell_quote(host)}", timeout=timeout or conn.timeout)
        found: list[str] = []
        for line in said.decode("utf-8", "replace").splitlines():
            first = line.split()[0] if line.split() else ""
            with contextlib.suppress(ValueError):
                address = str(ipaddress.ip_address(first))
                if address not in found:
                    found.append(address)
        if not found:
            why = (
                "no such name"
                if status == 2
                else f"getent ahosts said: {said[:200].decode('utf-8', 'replace').strip() or status}"
            )
            raise socket.gaierror(socket.EAI_NONAME, f"{host} does not resolve on {self._where} ({why})")
        with self._lock:
            self._names[host] = (now, found)
        return found

    def connect(self, host: str, port: int, timeout: float | None) -> socket.socket:
        """A `direct-tcpip` channel from the SSH host to `host`:`port`, as a socket here."""
        conn = self._connection()
        try:
            channel = conn.transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0),
                                                  timeout=timeout or conn.timeout)
        except paramiko.ChannelException as exc:
            what = OPEN_FAILED.get(exc.code, f"code {exc.code}")
            if exc.code == 1:
                raise PermissionError(
                    f"{self._where} refuses TCP forwarding ({exc.text or what}): "
                    'allow it (sshd_config AllowTcpForwarding yes), or set browser.network = "local"'
                ) from None
            raise ConnectionRefusedError(
                f"{self._where} could not connect to {host}:{port} ({exc.text or what})"
            ) from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if "timeout" in str(exc).lower():
                raise TimeoutError(f"{self._where} did not open a connection to {host}:{port} in time") from None
            raise ConnectionError(
                f"no connection to {host}:{port} through {self._where}: {exc or type(exc).__name__}"
            ) from None
        return _bridged(channel)


def _bridged(channel: paramiko.Channel) -> socket.socket:
    mine, theirs = socket.socketpair()
    ended: list[int] = []
    lock = threading.Lock()

    def finish() -> None:
        # The second pump to end closes both: each side has then said all it will.
        with lock:
            ended.append(1)
            if len(ended) < 2:
                return
        with contextlib.suppress(Exception):
            channel.close()
        theirs.close()

    def to_channel() -> None:
        try:
            while data := theirs.recv(CHUNK):
                channel.sendall(data)
            channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException):
            _abort(channel, theirs)
        finally:
            finish()

    def from_channel() -> None:
        try:
            while data := channel.recv(CHUNK):
                theirs.sendall(data)
            theirs.shutdown(socket.SHUT_WR)
        except (OSError, EOFError, paramiko.SSHException):
            _abort(channel, theirs)
        finally:
            finish()

    for pump in (to_channel, from_channel):
        threading.Thread(target=pump, name="herald-ssh-tunnel", daemon=True).start()
    return mine


def _abort(channel: paramiko.Channel, sock: socket.socket) -> None:
    """One way failed: the connection is over both ways (the other pump wakes up and ends)."""
    with contextlib.suppress(Exception):
        channel.close()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
