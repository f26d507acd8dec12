"""A hostile script against the parent's RPC server, the control pipe and the backend supervisor:
each attack costs at most its own connection (or its own frames), never the server, the parent's
memory or the run."""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from herald import Runtime
from herald._sandbox.child.client import RpcClient
from herald._sandbox.wire.framing import HEADER, MAX_FRAME_BYTES, FrameReader, encode_frame, reply_frame
from herald.runtime.rpc.server import RpcServer
from herald.runtime.tokens import RunToken

from ._helpers import closed_by_peer, raw_connect, rss_bytes, run_ok, script, thread_count, wait_for

MiB = 1024 * 1024
NESTED = b'{"id":1,"tool":"read_file","args":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


@pytest.fixture
def grant(runtime: Runtime) -> Iterator[tuple[str, RunToken]]:
    """A live run token on `runtime`, as a script gets one."""
    token, issued = runtime._grants.issue(runtime.dispatcher.new_scope(5))
    yield token, issued
    runtime._grants.revoke(token, issued)


def still_serves(runtime: Runtime) -> None:
    result = run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo still serving')['output'])")
    assert result.output == "still serving\n" and result.tool_calls_made == 1


def test_a_nested_json_frame_closes_only_its_connection(runtime: Runtime, grant: tuple[str, RunToken]) -> None:
    """It raised RecursionError in the connection thread, which left the socket open."""
    server, before = runtime._server, thread_count("herald-rpc-conn")
    with raw_connect(server.path) as stranger, raw_connect(server.path) as caller:
        stranger.sendall(HEADER.pack(len(NESTED)) + NESTED[:2000])  # over the auth cap, too
        caller.sendall(encode_frame({"type": "auth", "token": grant[0]}) + HEADER.pack(len(NESTED)) + NESTED)
        assert closed_by_peer(stranger) and closed_by_peer(caller)
    assert wait_for(lambda: server.connection_count() == 0)
    assert wait_for(lambda: thread_count("herald-rpc-conn") <= before)  # their threads ended
    still_serves(runtime)


def test_running_out_of_descriptors_pauses_accepting(caplog: pytest.LogCaptureFixture) -> None:
    """EMFILE in accept() ended the accept loop for good; now it waits and tries again."""
    caplog.set_level(logging.WARNING, logger="herald.runtime.rpc.server")
    server: RpcServer[str] = RpcServer(
        lambda t: t if t == "good" else None, lambda s, m, e: reply_frame(m, {"result": "ok"}, e)
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    waiting.settimeout(120)
    hogs: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 4096), hard))
        try:
            while True:
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
        waiting.connect(server.path)  # connect() needs no new descriptor; accept() does
        assert wait_for(lambda: "cannot accept" in caplog.text), caplog.text
    finally:
        for fd in hogs:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        # The connection that waited in the backlog is served, and so are new ones.
        waiting.sendall(
            encode_frame({"type": "auth", "token": "good"}) + encode_frame({"id": 1, "tool": "x", "args": {}})
        )
        assert FrameReader(waiting).read() == {"result": "ok", "id": 1}
        assert RpcClient(lambda: raw_connect(server.path), "good").call("x", {}) == "ok"
    finally:
        waiting.close()
        server.close()


def test_big_unauthenticated_frames_are_refused_at_the_header(runtime: Runtime) -> None:
    """8 connections announcing 64 MiB frames took the parent to 1 GB: the auth frame is capped
    at 4 KiB, so each is closed at its header, with nothing buffered."""
    rss = rss_bytes()
    junk = b"x" * MiB
    for announced in [MAX_FRAME_BYTES] * 8 + [4097]:
        with raw_connect(runtime._server.path) as sock:
            sent = 0
            with pytest.raises(OSError):  # BrokenPipe or ConnectionReset: it hung up on us
                sock.sendall(HEADER.pack(announced) + b'{"type":"auth","token":"')
                while sent < MAX_FRAME_BYTES:
                    sock.sendall(junk)
                    sent += len(junk)
            assert sent < MAX_FRAME_BYTES
    assert rss_bytes() - rss < 32 * MiB
    still_serves(runtime)


def test_an_auth_frame_trickled_a_byte_at_a_time_is_cut_at_the_deadline() -> None:
    """A timeout per read let a peer that sends a byte a second hold a thread for ever."""
    server: RpcServer[str] = RpcServer(
        lambda t: "s", lambda s, m, e: reply_frame(m, {"result": None}, e), auth_timeout=1.0
    )
    frame = encode_frame({"type": "auth", "token": "t" * 3000})
    try:
        with raw_connect(server.path) as sock:
            cut = False
            for byte in frame:  # one byte every 0.1 s: 300 s for the frame, but the deadline is 1 s
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    cut = True
                    break
                sock.settimeout(0.1)
                try:
                    if sock.recv(1) == b"":
                        cut = True
                        break
                except TimeoutError:
                    pass
            assert cut, "the trickled auth frame was read to its end"
        assert wait_for(lambda: server.connection_count() == 0)
    finally:
        server.close()


def test_connections_waiting_to_authenticate_are_capped(runtime: Runtime) -> None:
    """Unlimited silent connections each held a thread (and a frame buffer) until the deadline."""
    server = runtime._server
    server._auth_timeout = 3600.0  # the silent ones stay for the whole test
    cap = server._max_pending
    silent = [raw_connect(server.path) for _ in range(cap)]
    try:
        assert wait_for(lambda: server.connection_count() == cap)
        with raw_connect(server.path) as extra:
            assert closed_by_peer(extra)  # closed at once ...
        for sock in silent:  # ... while those before it wait for their deadline
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in silent:
            sock.close()
    assert wait_for(lambda: server.connection_count() == 0)
    still_serves(runtime)  # a script's connections are admitted again


CONTROL_PIPE = """
import fcntl, json, os, stat, struct

def control_pipe():
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                return fd
        except OSError:
            pass

def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body
"""


def test_garbage_on_the_control_pipe_costs_the_parent_nothing(runtime: Runtime) -> None:
    """The control pipe was read whatever its frames announced (and forged statuses of the wrong
    type raised in the parent): now its frames are capped at 4 KiB, an impossible length makes
    the parent drain the pipe without keeping it, and a forged frame is dropped."""
    rss = rss_bytes()
    result = runtime.execute(
        script(CONTROL_PIPE)
        + script(
            """
            fd = control_pipe()
            os.write(fd, frame({"type": "exit", "exit_code": "x"}) + frame({"type": "done", "exit_code": [1]}))
            os.write(fd, struct.pack(">I", 60 * 1024 * 1024))  # under the old 64 MiB cap
            junk = b"y" * (1 << 20)
            for _ in range(96):
                os.write(fd, junk)
            print("wrote")
            """
        ),
        timeout=120,
    )
    assert result.status == "success", result
    assert result.output == "wrote\n" and result.exit_code == 0
    assert rss_bytes() - rss < 32 * MiB
    still_serves(runtime)


SUPERVISOR_ATTACK = """
import socket, struct
from _hermes_runtime.child import client

connector = client._default._connect
path = dict(zip(connector.__code__.co_freevars, (c.cell_contents for c in connector.__closure__)))["path"]
token = client._default._token

def attack(data, auth=True):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(120)
    sock.connect(path)
    try:
        if auth:
            sock.sendall(frame({"type": "auth", "token": token}))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
    except OSError:
        pass
    finally:
        sock.close()

nested = b'{"id":1,"tool":"read_file","args":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
attack(b"\\xff\\xff\\xff\\xff garbage", auth=False)
attack(struct.pack(">I", 60 * 1024 * 1024) + b'{"type":"auth"', auth=False)
attack(struct.pack(">I", len(nested)) + nested, auth=False)
attack(struct.pack(">I", len(nested)) + nested)
for depth in list(range(100, 1000, 50)) + list(range(950, 1000, 3)):
    body = b'{"id":1,"tool":"read_file","args":{"path":' + b"[" * depth + b"]" * depth + b"}}"
    attack(struct.pack(">I", len(body)) + body)
attack(frame({"id": [1, 2], "tool": "read_file", "args": {}}))
attack(frame({"id": {"a": 1}, "tool": 5, "args": "x"}))
attack(b"\\x00\\x00\\x00\\x05[1,2]")
fd = control_pipe()
os.write(fd, frame({"type": "done", "exit_code": "x"}) + frame({"type": "ready"}) + b"\\xff" * 100)
from hermes_tools import terminal
print(terminal("echo survived")["output"].strip())
"""


def test_the_backend_supervisor_survives_bad_frames_from_the_script(make_runtime: Any) -> None:
    """A bad frame on a script's connection (or its control pipe) raised in the supervisor's
    loop and ended the run; now it costs that connection (or those frames) only."""
    runtime = make_runtime(exec_mode="backend", transcript=False)
    result = runtime.execute(script(CONTROL_PIPE) + script(SUPERVISOR_ATTACK), timeout=120)
    assert result.status == "success", result
    assert result.output == "survived\n"
    still_serves(runtime)


def test_a_flood_of_bad_connections_logs_a_few_warnings_not_one_each(caplog: pytest.LogCaptureFixture) -> None:
    """Each refused connection logged a warning: a script opening bad ones in a loop flooded the
    user's terminal. The first few are logged, the rest counted."""
    caplog.set_level(logging.WARNING, logger="herald.runtime.rpc.server")
    server: RpcServer[str] = RpcServer(lambda t: None, lambda s, m, e: reply_frame(m, {"result": None}, e))
    try:
        for _ in range(40):
            with raw_connect(server.path) as sock:
                sock.sendall(encode_frame({"type": "auth", "token": "forged"}))
                assert closed_by_peer(sock)
        assert wait_for(lambda: server.refused_connections == 40)
    finally:
        server.close()
    refusals = [r for r in caplog.records if "closing RPC connection" in r.getMessage()]
    assert len(refusals) == 5
    assert "not logged" in caplog.records[-1].getMessage()
