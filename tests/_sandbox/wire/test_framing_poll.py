"""Reading a frame by polling before sleeping (FrameReader's `poll`): what a small call's
reply and a script's next call take, so that neither waits for a wake-up. Polling must never
change what is read: frames, their order, the end of the stream, nor lose a frame that comes
after the poll gave up."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable
from typing import Any

from herald._sandbox.wire.framing import MAX_POLL_BACKOFF, FrameReader, encode_frame

LONG_POLL = 30.0  # a poll that only ends by finding its frame: no verdict depends on timing
SHORT_POLL = 0.0001


class Watched:
    """A real socket whose non-blocking reads (the poll's) are recorded as `read` (the number of
    the read the test is on) and, for reads in `missing`, find nothing; `on_block` is called
    before each blocking read (the poll has given up)."""

    def __init__(self, sock: socket.socket, missing: Callable[[int], bool] = lambda read: False,
                 on_block: Callable[[], None] = lambda: None) -> None:
        self.sock, self.missing, self.on_block = sock, missing, on_block
        self.read = 0
        self.polls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if flags & socket.MSG_DONTWAIT:
            self.polls.append(self.read)
            if self.missing(self.read):
                raise BlockingIOError
        else:
            self.on_block()
        return self.sock.recv_into(buffer, nbytes, flags)


def test_a_frame_sent_while_polling_is_read() -> None:
    left, right = socket.socketpair()
    with left, right:
        reader = FrameReader(right)
        sender = threading.Timer(0.01, left.sendall, [encode_frame({"id": 1, "result": "a"})])
        sender.start()
        assert reader.read(poll=LONG_POLL) == {"id": 1, "result": "a"}
        sender.join()


def test_a_frame_that_comes_after_the_poll_gave_up_is_still_read() -> None:
    left, right = socket.socketpair()
    with left, right:
        polled = threading.Event()
        reader = FrameReader(Watched(right, on_block=polled.set))

        def send_once_it_sleeps() -> None:
            polled.wait(60)
            left.sendall(encode_frame({"id": 2}))

        sender = threading.Thread(target=send_once_it_sleeps)
        sender.start()
        assert reader.read(poll=SHORT_POLL) == {"id": 2}
        sender.join()


def test_frames_in_one_chunk_come_in_order_and_the_end_is_reported() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"".join(encode_frame({"n": n}) for n in range(3)))
        left.shutdown(socket.SHUT_WR)
        reader = FrameReader(right)
        assert [reader.read(poll=LONG_POLL) for _ in range(4)] == [{"n": 0}, {"n": 1}, {"n": 2}, None]


def test_a_frame_split_across_the_poll_and_the_blocking_read_is_whole() -> None:
    left, right = socket.socketpair()
    with left, right:
        frame = encode_frame({"id": 3, "result": "x" * 1000})
        left.sendall(frame[:10])  # the poll sees part of it, then sleeps for the rest
        sender = threading.Timer(0.05, left.sendall, [frame[10:]])
        sender.start()
        assert FrameReader(right).read(poll=SHORT_POLL) == {"id": 3, "result": "x" * 1000}
        sender.join()


def test_after_missing_a_reader_polls_less_often() -> None:
    """On a loaded machine the peer waits for a CPU and a poll would take it: each miss in a
    row halves how often the reader polls, down to one read in 2**MAX_POLL_BACKOFF."""
    left, right = socket.socketpair()
    with left, right:
        watched = Watched(right, missing=lambda read: True)  # nothing there yet: each poll misses
        reader = FrameReader(watched)
        for watched.read in range(200):
            left.sendall(encode_frame({"n": watched.read}))
            assert reader.read(poll=SHORT_POLL) == {"n": watched.read}
        polled_reads = sorted(set(watched.polls))
        gaps = [b - a for a, b in itertools.pairwise(polled_reads)]
        assert gaps[:MAX_POLL_BACKOFF] == [2 ** k for k in range(1, MAX_POLL_BACKOFF + 1)]
        assert set(gaps[MAX_POLL_BACKOFF:]) == {2 ** MAX_POLL_BACKOFF}


def test_a_hit_restores_polling_on_every_read() -> None:
    left, right = socket.socketpair()
    with left, right:
        # The polls of reads 0 and 2 find nothing; later ones find their frame.
        watched = Watched(right, missing=lambda read: read in (0, 2))
        reader = FrameReader(watched)
        for watched.read in range(12):
            left.sendall(encode_frame({"n": watched.read}))
            assert reader.read(poll=SHORT_POLL) == {"n": watched.read}
        # read 0 misses (skip 1), read 2 misses (skip 3), read 6 hits: every read polls again.
        assert sorted(set(watched.polls)) == [0, 2, 6, 7, 8, 9, 10, 11]


def test_a_socket_with_a_timeout_is_not_polled() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(60)
        watched = Watched(right)
        left.sendall(encode_frame({"id": 4}))
        assert FrameReader(watched).read(poll=LONG_POLL) == {"id": 4}
        assert watched.polls == []
