"""`Backend.open_tcp`: a TCP connection made from the backend, on every backend (local, SSH over
`direct-tcpip`, Docker through the relay on the exec stream, the container's network off).

A stdlib echo server runs on the backend's 127.0.0.1 (started with the backend's own shell);
the tests check what a user of the browser or web_extract relies on: bytes arrive intact both
ways, half-closes pass, a connection nobody reads does not hold up the others, the address
check sees every address a name has and refuses before anything connects, and failures are
OSErrors that say what happened.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import uuid
from typing import Any

import pytest

from herald.backends import Backend
from herald.backends.shell import shell_quote
from herald.webguard import Refused
from tests.fixtures.sshd import free_port

ECHO_SOURCE = r'''
import socket, sys, threading
port, log = int(sys.argv[1]), sys.argv[2]
def serve(conn):
    with conn:
        first = conn.recv(6)
        open(log, "a").write("conn\n")
        if first.startswith(b"BLAST"):  # BLAST then 4 bytes of count: send that many bytes, no reading
            count = int.from_bytes(conn.recv(4), "big")
            chunk = bytes(range(256)) * 256
            while count > 0:
                conn.sendall(chunk[:count]); count -= len(chunk)
            return
        data = first
        while data:
            conn.sendall(data)
            data = conn.recv(65536)
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port)); server.listen(64)
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


@pytest.fixture
def echo(any_backend: Backend) -> tuple[Backend, int, str]:
    """(backend, port, log path on the backend): the echo server up on the backend's loopback."""
    backend = any_backend
    tag = uuid.uuid4().hex[:8]
    port = free_port()  # free here; the SSH and local backends share this machine's loopback
    backend.write_bytes(f"echo-{tag}.py", ECHO_SOURCE.encode())
    started = backend.run(
        f"python3 echo-{tag}.py {port} echo-{tag}.log > echo-{tag}.out 2>&1 & "
        f"for i in $(seq 300); do grep -qs listening echo-{tag}.out && break; sleep 0.1; done; cat echo-{tag}.out"
    )
    assert started.output == "listening", started
    return backend, port, f"echo-{tag}.log"


def _read_all(sock: socket.socket) -> bytes:
    data = bytearray()
    while chunk := sock.recv(1 << 16):
        data += chunk
    return bytes(data)


def test_bytes_arrive_intact_both_ways_and_half_close_passes(echo: tuple[Backend, int, str]) -> None:
    backend, port, _ = echo
    payload = hashlib.sha256(b"seed").digest() * (3 * 1024 * 1024 // 32)  # 3 MiB: past the relay's window
    with backend.open_tcp("127.0.0.1", port, timeout=30) as sock:
        def send_then_close_our_side() -> None:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send_then_close_our_side)
        sender.start()
        back = _read_all(sock)  # ends only once our EOF reached the server and its close came back
        sender.join(30)
    assert len(back) == len(payload) and back == payload


def test_a_connection_nobody_reads_does_not_hold_up_the_others(echo: tuple[Backend, int, str]) -> None:
    backend, port, _ = echo
    with backend.open_tcp("127.0.0.1", port, timeout=30) as stuck:
        stuck.sendall(b"BLAST " + (64 * 1024 * 1024).to_bytes(4, "big"))  # 64 MiB we never read
        for round_ in range(5):
            with backend.open_tcp("localhost", port, timeout=30) as other:
                other.sendall(f"hello {round_}".encode())
                other.shutdown(socket.SHUT_WR)
                assert _read_all(other) == f"hello {round_}".encode()


def test_many_connections_at_once(echo: tuple[Backend, int, str]) -> None:
    backend, port, _ = echo
    results: dict[int, bytes] = {}

    def one(n: int) -> None:
        with backend.open_tcp("127.0.0.1", port, timeout=30) as sock:
            sock.sendall(str(n).encode() * 1000)
            sock.shutdown(socket.SHUT_WR)
            results[n] = _read_all(sock)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {n: str(n).encode() * 1000 for n in range(24)}


def test_the_check_sees_each_address_and_refuses_before_anything_connects(echo: tuple[Backend, int, str]) -> None:
    backend, port, log = echo
    seen: list[str] = []

    def refuse_all(address: str) -> None:
        seen.append(address)
        raise Refused(f"not {address}")

    with pytest.raises(Refused):
        backend.open_tcp("localhost", port, timeout=30, check=refuse_all)
    assert seen and set(seen) <= {"127.0.0.1", "::1"}
    with pytest.raises(Refused):
        backend.open_tcp("127.0.0.1", port, timeout=30, check=refuse_all)
    assert seen[-1] == "127.0.0.1"
    assert backend.run(f"cat {log} 2>/dev/null | wc -l").output == "0"  # nothing reached the server
    allowed: list[str] = []
    with backend.open_tcp("localhost", port, timeout=30, check=allowed.append) as sock:
        sock.sendall(b"ok")
        sock.shutdown(socket.SHUT_WR)
        assert _read_all(sock) == b"ok"
    assert allowed and set(allowed) <= {"127.0.0.1", "::1"}


def test_failures_are_oserrors_that_say_what_happened(echo: tuple[Backend, int, str]) -> None:
    backend, port, _ = echo
    closed = free_port()
    with pytest.raises(OSError) as refused:
        backend.open_tcp("127.0.0.1", closed, timeout=30)
    assert "refused" in str(refused.value).lower() or isinstance(refused.value, ConnectionRefusedError)
    with pytest.raises(OSError) as unknown:
        backend.open_tcp("no-such-host.invalid", port, timeout=30, check=lambda address: None)
    said = str(unknown.value).lower()
    assert "no-such-host.invalid" in said or "name" in said, said


# Kills the relay processes in the container by their command line (the image has no pkill); the
# marker is split so that this program's own command line does not hold it.
KILL_RELAYS = """
import os
mine, killed = str(os.getpid()), 0
for pid in [p for p in os.listdir("/proc") if p.isdigit() and p != mine]:
    try:
        if b"herald-" + b"tcprelay 1" in open("/proc/%s/cmdline" % pid, "rb").read():
            os.kill(int(pid), 9); killed += 1
    except OSError:
        pass
print(killed)
"""


def test_a_relay_killed_in_the_container_is_replaced(make_docker_backend: Any) -> None:
    """A command in the container that kills every python (the relay is one) costs nothing
    but a new relay: the next connection works."""
    backend = make_docker_backend()
    backend.write_bytes("echo.py", ECHO_SOURCE.encode())
    started = backend.run("python3 echo.py 8765 echo.log > echo.out 2>&1 & "
                          "for i in $(seq 300); do grep -qs listening echo.out && break; sleep 0.1; done; cat echo.out")
    assert started.output == "listening", started
    for _ in range(3):
        with backend.open_tcp("127.0.0.1", 8765, timeout=30) as sock:
            sock.sendall(b"still here")
            sock.shutdown(socket.SHUT_WR)
            assert _read_all(sock) == b"still here"
        killed = backend.run(f"python3 -c {shell_quote(KILL_RELAYS)}").output
        assert killed == "1", killed  # the one relay was running, and now it is not


def test_a_sandbox_without_its_python_says_so(make_docker_backend: Any) -> None:
    backend = make_docker_backend(**{"sandbox.remote_python": "python-missing"})
    with pytest.raises(ConnectionError) as failed:
        backend.open_tcp("127.0.0.1", 80, timeout=30)
    assert "python-missing not found" in str(failed.value), failed.value
