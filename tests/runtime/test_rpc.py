"""The RPC link: framing, a real server and client over a Unix socket, and the runtime's socket."""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald._sandbox.child.client import ConnectionLost, RpcClient, ToolError, unix_connector
from herald._sandbox.wire.framing import (
    HEADER,
    MAX_CONTROL_FRAME_BYTES,
    MAX_FRAME_BYTES,
    FrameBuffer,
    FrameReader,
    ProtocolError,
    decode_body,
    encode_frame,
    reply_frame,
)
from herald.runtime.rpc.server import RpcServer

from ._helpers import closed_by_peer, raw_connect, run_ok, wait_for

# -- protocol --------------------------------------------------------------------------------


def frames_over_socketpair(*messages: object) -> list[dict[str, Any] | None]:
    left, right = socket.socketpair()
    right.settimeout(60)  # only bounds a hang

    def send() -> None:
        for message in messages:
            left.sendall(encode_frame(message))
        left.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)  # big frames do not fit in the socket buffer
    sender.start()
    with left, right:
        out = []
        frames = FrameReader(right)
        while True:
            frame = frames.read()
            out.append(frame)
            if frame is None:
                sender.join()
                return out


def test_frame_round_trip() -> None:
    messages = [
        {"id": 1, "tool": "read_file", "args": {"path": "a.py", "offset": 3}},
        {"id": 2, "result": {"text": "héllo ✓ 日本\n\x00", "n": [1, 2.5, None, True]}},
        {},
        {"id": 3, "error": {"type": "ToolError", "message": "x" * 300_000}},
    ]
    assert frames_over_socketpair(*messages) == [*messages, None]


def test_lone_surrogates_round_trip() -> None:
    message = {"path": "caf\udce9.txt", "odd": "\ud800"}
    frame = encode_frame(message)
    frame[4:].decode("utf-8")  # what goes on the wire is valid UTF-8 ...
    assert decode_body(frame[4:]) == message  # ... and decodes to the same strings
    assert frames_over_socketpair(message) == [message, None]


def test_frame_layout() -> None:
    frame = encode_frame({"a": 1})
    (size,) = HEADER.unpack(frame[:4])
    assert frame[:4] == struct.pack(">I", size)
    assert frame[4:] == b'{"a":1}'
    assert decode_body(frame[4:]) == {"a": 1}


def test_encoding_non_json_values_uses_repr() -> None:
    assert decode_body(encode_frame({"v": {1, 2}})[4:]) in ({"v": "{1, 2}"}, {"v": "{2, 1}"})


def test_oversize_frame_is_refused_when_encoding() -> None:
    with pytest.raises(ProtocolError, match="frame limit"):
        encode_frame({"blob": "x" * (MAX_FRAME_BYTES + 1)})


def test_oversize_frame_is_refused_when_reading() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(HEADER.pack(MAX_FRAME_BYTES + 1) + b"{}")
        with pytest.raises(ProtocolError, match="exceeds"):
            FrameReader(right).read()


@pytest.mark.parametrize(
    "body, match",
    [
        (b"\xff\xfe not utf-8", "not UTF-8 JSON"),
        (b"{not json", "not UTF-8 JSON"),
        (b"[1, 2]", "JSON object"),
    ],
)
def test_bad_bodies_are_protocol_errors(body: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_body(body)


def test_frame_buffer_consumes_a_bad_frame() -> None:
    bad = HEADER.pack(3) + b"[1]"
    stream = encode_frame({"n": 1}) + bad + encode_frame({"n": 2})
    # Fed a byte at a time or all at once, a control pipe's reader skips the bad frame...
    lenient = FrameBuffer()
    assert [m for i in range(len(stream)) for m in lenient.feed(stream[i : i + 1], skip_bad=True)] == [
        {"n": 1},
        {"n": 2},
    ]
    assert FrameBuffer().feed(stream, skip_bad=True) == [{"n": 1}, {"n": 2}]
    # ... a strict one raises, and what follows the bad frame still decodes.
    strict = FrameBuffer()
    assert strict.feed(encode_frame({"n": 1})) == [{"n": 1}]
    with pytest.raises(ProtocolError, match="JSON object"):
        strict.feed(bad)
    assert strict.feed(encode_frame({"n": 2})) == [{"n": 2}]
    assert strict.pending == b""


def test_a_frame_arriving_in_pieces_is_buffered_in_place() -> None:
    """Linear buffering: each piece is appended to one buffer, never copied with what came before
    (a pipe read 64 KiB at a time made rebuilding the buffer per read quadratic)."""
    frame = encode_frame({"blob": "x" * (4 * 1024 * 1024)})
    frames = FrameBuffer()
    assert frames.feed(frame[:1000]) == []
    buffer = frames._data
    for at in range(1000, len(frame) - 65536, 65536):
        assert frames.feed(frame[at : at + 65536]) == []
        assert frames._data is buffer
    assert frames.feed(frame[at + 65536 :]) == [{"blob": "x" * (4 * 1024 * 1024)}]
    assert frames.pending == b""


def test_a_length_over_the_cap_breaks_the_buffer_for_good() -> None:
    """After an impossible length nothing more can be parsed: the buffer keeps what it had
    (to show, say, a shell's complaint) and takes nothing more, however much is fed."""
    frames = FrameBuffer(MAX_CONTROL_FRAME_BYTES)
    assert frames.feed(encode_frame({"n": 1})) == [{"n": 1}]
    with pytest.raises(ProtocolError, match="exceeds the 4096-byte limit"):
        frames.feed(HEADER.pack(MAX_CONTROL_FRAME_BYTES + 1) + b"bash: no such file")
    for _ in range(100):
        with pytest.raises(ProtocolError, match="broke"):
            frames.feed(b"y" * 65536)
    assert frames.pending == HEADER.pack(MAX_CONTROL_FRAME_BYTES + 1) + b"bash: no such file"


def test_only_the_first_frame_has_the_first_frames_cap() -> None:
    """An auth frame is small; the calls after it (in the same read, too) may be large."""
    big = encode_frame({"blob": "x" * 10_000})
    assert FrameBuffer(max_first_frame=100).feed(encode_frame({"n": 1}) + big) == [{"n": 1}, {"blob": "x" * 10_000}]
    with pytest.raises(ProtocolError, match="exceeds the 100-byte limit"):
        FrameBuffer(max_first_frame=100).feed(big + encode_frame({"n": 1}))


def test_truncated_frame_is_a_protocol_error() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(HEADER.pack(100) + b'{"partial": ')
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(ProtocolError, match="middle of a frame"):
            FrameReader(right).read()


def test_truncated_header_is_a_protocol_error() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"\x00\x00")
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(ProtocolError):
            FrameReader(right).read()


# -- server and client -----------------------------------------------------------------------


class Echo:
    """A trivial session: echoes args after an optional delay, counting concurrency. Calls of
    tool "meet" first wait at `barrier` (set by the test) for their siblings."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.barrier: threading.Barrier | None = None

    def handle(self, session: str, message: dict[str, Any]) -> dict[str, Any]:
        args = message.get("args") or {}
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            if message.get("tool") == "meet" and self.barrier is not None:
                self.barrier.wait()
            time.sleep(args.get("delay", 0))
            if message.get("tool") == "fail":
                return {"error": {"type": "Nope", "message": f"failed for {args.get('n')}"}}
            if message.get("tool") == "crash":
                raise RuntimeError("handler bug")
            return {"result": {"session": session, "n": args.get("n")}}
        finally:
            with self.lock:
                self.active -= 1

    def serve(self, session: str, message: dict[str, Any], echo: tuple[str, ...]) -> bytes:
        return reply_frame(message, self.handle(session, message), echo)


@pytest.fixture
def echo_server() -> Iterator[tuple[RpcServer[str], Echo]]:
    echo = Echo()
    tokens = {"good-token": "session-A"}
    server: RpcServer[str] = RpcServer(tokens.get, echo.serve, max_concurrency=16)
    yield server, echo
    server.close()


def test_client_calls_and_errors(echo_server: tuple[RpcServer[str], Echo]) -> None:
    server, _ = echo_server
    client = RpcClient(unix_connector(server.path, timeout=10), "good-token")
    assert client.call("echo", {"n": 1}) == {"session": "session-A", "n": 1}
    with pytest.raises(ToolError) as info:
        client.call("fail", {"n": 2})
    assert info.value.error_type == "Nope" and str(info.value) == "failed for 2"
    with pytest.raises(ToolError) as info:
        client.call("crash", {})
    assert info.value.error_type == "InternalError" and "handler bug" in str(info.value)
    assert client.call("echo", {"n": 3}) == {"session": "session-A", "n": 3}


def test_concurrent_client_threads_get_matching_replies(
    echo_server: tuple[RpcServer[str], Echo],
) -> None:
    server, echo = echo_server
    client = RpcClient(unix_connector(server.path, timeout=10), "good-token")
    replies: dict[int, Any] = {}
    errors: list[BaseException] = []
    # The deadlines only bound a hang: no verdict depends on them.
    barrier = threading.Barrier(16, timeout=60)
    # The first round's calls meet on the server: they return only if all 16 run at once.
    echo.barrier = threading.Barrier(16, timeout=60)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for round_ in range(5):
                n = i * 100 + round_
                tool, delay = ("meet", 0.0) if round_ == 0 else ("echo", (i % 4) * 0.005)
                replies[n] = client.call(tool, {"n": n, "delay": delay})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert len(replies) == 80
    assert all(reply == {"session": "session-A", "n": n} for n, reply in replies.items())
    assert echo.peak == 16, f"the server ran at most {echo.peak} calls at once"
    # Threads calling at once use connections of their own, never more than the cap.
    assert 1 <= server.connection_count() <= 16


def test_server_concurrency_is_bounded(echo_server: tuple[RpcServer[str], Echo]) -> None:
    echo = Echo()
    server: RpcServer[str] = RpcServer(lambda t: "s", echo.serve, max_concurrency=3)
    try:
        client = RpcClient(unix_connector(server.path, timeout=10), "any")
        threads = [
            threading.Thread(target=client.call, args=("echo", {"delay": 0.1})) for _ in range(9)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert echo.peak <= 3
    finally:
        server.close()


def test_the_cap_holds_for_a_run_across_its_processes_and_clients() -> None:
    """Two clients of the same session (say, a script and a process it forked) share its cap."""
    echo = Echo()
    server: RpcServer[str] = RpcServer(lambda t: "s", echo.serve, max_concurrency=3)
    try:
        clients = [RpcClient(unix_connector(server.path, timeout=10), "any") for _ in range(2)]
        threads = [
            threading.Thread(target=clients[i % 2].call, args=("echo", {"delay": 0.05})) for i in range(12)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert 1 <= echo.peak <= 3
        assert server.connection_count() >= 2
    finally:
        server.close()


def test_a_run_cannot_open_connections_without_limit() -> None:
    server: RpcServer[str] = RpcServer(
        lambda t: "s", lambda s, m, echo: reply_frame(m, {"result": "ok"}, echo), max_connections=3
    )
    try:
        clients = [RpcClient(unix_connector(server.path, timeout=10), "any") for _ in range(4)]
        for client in clients[:3]:
            assert client.call("echo", {}) == "ok"
        with pytest.raises(ConnectionLost):
            clients[3].call("echo", {})
        assert clients[0].call("echo", {}) == "ok"  # the admitted ones keep working
    finally:
        server.close()


def test_an_interrupted_call_leaves_the_client_usable(echo_server: tuple[RpcServer[str], Echo]) -> None:
    """KeyboardInterrupt in the middle of a call (a script's signal handler) drops that one
    connection; the next call gets a fresh one and its own reply, not the stale one."""
    server, _ = echo_server

    class Interrupting:
        def __init__(self, sock: socket.socket) -> None:
            self.sock, self.armed = sock, True

        def sendall(self, data: bytes) -> None:
            self.sock.sendall(data)

        def recv_into(self, buffer: bytearray) -> int:
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt
            return self.sock.recv_into(buffer)

        def close(self) -> None:
            self.sock.close()

    opened: list[Interrupting] = []

    def connect() -> Interrupting:
        link = Interrupting(unix_connector(server.path, timeout=10)())
        link.armed = not opened  # only the first connection is interrupted
        opened.append(link)
        return link

    client = RpcClient(connect, "good-token")
    with pytest.raises(KeyboardInterrupt):
        client.call("echo", {"n": 1, "delay": 0.05})
    assert client.call("echo", {"n": 2}) == {"session": "session-A", "n": 2}
    assert len(opened) == 2


def test_client_with_a_rejected_token_gets_connection_lost(
    echo_server: tuple[RpcServer[str], Echo],
) -> None:
    server, _ = echo_server
    client = RpcClient(unix_connector(server.path, timeout=10), "stolen-token")
    with pytest.raises(ConnectionLost):
        client.call("echo", {"n": 1})
    with pytest.raises(ConnectionLost):  # the client stays broken, it does not hang
        client.call("echo", {"n": 2})


def test_close_sessions_disconnects_its_clients(echo_server: tuple[RpcServer[str], Echo]) -> None:
    server, _ = echo_server
    client = RpcClient(unix_connector(server.path, timeout=10), "good-token")
    assert client.call("echo", {"n": 1})["n"] == 1
    server.close_sessions("session-A")
    assert wait_for(lambda: server.connection_count() == 0)
    with pytest.raises(ConnectionLost):
        client.call("echo", {"n": 2})


def test_server_close_removes_its_directory() -> None:
    server: RpcServer[str] = RpcServer(lambda t: "s", lambda s, m, echo: reply_frame(m, {"result": None}, echo))
    directory = server.directory
    assert os.path.exists(server.path)
    server.close()
    assert not os.path.exists(directory)


def test_client_outside_a_sandbox_says_so() -> None:
    from herald._sandbox.child import client as client_module

    if client_module._default is not None:  # pragma: no cover - only if something configured it
        pytest.skip("a default client is configured in this process")
    with pytest.raises(ToolError, match="only works inside"):
        client_module.call("read_file", {})


# -- the runtime's socket ----------------------------------------------------------------------


def test_socket_permissions(runtime: Runtime) -> None:
    path = runtime._server.path
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700


def test_wrong_token_closes_the_connection(runtime: Runtime, workspace: Path) -> None:
    with raw_connect(runtime._server.path) as sock:
        sock.sendall(encode_frame({"type": "auth", "token": "not-a-real-token"}))
        assert sock.recv(100) == b""
    with raw_connect(runtime._server.path) as sock:
        sock.sendall(encode_frame({"type": "auth", "token": "not-a-real-token"}))
        try:
            sock.sendall(
                encode_frame(
                    {"id": 1, "tool": "write_file", "args": {"path": "pwned", "content": ""}}
                )
            )
        except (BrokenPipeError, ConnectionResetError):
            pass  # already hung up on us
        else:
            assert closed_by_peer(sock)
    assert not (workspace / "pwned").exists()


def test_missing_auth_frame_closes_the_connection(runtime: Runtime, workspace: Path) -> None:
    with raw_connect(runtime._server.path) as sock:
        sock.sendall(
            encode_frame({"id": 1, "tool": "write_file", "args": {"path": "pwned", "content": ""}})
        )
        assert sock.recv(100) == b""
    with raw_connect(runtime._server.path) as sock:
        sock.sendall(encode_frame({"type": "auth"}))
        assert sock.recv(100) == b""
    assert not (workspace / "pwned").exists()


def test_token_of_a_finished_run_is_rejected(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        import os
        from hermes_tools import terminal
        terminal("true")
        print(os.environ.get("HERALD_SANDBOX"))
        """,
    )
    assert result.output == "1\n"
    assert len(runtime._grants) == 0  # every run's token is revoked when the run ends


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff" + b"x" * 64,  # absurd length
        HEADER.pack(5) + b"\xff\xfe\xfd\xfc\xfb",  # not UTF-8
        HEADER.pack(3) + b"[1]",  # not an object
        b"GET / HTTP/1.1\r\n\r\n",
    ],
)
def test_malformed_frames_close_only_that_connection(runtime: Runtime, garbage: bytes) -> None:
    with raw_connect(runtime._server.path) as sock:
        sock.sendall(garbage)
        assert closed_by_peer(sock)
    assert wait_for(lambda: runtime._server.connection_count() == 0)
    result = run_ok(
        runtime,
        "from hermes_tools import terminal\nprint(terminal('echo still serving')['output'])",
    )
    assert result.output == "still serving\n"
    assert result.tool_calls_made == 1


def test_malformed_frame_after_auth_is_dropped(make_runtime: Any) -> None:
    """A script that writes garbage on its own authenticated connection loses only that link."""
    runtime = make_runtime()
    result = runtime.execute(
        "\n".join(
            [
                "import socket",
                "from _hermes_runtime.child import client",
                "from hermes_tools import terminal, ToolError",
                "terminal('true')",
                "client._default._idle[-1].sock.sendall(b'\\xff\\xff\\xff\\xff garbage')",
                "try:",
                "    terminal('echo after garbage')",
                "except ToolError as exc:",
                "    print(type(exc).__name__)",
            ]
        ),
        timeout=30,
    )
    assert result.status == "success", result
    assert result.output == "ConnectionLost\n"
    assert (
        run_ok(
            runtime, "from hermes_tools import terminal\nprint(terminal('echo ok')['output'])"
        ).output
        == "ok\n"
    )


def test_silent_peer_is_dropped_after_the_auth_timeout() -> None:
    server: RpcServer[str] = RpcServer(
        lambda t: "s", lambda s, m, echo: reply_frame(m, {"result": None}, echo), auth_timeout=0.3
    )
    try:
        with raw_connect(server.path) as silent, raw_connect(server.path) as slow:
            slow.sendall(HEADER.pack(100) + b'{"type": "auth"')  # half a frame, then nothing
            # Without the auth timeout they would never be closed (recv would time out instead).
            assert closed_by_peer(silent)
            assert closed_by_peer(slow)
        assert wait_for(lambda: server.connection_count() == 0)
        # An authenticated connection has no such limit: it may idle between calls.
        client = RpcClient(unix_connector(server.path, timeout=10), "token")
        client.call("x", {})
        time.sleep(0.5)
        assert client.call("x", {}) is None
    finally:
        server.close()


def test_silent_peer_on_the_runtime_socket_does_not_block_runs(runtime: Runtime) -> None:
    with raw_connect(runtime._server.path):
        result = run_ok(
            runtime, "from hermes_tools import terminal\nprint(terminal('echo hi')['output'])"
        )
        assert result.output == "hi\n"


def test_deeply_nested_json_is_a_protocol_error() -> None:
    body = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(ProtocolError):
        decode_body(body)


def test_a_nested_json_bomb_closes_only_its_connection(echo_server: tuple[RpcServer[str], Echo]) -> None:
    server, _ = echo_server
    bomb = raw_connect(server.path)
    bomb.sendall(encode_frame({"type": "auth", "token": "good-token"}))
    body = b'{"id":1,"tool":"echo","args":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    bomb.sendall(HEADER.pack(len(body)) + body)
    assert bomb.recv(16) == b""  # closed, not served and not left hanging
    client = RpcClient(unix_connector(server.path, timeout=10), "good-token")
    assert client.call("echo", {"n": 1})["n"] == 1

