"""Reading a frame by polling before sleeping (FrameReader's `poll`): what a small call's
reply and a script's next call take, so that neither waits for a wake-up. Polling must never
change what is read: frames, their order, the end of the stream, nor lose a frame that comes
after the poll gave up."""

from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from herald._sandbox.protocol import MAX_POLL_BACKOFF, FrameReader, encode_frame

LONG_POLL = 30.0  # a poll that only ends by finding its frame: no verdict depends on timing
SHORT_POLL = 0.0001


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
        reader = FrameReader(right)
        polled = threading.Event()

        class Watched:  # the real socket, telling when the poll has given up (a blocking recv)
            def __getattr__(self, name: str) -> Any:
                return getattr(right, name)

            def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
                if not flags & socket.MSG_DONTWAIT:
                    polled.set()
                return right.recv_into(buffer, nbytes, flags)

        reader = FrameReader(Watched())
        sender = threading.Thread(target=lambda: (polled.wait(60), left.sendall(encode_frame({"id": 2}))))
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
    polls: list[int] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(right, name)

        def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
            if flags & socket.MSG_DONTWAIT:
                polls.append(reads)
                raise BlockingIOError  # nothing there yet, every time: each poll misses
            return right.recv_into(buffer, nbytes, flags)

    with left, right:
        reader = FrameReader(Counting())
        reads = 0
        for reads in range(200):
            left.sendall(encode_frame({"n": reads}))
            assert reader.read(poll=SHORT_POLL) == {"n": reads}
        polled_reads = sorted(set(polls))
        gaps = [b - a for a, b in itertools.pairwise(polled_reads)]
        assert gaps[:MAX_POLL_BACKOFF] == [2 ** k for k in range(1, MAX_POLL_BACKOFF + 1)]
        assert set(gaps[MAX_POLL_BACKOFF:]) == {2 ** MAX_POLL_BACKOFF}


def test_a_hit_restores_polling_on_every_read() -> None:
    left, right = socket.socketpair()
    missing = {0, 2}  # the polls of these reads find nothing; later ones find their frame
    polls: list[int] = []

    class Scripted:
        def __getattr__(self, name: str) -> Any:
            return getattr(right, name)

        def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
            if flags & socket.MSG_DONTWAIT:
                polls.append(reads)
                if reads in missing:
                    raise BlockingIOError
            return right.recv_into(buffer, nbytes, flags)

    with left, right:
        reader = FrameReader(Scripted())
        reads = 0
        for reads in range(12):
            left.sendall(encode_frame({"n": reads}))
            assert reader.read(poll=SHORT_POLL) == {"n": reads}
        # read 0 misses (skip 1), read 2 misses (skip 3), read 6 hits: every read polls again.
        assert sorted(set(polls)) == [0, 2, 6, 7, 8, 9, 10, 11]


def test_a_socket_with_a_timeout_is_not_polled() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(60)
        polls: list[int] = []

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(right, name)

            def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
                if flags & socket.MSG_DONTWAIT:
                    polls.append(1)
                return right.recv_into(buffer, nbytes, flags)

        left.sendall(encode_frame({"id": 4}))
        assert FrameReader(Counting()).read(poll=LONG_POLL) == {"id": 4}
        assert polls == []
