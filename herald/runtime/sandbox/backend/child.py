"""In-backend execution, Herald's side: the sandbox child runs inside the backend. Policy:
- The script runs where the backend's commands run (the container, the SSH host, the Modal
  sandbox), so `open()`, `subprocess` and `os.getcwd()` in it act there; it starts in the
  backend shell's current directory.
- Once per Runtime, `BackendSandbox` (backend/sandbox.py) probes the backend's python and
  unpacks the sandbox files (the same `hermes_tools.py` and `_hermes_runtime` package as in host
  mode, the supervisor among them) into a private directory there, its owner's (_sandbox/procs/owners.py).
- Per run, `BackendChild` opens one exec channel (`Backend.open_channel`, in a background thread,
  so a warm successor costs the run that spawns it nothing; the first run's is the setup's)
  running the supervisor, which
  starts the host mode's child bootstrap in its own process group: forked by the Runtime's
  zygote in the backend (backend/zygote.py) when there is one, else spawned (the frames:
  herald/_sandbox/wire/frames.py, "Exec channel"). Tool calls, output, control and exit all travel
  as protocol frames over that one stream; nothing is polled from files.
- Tool calls are served by the Runtime's Dispatcher (allow-list, argument checks, budget,
  transcript) on a bounded pool shared by the Runtime's runs (backend/calls.py); the Dispatcher's per-resource locks
  keep calls that touch the same thing (a file, the shell) apart.
- Output lands in the same CappedCapture objects as in host mode, so caps, spill files and the
  ExecutionResult are identical.
- The result does not wait for the channel to close: the supervisor sends the exit as soon as
  the script says it is leaving (its output flushed), and the channel is handed to the
  Runtime's closer (backend/closer.py), which lets it end by itself before closing it.
- Timeout or interrupt: a kill frame (the supervisor SIGTERMs the tree, SIGKILLs it after the
  grace); if the backend has not reported the exit `KILL_MARGIN_SECONDS` after the grace, the
  channel is closed, and the supervisor kills the tree when its stdin ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar, cast

from ...._sandbox.procs.trees import KillClock
from ...._sandbox.wire import frames
from ...._sandbox.wire import guards as wire
from ...._sandbox.wire.framing import FrameBuffer, ProtocolError, encode_frame
from ....backends.base import Channel
from ....capture import CappedCapture
from ....inflight import FREE_BYTES, InflightBytes
from ...rpc.server import Handler
from ..contract import Collected, LocalGrants, Reason
from ..errors import SandboxStartError
from ..streams import OutputStream, interrupted
from .calls import BackendCalls
from .closer import OPEN_JOIN_SECONDS, close_channel
from .setup import DIR_GONE, RemoteDirGone

POLL_SECONDS = 0.05  # how long the collect loop waits on a quiet stream before checking interrupts
KILL_MARGIN_SECONDS = 3.0  # time past the kill grace for the backend to report the exit
FAILURE_TEXT_LIMIT = 4000
POLL_READS = 64  # poll's reads of what is already there (a waiting child says little)

_CLOSE: frames.CloseFrame = {"type": frames.CLOSE}
GOODBYE = encode_frame(_CLOSE)
S = TypeVar("S")
log = logging.getLogger(__name__)


class BackendChild(Generic[S]):
    """One sandbox child inside the backend, seen through its exec channel. Offers what the
    Runtime uses of a ChildProcess: wait_ready, send, collect, poll, kill."""

    def __init__(
        self,
        open_channel: Callable[[], Channel],
        prepare: frames.PrepareFrame,
        authenticate: Callable[[str], S | None],
        handle: Handler[S],
        pool: ThreadPoolExecutor,
        *,
        where: str,
        python: str,
        tools: LocalGrants[S] | None = None,
        retire: Callable[[Channel, bytes | None], None] = close_channel,
        await_opener: Callable[[threading.Thread], None] = lambda opener: opener.join(OPEN_JOIN_SECONDS),
        inflight: Callable[[S], InflightBytes | None] | None = None,
    ) -> None:
        self._channel: Channel | None = None
        self._large: dict[int, int] = {}  # id() of a large call read, not yet dispatched -> its body's length
        self._retire = retire  # closes a channel off the result path (backend/closer.py)
        self._await_opener = await_opener  # waits for an opener closed mid-way: it retires what it opens
        self._tools = tools
        self._opened = threading.Event()
        self._open_error = ""
        self._python = python
        self._authenticate = authenticate
        self._calls = BackendCalls(self._send, handle, pool, tools, inflight)  # the script's calls to Herald
        self._where = where
        # Frames are read one after another here, so a large one is counted once decoded (admit
        # only measures): at most one beyond the cap is held before its call is refused.
        self._frames = FrameBuffer(admit=lambda size: True, admit_over=FREE_BYTES, track_sizes=inflight is not None)
        self._backlog: list[frames.FromSupervisor] = []  # frames read before collect() wanted them
        self._send_lock = threading.Lock()
        self._session: S | None = None
        self.exit_code: int | None = None  # the script interpreter's status, once reported
        self.gone = False  # the channel ended (or stopped carrying frames)
        self.failure = ""  # what came instead of frames, or the supervisor's own error
        self._quiet = False  # the last read found nothing to read
        self.ready = False
        self.closed = False
        if tools is not None:
            prepare = {**prepare, "tool_specs": tools.specs()}
        self._opener = threading.Thread(
            target=self._open, args=(open_channel, encode_frame(prepare)), name="herald-remote-open", daemon=True
        )
        self._opener.start()

    # -- the stream ------------------------------------------------------------------------

    def _open(self, open_channel: Callable[[], Channel], prepare: bytes) -> None:
        try:
            channel = open_channel()
        except Exception as exc:  # BackendError, or whatever the backend's client raised
            self._open_error = f"could not start {self._python} on {self._where}: {exc}"
            self.gone = True
            self._opened.set()
            return
        with self._send_lock:
            if not self.closed:
                self._channel = channel
        if self._channel is None:  # killed before it opened: its supervisor is starting, deaf still
            self._retire(channel, None)
        else:
            self._send(prepare)
        self._opened.set()

    def _send(self, data: bytes) -> bool:
        """Whether `data` left; a failure is otherwise reported by the next read (the channel's end)."""
        with self._send_lock:
            if self.closed or self._channel is None:
                return False
            try:
                self._channel.send(data)
            except Exception as exc:
                log.debug("send on the exec channel failed: %s", exc)
                return False
            return True

    def _read(self, timeout: float) -> list[frames.FromSupervisor]:
        if self._channel is None and not self.gone:
            started = time.monotonic()
            self._opened.wait(timeout)
            timeout = max(0.0, timeout - (time.monotonic() - started))
        if self.gone or self.closed or self._channel is None:
            return []
        try:
            chunk = self._channel.recv(timeout)
            self._quiet = chunk is None
        except Exception as exc:
            self._lost(f"the exec channel failed: {exc}")
            return []
        if chunk is None:
            return []
        if not chunk:
            self._lost(self._frames.pending.decode("utf-8", "replace"))
            return []
        try:
            messages = self._frames.feed(chunk)
            sizes, self._frames.sizes = self._frames.sizes, [] if self._frames.sizes is not None else None
        except ProtocolError:
            # Not our protocol: a shell's or the interpreter's own complaint. Keep it to show.
            self._lost(self._frames.pending.decode("utf-8", "replace"))
            return []
        said: list[frames.FromSupervisor] = []
        for message, size in zip(messages, sizes or [0] * len(messages), strict=True):
            try:
                frame = wire.from_supervisor(message)
            except wire.FrameError as exc:
                log.warning("ignored a malformed frame from the supervisor on %s: %s", self._where, exc)
                continue
            said.append(frame)
            if "type" not in frame:
                if size:
                    self._large[id(frame)] = size
            elif frame["type"] == frames.READY:
                self.ready = True
            elif frame["type"] == frames.EXIT:
                self.exit_code = frame["exit_code"]
            elif frame["type"] == frames.FAILED:
                self.failure = frame["error"]
        return said

    def _lost(self, text: str) -> None:
        self.gone = True
        if text.strip() and not self.failure:
            self.failure = text.strip()[:FAILURE_TEXT_LIMIT]

    # -- what the Runtime calls ------------------------------------------------------------

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxStartError(
                    f"the sandbox interpreter on {self._where} did not start within {timeout:.0f} s"
                )
            self._backlog.extend(m for m in self._read(min(remaining, 0.25)) if m.get("type") != frames.READY)
            if self._open_error:
                raise SandboxStartError(self._open_error)
            if not self.ready and (self.gone or self.exit_code is not None or self.failure):
                if DIR_GONE in self.failure:
                    raise RemoteDirGone(f"the sandbox files on {self._where} were removed")
                raise SandboxStartError(self._startup_failure())

    def _startup_failure(self) -> str:
        said = "".join(m["data"] for m in self._backlog if "type" in m and m["type"] in (frames.OUT, frames.ERR))
        said = said.encode("latin-1", "replace").decode("utf-8", "replace").strip()
        text = "\n".join(t for t in (said, self.failure) if t)
        status = self.exit_code if self.exit_code is not None or self._channel is None else self._channel.returncode
        how = f" (status {status})" if isinstance(status, int) else ""
        return f"the sandbox interpreter on {self._where} exited during start-up{how}: {text or 'no output'}"

    def send(self, message: frames.StartFrame | frames.CodeFrame) -> None:
        """Hand over a run as the Runtime phrases it for a ChildProcess: a first message with
        the mode, the token of the run's binding and the cwd; later `{"code"}` for kernel cells."""
        if message["type"] == frames.START:
            token = message.get("token")
            self._session = self._authenticate(token) if isinstance(token, str) else None
            # Not the socket or token: the supervisor gives the script its own.
            start = cast(frames.StartFrame, {"type": frames.START, **{k: message.get(k) for k in frames.RUN_KEYS}})
            self._add_grant(start)
            sent = self._send(encode_frame(start))
            if self.gone or not sent or (self._channel is not None and self._channel.undelivered):
                # A waiting child whose connection dropped: the Runtime gives the run to a new one.
                raise BrokenPipeError(f"the exec channel to {self._where} is gone")
        else:
            cell: frames.CodeFrame = {
                "type": frames.CODE,
                "code": message.get("code", ""),
                "line_buffered": bool(message.get("line_buffered")),
            }
            self._add_grant(cell)
            self._send(encode_frame(cell))

    def _add_grant(self, frame: frames.StartFrame | frames.CodeFrame) -> None:
        if self._tools is not None and self._session is not None:
            grant = self._tools.grant(self._session)
            if grant is not None:
                frame["tools"] = grant
                self._calls.cwd_sent = grant["cwd"]

    def collect(
        self,
        stdout: CappedCapture,
        stderr: CappedCapture,
        *,
        deadline: float,
        interrupt_fd: int,
        kill_grace: float,
        sentinel: bytes | None = None,
        paused: Callable[[], float] | None = None,
    ) -> Collected:
        """Read frames until the script exits (one-shot) or a kernel cell is done and both
        sentinels arrived; serve tool calls meanwhile. At the deadline (moved by `paused()`) or
        on interrupt, kill."""
        streams = {frames.OUT: OutputStream(-1, stdout, sentinel), frames.ERR: OutputStream(-1, stderr, sentinel)}
        # The supervisor runs its own clock for SIGTERM -> grace -> SIGKILL inside the backend;
        # this one only asks it to start (terminate) and, if it never answers, cuts the link.
        clock = KillClock(deadline, kill_grace + KILL_MARGIN_SECONDS, lambda: self._terminate(kill_grace), self.close)
        done, done_status = False, None
        messages, self._backlog = self._backlog, []
        while True:
            cells_done = self._take_frames(messages, streams)
            if cells_done:
                done, done_status = True, cells_done[-1]
            if self.exit_code is not None or self.gone:
                break
            if done and clock.reason is None and all(s.seen for s in streams.values()):
                return Collected("done", done_status, alive=True)
            if interrupted(interrupt_fd):
                clock.stop("interrupted")
            now = time.monotonic()
            if paused is not None:
                clock.deadline = deadline + paused()
            if clock.tick(now):  # no word from the backend: ending its stdin kills the tree there
                break
            wake = clock.wait(now)
            messages = self._read(min(POLL_SECONDS, wake if wake is not None else POLL_SECONDS))
        for stream in streams.values():
            stream.finish()
        return self._outcome(cast("Reason | None", clock.reason), done, done_status, stderr)

    def _take_frames(self, messages: list[frames.FromSupervisor], streams: dict[str, OutputStream]) -> list[int | None]:
        """Feed output to the captures, serve tool calls, count the supervisor's records: the exit
        statuses of the kernel cells these frames say are done."""
        cells_done: list[int | None] = []
        for message in messages:
            if "type" not in message:
                self._calls.dispatch(self._session, message, self._large.pop(id(message), 0))
            elif message["type"] == frames.OUT or message["type"] == frames.ERR:
                streams[message["type"]].feed(message["data"].encode("latin-1", "replace"))
            elif message["type"] == frames.RECORD and self._tools is not None and self._session is not None:
                self._tools.record(self._session, message)
                if "cwd" in message:
                    self._calls.cwd_sent = message["cwd"]  # the supervisor's own move: no CWD frame back
            elif message["type"] == frames.DONE:
                cells_done.append(message["exit_code"])
        return cells_done

    def _outcome(self, killing: Reason | None, done: bool, done_status: int | None,
                 stderr: CappedCapture) -> Collected:
        """How the run ended; a link that broke or a supervisor that failed is said in stderr."""
        if killing is None and self.exit_code is None:
            reason = self.failure or "the exec channel closed without an exit status"
            stderr.feed(f"\nThe sandbox on {self._where} stopped unexpectedly: {reason}\n".encode())
        elif self.failure:
            stderr.feed(f"\nHerald's supervisor on {self._where} failed: {self.failure}\n".encode())
        if killing is not None:
            return Collected(killing, self.exit_code)
        if done:
            return Collected("done", done_status)
        return Collected("exited", self.exit_code)

    def _terminate(self, grace: float) -> None:
        kill: frames.KillFrame = {"type": frames.KILL, "grace": grace}
        self._send(encode_frame(kill))

    def poll(self) -> int | None:
        """The script interpreter's exit status once it is gone (-1 if unknown), else None.
        Reads all the channel holds now: one whose connection dropped may still hand over
        output it had before saying it ended, and a waiting child must not look alive then."""
        for _ in range(POLL_READS):
            if self.exit_code is not None or self.gone or self.closed or not self._opened.is_set():
                break
            self._backlog.extend(_not_ready(self._read(0)))
            if self._quiet:
                break
        if self.exit_code is not None:
            return self.exit_code
        return -1 if self.gone or self.closed else None

    def kill(self, grace: float = 0.0) -> None:
        """Stop the script and everything it started; close the channel."""
        if self.closed:
            return
        if grace > 0 and not self.gone and self.exit_code is None:
            clock = KillClock(None, grace + KILL_MARGIN_SECONDS, lambda: self._terminate(grace), lambda: None)
            clock.stop("killed")
            while self.exit_code is None and not self.gone and not clock.tick():
                self._read(min(POLL_SECONDS * 4, clock.wait() or 0.0))
        self.close()

    def close(self) -> None:
        if not self.closed and not self.ready and self._opened.is_set():
            self._read(0)  # a READY that came unread (a waiting child's): it listens, it can be told to leave
        acquired = self._send_lock.acquire(timeout=5)  # let a reply being written finish first
        try:
            if self.closed:
                return
            self.closed = True
            channel = self._channel
        finally:
            if acquired:
                self._send_lock.release()
        if channel is not None:
            # After its exit frame the supervisor leaves by itself; once ready, the goodbye tells
            # it to kill its tree and leave; before, it would hear it only after its start-up:
            # closed at once then. The channel is closed once it has (backend/closer.py).
            leaving = self.gone or self.exit_code is not None
            self._retire(channel, b"" if leaving else GOODBYE if self.ready else None)
        elif threading.current_thread() is not self._opener:
            self._await_opener(self._opener)  # it closes what it opens from now on


def _not_ready(said: list[frames.FromSupervisor]) -> list[frames.FromSupervisor]:
    """What a read gave but the supervisor's READY (which `_read` took note of)."""
    return [m for m in said if "type" not in m or m["type"] != frames.READY]
