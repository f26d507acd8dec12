"""Wire format shared by the parent server and the sandbox child.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (`encode_frame`,
`FrameReader`, `FrameBuffer`); on the zygote's socket, one JSON datagram (guards.encode_op). What
each channel's frames are is frames.py's; the guard its readers check them with, guards.py's.
Part of the sandbox package (see its __init__.py for the rules).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024
# Auth frames and control-pipe frames carry a few short fields: a peer that announces more is
# refused at the header, before anything is buffered (an unauthenticated 64 MiB frame is not).
MAX_CONTROL_FRAME_BYTES = 4 * 1024

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=repr)
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), default=repr)
_decoder = json.JSONDecoder()


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame; the connection must be closed."""


# A faster JSON codec the parent may install (`use_fast_json`); the sandbox never does.
_fast_dumps: Optional[Callable[[Any], bytes]] = None
_fast_loads: Optional[Callable[[Any], Any]] = None


def use_fast_json(dumps: Callable[[Any], bytes], loads: Callable[[Any], Any]) -> None:
    """Encode and decode frames with `dumps` / `loads` (Herald's parent, with orjson): they must
    give the same JSON as the stdlib path for what they accept. Whatever they refuse (a lone
    surrogate, an integer past 64 bits, NaN in a frame read) takes the stdlib path, so the
    answers and the errors stay the same."""
    global _fast_dumps, _fast_loads
    _fast_dumps, _fast_loads = dumps, loads


def encode_frame(message: object) -> bytes:
    body = None
    if _fast_dumps is not None:
        try:
            body = _fast_dumps(message)
        except Exception:
            body = None
    if body is None:
        try:
            body = _encoder.encode(message).encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (say, a file name decoded with surrogateescape) is not UTF-8 and the
            # peer would drop the connection: send \u escapes, which decode to the same string.
            body = _ascii_encoder.encode(message).encode("ascii")
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(
            "message of %d bytes exceeds the %d-byte frame limit" % (len(body), MAX_FRAME_BYTES)
        )
    return HEADER.pack(len(body)) + body


# For `body_size`: the stdlib's C encoder made once, as `_encoder` encodes, without the check for
# circular references (the values sized are built by Herald's own tool core: they have none).
_sizer = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, repr, json.encoder.encode_basestring, None, ":", ",", False, False, True,
) if getattr(json.encoder, "c_make_encoder", None) is not None else None


def body_size(message: Mapping[str, Any]) -> int:
    """How many bytes `message`'s frame body holds (`len(encode_frame(message)) - HEADER.size`),
    without making the frame: the size a record reports of a reply that was never sent."""
    if _sizer is not None and _fast_dumps is None:
        text = "".join(_sizer(message, 0))
        if text.isascii():
            return len(text)
        try:
            return len(text.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: encode_frame sends escapes instead
            pass
    return len(encode_frame(message)) - HEADER.size


def reply_frame(message: Mapping[str, Any], reply: Mapping[str, Any], echo: Iterable[str] = ("id",)) -> bytes:
    """`reply` to `message` as a frame, with the `echo` keys (the call id, ...) copied from the
    request; a result too large (or not JSON) becomes an error reply the caller can act on."""
    ids = {key: message.get(key) for key in echo}
    try:
        return encode_frame(dict(reply, **ids))
    except (ProtocolError, TypeError, ValueError) as exc:
        return encode_frame(dict(ids, error={"type": "ResultTooLarge", "message": str(exc)}))


def decode_body(body: Any) -> Dict[str, Any]:
    """One frame's body (bytes or a buffer such as a memoryview) as a message."""
    message = None
    if _fast_loads is not None:
        try:
            message = _fast_loads(body)
        except Exception:
            message = None
    try:
        if message is None:
            message = _decoder.decode(str(body, "utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting: RecursionError
        raise ProtocolError("frame is not UTF-8 JSON: %s" % exc) from None
    if not isinstance(message, dict):
        raise ProtocolError("frame must hold a JSON object, got %s" % type(message).__name__)
    return message


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether decoded JSON `value` nests lists and dicts more than `limit` deep. Iterative: it
    must not hit the recursion limit it guards against. (How deep a frame may nest to decode is
    not fixed: it is the recursion limit less the decoding thread's stack depth, so a relay that
    decoded a frame cannot tell whether its own peer, deeper in its stack, will.)"""
    if not isinstance(value, (dict, list)):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


# Why a persistent buffer: `recv(n)` allocates n bytes per call, and for n above glibc's mmap
# threshold (128 KiB) that is an mmap/munmap pair per frame — measured at ~15 µs a recv here,
# a third of a raw round trip. recv_into a buffer made once costs nothing extra.
RECV_BUFFER_BYTES = 1 << 16
MAX_POLL_BACKOFF = 6  # after misses in a row, a reader polls on 1 read in 2**6 at least


class FrameReader:
    """Frames from a socket (or anything with `recv_into` or `recv`), usually one system call per
    frame: it reads what is there and keeps what belongs to the next frame. One reader per socket
    at a time; None means the peer closed cleanly between frames."""

    def __init__(self, sock: Any, max_frame: int = MAX_FRAME_BYTES, max_first_frame: Optional[int] = None,
                 track_sizes: bool = False) -> None:
        self._sock = sock
        self._frames = FrameBuffer(max_frame, max_first_frame, track_sizes=track_sizes)
        self._ready: List[Dict[str, Any]] = []
        self._sizes: List[int] = []  # with track_sizes: what `admit` let in of each of _ready
        self.last_size = 0  # with track_sizes: what `admit` let in of the frame `read` returned last (0: not asked)
        self._into = getattr(sock, "recv_into", None)
        self._buffer = bytearray(RECV_BUFFER_BYTES if self._into is not None else 0)
        self._view = memoryview(self._buffer)
        self._poll_misses = 0  # polls in a row that did not find the frame
        self._poll_skips = 0  # reads left to make without polling

    @property
    def buffer(self) -> FrameBuffer:
        """The decoder (to set its `admit`)."""
        return self._frames

    def _took(self, messages: List[Dict[str, Any]]) -> None:
        if len(messages) > 1:
            messages.reverse()  # pop() from the end gives them in order
        self._ready = messages
        sizes = self._frames.sizes
        if sizes:
            sizes.reverse()
            self._sizes, self._frames.sizes = sizes, []

    def _pop(self) -> Dict[str, Any]:
        if self._sizes:
            self.last_size = self._sizes.pop()
        return self._ready.pop()

    @property
    def waiting(self) -> int:
        """Frames already read and decoded that `read` will return next without a system call."""
        return len(self._ready)

    def read(self, deadline: Optional[float] = None, poll: float = 0.0) -> Optional[Dict[str, Any]]:
        """The next frame. With a `deadline` (time.monotonic()), a socket that has not delivered
        the whole frame by then raises socket.timeout, however slowly it trickles bytes.
        `poll`: seconds to look for the frame without sleeping first (see `_poll`)."""
        if poll > 0 and not self._ready and deadline is None:
            if self._poll_skips:
                self._poll_skips -= 1
            elif self._poll(poll):
                self._poll_misses = 0
            else:  # the frame came late: poll less often while that lasts (1 read in 2, 4, ... 64)
                self._poll_misses = min(self._poll_misses + 1, MAX_POLL_BACKOFF)
                self._poll_skips = (1 << self._poll_misses) - 1
        while not self._ready:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("no whole frame before the deadline")
                self._sock.settimeout(left)
            if self._into is not None:
                size = self._into(self._buffer)
                chunk: Any = self._view[:size]
            else:
                chunk = self._sock.recv(RECV_BUFFER_BYTES)
                size = len(chunk)
            if not size:
                if self._frames.pending:
                    raise ProtocolError("connection closed in the middle of a frame")
                return None
            self._took(self._frames.feed(chunk))
        return self._pop()

    def _poll(self, seconds: float) -> bool:
        """Look for the frame without blocking for up to `seconds`, yielding the CPU between
        looks. Why: a reply that comes within a few tens of microseconds (a small tool call) is
        then taken without a wake-up. Waking a sleeping thread on another CPU costs ~35 µs on
        a VM whose idle CPUs halt at once (this one's cpuidle-haltpoll polls for 0 ns), twice
        per call, more than the call itself. Blocking sockets only: on one with a timeout,
        Python would wait for readiness first. A loaded machine is different: the peer may wait
        for a CPU, and polling would take it; so `read` polls less after each miss. True when the
        frame (or the end of the stream) was found."""
        if self._into is None or getattr(self._sock, "gettimeout", lambda: 0)() is not None:
            return False
        into, buffer, dontwait, clock = self._into, self._buffer, socket.MSG_DONTWAIT, time.perf_counter
        yield_cpu = os.sched_yield
        end = clock() + seconds
        while True:
            try:
                size = into(buffer, 0, dontwait)
            except BlockingIOError:
                if clock() > end:
                    return False
                yield_cpu()  # a runnable peer on this CPU goes first: polling never starves it
                continue
            if not size:  # the peer closed: the blocking read that follows reports it
                return True
            self._took(self._frames.feed(self._view[:size]))
            if self._ready:
                return True


class RefusedFrame(Dict[str, Any]):
    """What FrameBuffer gives in place of a frame its `admit` refused: {"id": the call's id if its
    body began with it (call frames do: child/client.py), else None; "size": the body's length}. Its
    body was read and dropped, never held. JSON decoding never makes one of these."""


# A refused frame's id is read from the start of its body: {"id":7,...} (child/client.py sends it first).
_ID_PREFIX_BYTES = 32


def _leading_id(prefix: bytes) -> Optional[int]:
    text = prefix.decode("ascii", "replace")
    if not text.startswith('{"id":'):
        return None
    digits = text[6:].split(",", 1)
    if len(digits) < 2 or not digits[0].isdigit():
        return None
    return int(digits[0])


class FrameBuffer:
    """Incremental decoding of a byte stream: feed chunks as they arrive, get whole messages.

    Used where frames share a stream with nothing else but arrive in arbitrary pieces (the
    exec channel of in-backend execution, in both directions; a child's control pipe).
    A frame may announce at most `max_frame` bytes, the first one `max_first_frame` (an auth
    frame) if given. After a length over the cap the stream cannot be parsed any more: the
    buffer is then broken: it keeps what it had (`pending`, say a shell's error message), takes
    nothing more and raises ProtocolError on every feed, so a reader that goes on draining the
    stream (a pipe whose writer must not block) holds no more memory.

    `admit(size)`, if set, is asked about every frame whose body is over `admit_over` bytes, as
    soon as its length is read: False and the body is read and dropped as it comes (never held),
    and a RefusedFrame takes its place among the messages. `sizes` (with `track_sizes`) lists,
    for each message returned in order, the length `admit` let in (0: it was not asked), so a
    reader can give back what it admitted.
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES, max_first_frame: Optional[int] = None,
                 admit: Optional[Callable[[int], bool]] = None, admit_over: int = 0, track_sizes: bool = False) -> None:
        self._data = bytearray()
        self._max_frame = max_frame
        self._limit = max_frame if max_first_frame is None else max_first_frame
        self.broken = False
        self.admit = admit
        self.admit_over = admit_over
        self.sizes: Optional[List[int]] = [] if track_sizes else None
        self._skipping = 0  # bytes of a refused body still to drop
        self._skipped: Optional[RefusedFrame] = None  # what stands for it once dropped
        self._admitted = -1  # where in the buffer the frame `admit` let in (not yet whole) starts

    def feed(self, chunk: Any, skip_bad: bool = False) -> List[Dict[str, Any]]:
        """Messages completed by `chunk` (bytes or a buffer, which is not kept). A frame whose
        body is not a JSON object raises ProtocolError, or with `skip_bad` is dropped (for a
        stream that outlives a bad frame), and is consumed either way; a length over the cap
        always raises and breaks the buffer."""
        if self.broken:
            raise ProtocolError("the stream broke at an earlier frame")
        messages: List[Dict[str, Any]] = []
        if self._skipping:
            chunk = self._skip(chunk, messages)
            if not len(chunk):
                return messages
        if self._data:
            self._data += chunk
            data: Any = self._data
        else:
            data = chunk  # the usual case, whole frames: parse in place, copy nothing
        start = 0
        try:
            while len(data) - start >= HEADER.size:
                (size,) = HEADER.unpack_from(data, start)
                if size > self._limit:
                    self.broken = True
                    raise ProtocolError("frame of %d bytes exceeds the %d-byte limit" % (size, self._limit))
                if self.admit is not None and size > self.admit_over and self._admitted != start:
                    if len(data) - start - HEADER.size < min(size, _ID_PREFIX_BYTES):
                        break  # the start of its body (its id) first
                    if not self.admit(size):
                        body_start = start + HEADER.size
                        refused = RefusedFrame(id=_leading_id(bytes(data[body_start : body_start + _ID_PREFIX_BYTES])),
                                               size=size)
                        self._limit = self._max_frame
                        have = len(data) - body_start
                        if have >= size:  # all of it is here already: dropped with what was read
                            start = body_start + size
                            self._add(messages, refused, 0)
                            continue
                        start = len(data)  # the rest of the body is dropped as it comes
                        self._skipping, self._skipped = size - have, refused
                        break
                    self._admitted = start  # the same frame is not asked about twice
                end = start + HEADER.size + size
                if len(data) < end:
                    break
                if data is self._data and start == 0 and end == len(data) and size > RECV_BUFFER_BYTES:
                    # A large frame that is all the buffer holds: decoded in place, not from a
                    # copy of its body (which would hold it twice).
                    del data[:HEADER.size]
                    body, end = data, 0
                    data = self._data = bytearray()
                else:
                    body = data[start + HEADER.size : end]
                admitted = size if self._admitted == start else 0
                start = end
                self._admitted = -1
                self._limit = self._max_frame
                try:
                    self._add(messages, decode_body(body), admitted)
                except ProtocolError:
                    if not skip_bad:
                        raise
                del body  # a large body is let go as soon as it is decoded
        finally:
            if data is self._data:
                del data[:start]  # from the front of a bytearray: no copy, buffering stays linear
            elif start < len(data):
                self._data = bytearray(data[start:])
            if self._admitted > 0:
                self._admitted -= start  # where the admitted frame starts now
        return messages

    def _add(self, messages: List[Dict[str, Any]], message: Dict[str, Any], size: int) -> None:
        messages.append(message)
        if self.sizes is not None:
            self.sizes.append(size)

    def _skip(self, chunk: Any, messages: List[Dict[str, Any]]) -> Any:
        """Drop what is left of a refused body from the front of `chunk`; the rest of it."""
        dropped = min(self._skipping, len(chunk))
        self._skipping -= dropped
        if not self._skipping and self._skipped is not None:
            self._add(messages, self._skipped, 0)
            self._skipped = None
        return chunk[dropped:]

    @property
    def pending(self) -> bytes:
        """Bytes received but not yet part of a whole frame (a refused body being dropped counts)."""
        return bytes(self._data) if not self._skipping else b"\0"
