"""Fuzzing a live Runtime's RPC server: 100k random and mutated frames over thousands of
connections. Afterwards the server still accepts, the parent's memory and threads are back
within a bound, and a script's tool call works. The corpus comes from a fixed seed, so a
failure can be replayed."""

from __future__ import annotations

import errno
import logging
import random
import selectors
import socket
from collections.abc import Callable, Iterator

import pytest

from herald import Runtime
from herald._sandbox.wire.framing import HEADER, MAX_CONTROL_FRAME_BYTES, MAX_FRAME_BYTES, encode_frame

from ._helpers import rss_bytes, run_ok, thread_count, wait_for

SEED = 20261123
PARALLEL = 8  # connections driven at once (fewer than the strangers the server admits)
HANG_SECONDS = 120  # nothing at all happening for this long is a hang, not slowness
MiB = 1024 * 1024
# Values of every JSON type (and some the server must not trust: huge ints, lone surrogates).
VALUES: list[object] = [
    None, True, False, 0, -1, 2**70, 1.5, float("1e308"), "", "x", "read_file", "auth", "\ud800", "é" * 40,
    [], [1, [2, [3]]], {}, {"path": "a.txt"}, {"path": 5}, {"a": {"b": {}}}, ["read_file"],
]


def pump(path: str, streams: Iterator[bytes]) -> int:
    """Send each stream on a connection of its own (PARALLEL at once), then end it, reading and
    dropping what comes back until the server hangs up. The number of bytes read. Streams are
    made as they are sent: the corpus must not weigh on the memory measured (this process's)."""
    selector = selectors.DefaultSelector()
    received = 0

    def open_next() -> None:
        data = next(streams, None)
        if data is None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(HANG_SECONDS)
        sock.connect(path)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, [memoryview(data)])

    for _ in range(PARALLEL):
        open_next()
    while selector.get_map():
        events = selector.select(HANG_SECONDS)
        assert events, "the server neither read nor answered nor hung up"
        for key, mask in events:
            sock, state = key.fileobj, key.data
            assert isinstance(sock, socket.socket)
            if mask & selectors.EVENT_WRITE and state[0] is not None:
                try:
                    state[0] = state[0][sock.send(state[0][: 1 << 16]) :]
                    done = not state[0]
                except BlockingIOError:
                    done = False
                except OSError as exc:  # it hung up on us before the end: fine
                    assert exc.errno in (errno.EPIPE, errno.ECONNRESET), exc
                    done = True
                if done:
                    state[0] = None
                    try:
                        sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    selector.modify(sock, selectors.EVENT_READ, state)
            if mask & selectors.EVENT_READ:
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    data = b""
                received += len(data)
                if not data:
                    selector.unregister(sock)
                    sock.close()
                    open_next()
    selector.close()
    return received


class Corpus:
    """Frames: random, truncated, with lying lengths, of wrong types, nested deep, mutated."""

    def __init__(self, token: str) -> None:
        self.rng = random.Random(SEED)
        self.token = token
        self.frames = 0

    def valid_call(self) -> bytes:
        return encode_frame({"id": self.rng.randrange(1, 1 << 31), "tool": "read_file", "args": {"path": "a.txt"}})

    def auth(self) -> bytes:
        return encode_frame({"type": "auth", "token": self.token})

    def random_bytes(self) -> bytes:
        return self.rng.randbytes(self.rng.randint(1, 300))

    def truncated(self) -> bytes:
        frame = self.valid_call()
        return frame[: self.rng.randrange(1, len(frame))]

    def lying_length(self) -> bytes:
        size = self.rng.choice(
            [MAX_FRAME_BYTES + 1, 0xFFFFFFFF, MAX_FRAME_BYTES, 60 * MiB, MAX_CONTROL_FRAME_BYTES + 1, 1 << 20]
        )
        return HEADER.pack(size) + self.rng.randbytes(self.rng.randint(0, 100))

    def wrong_types(self) -> bytes:
        """A JSON object whose keys and values are anything (each such frame is answered)."""
        keys = ["id", "tool", "args", "type", "token", self.rng.choice(["x", "", "conn", "result", "error"])]
        return encode_frame(
            {key: self.rng.choice(VALUES) for key in self.rng.sample(keys, self.rng.randint(0, len(keys)))}
        )

    def not_an_object(self) -> bytes:
        return encode_frame(self.rng.choice([*VALUES[:14], [{"id": 1, "tool": "read_file", "args": {}}]]))

    def bad_token(self) -> bytes:
        token = self.rng.choice([self.token[:-1], self.token + "x", "", "a" * 4000, self.token.upper()])
        return encode_frame({"type": "auth", "token": self.rng.choice([token, token, 5, None, [self.token]])})

    def deep(self) -> bytes:
        depth = self.rng.choice([900, 990, 1000, 5000, 100_000])
        opener, closer = self.rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        body = b'{"id":1,"tool":"read_file","args":{"path":' + opener * depth + b"1" + closer * depth + b"}}"
        return HEADER.pack(len(body)) + body

    def mutated_call(self) -> bytes:
        frame = bytearray(self.valid_call())
        for _ in range(self.rng.randint(1, 4)):
            kind, at = self.rng.randrange(5), self.rng.randrange(len(frame))
            if kind == 0:
                frame[at] ^= 1 << self.rng.randrange(8)  # a flipped bit, maybe in the length
            elif kind == 1:
                frame[at] = self.rng.randrange(256)
            elif kind == 2:
                frame[at:at] = self.rng.randbytes(self.rng.randint(1, 8))
            elif kind == 3:
                del frame[at : at + self.rng.randint(1, 8)]
            else:
                frame[: HEADER.size] = HEADER.pack(self.rng.randrange(1 << 32))
        return bytes(frame)

    def stream(self, first: Bytes, makers: list[Bytes], count: int) -> bytes:
        self.frames += 1 + count
        return first() + b"".join(self.rng.choice(makers)() for _ in range(count))


Bytes = Callable[[], bytes]


def test_a_hundred_thousand_hostile_frames(
    make_runtime: Callable[..., Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="herald.runtime.rpc.server")  # a warning per closed connection
    runtime = make_runtime(transcript=False)
    run_ok(runtime, "from hermes_tools import terminal\nterminal('true')")  # warm: its threads and buffers exist
    server = runtime._server
    token, grant = runtime._grants.issue(runtime.dispatcher.new_scope(20))
    threads, rss = thread_count("herald-rpc-conn"), rss_bytes()
    corpus = Corpus(token)
    garbage = [
        corpus.random_bytes, corpus.truncated, corpus.lying_length, corpus.wrong_types, corpus.not_an_object,
        corpus.bad_token, corpus.deep,
    ]
    try:
        # Strangers: each connection's first frame is garbage (the rest of the batch is never read).
        strangers = (corpus.stream(corpus.rng.choice(garbage), garbage, 4) for _ in range(4000))
        # Authenticated: objects of wrong types are each answered, on long connections (a bad
        # frame ends a connection, and with it the frames that came in the same read) ...
        answered = (corpus.stream(corpus.auth, [corpus.wrong_types, corpus.valid_call], 200) for _ in range(300))
        # ... and mutations of a valid call end their connection wherever they break the stream.
        mutated = (
            corpus.stream(corpus.auth, [corpus.mutated_call] * 9 + [corpus.deep, corpus.lying_length], 10)
            for _ in range(2000)
        )
        assert pump(server.path, strangers) == 0  # no stranger ever got an answer
        assert pump(server.path, answered) > 0
        pump(server.path, mutated)
        assert corpus.frames >= 100_000
    finally:
        runtime._grants.revoke(token, grant)
    assert server._acceptor.is_alive()
    assert wait_for(lambda: server.connection_count() == 0)
    assert wait_for(lambda: thread_count("herald-rpc-conn") <= threads + 2)
    assert rss_bytes() - rss < 150 * MiB
    result = run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo alive')['output'])")
    assert result.output == "alive\n" and result.tool_calls_made == 1
