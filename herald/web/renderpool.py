"""A session's extraction workers (renderworker.py): pages are fetched in Herald's threads and made
text in these processes, in parallel and off Herald's GIL.

The pool is made at a session's first keyless web_extract and lives as long as the session (the
tool keeps it in `ToolContext.cache`, and `ToolContext.closers` kills it). It starts all its
workers at once, so they import the extraction libraries while the first pages are being fetched.
A worker takes one page at a time. Workers start from Herald's spawner thread (their
PR_SET_PDEATHSIG is tied to the thread that starts them), in a session of their own (a Ctrl-C at
the terminal is Herald's to handle), with an empty environment (no keys) and no descriptors but
their pipes. A page that makes its worker exceed its memory, crash or overrun its time fails
alone, with the reason; the worker is replaced by a fresh one for the next page.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import PageError, RunTimeUp
from .page import Fetched
from .render import Rendered

MIB = 1024 * 1024
# How a worker is started: subprocess.Popen's signature (the tool passes Herald's spawner thread's).
Popen = Callable[..., "subprocess.Popen[bytes]"]
# -I -S: no PYTHON* variables, no site (its .pth hooks cost a start-up); the parent's sys.path instead,
# so the worker imports the same Herald and libraries.
BOOT = ("import json, sys; sys.path[:0] = [p for p in json.loads(sys.argv[1]) if p not in sys.path]; "
        "from herald.web.renderworker import main; main()")
READ_CHUNK = 1 << 20


def default_size() -> int:
    """One worker per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class WorkerGone(Exception):
    """The worker's pipe closed: it exited or was killed mid-page."""


class _Worker:
    def __init__(self, popen: Popen, memory_bytes: int, recycle_bytes: int) -> None:
        argv = [sys.executable, "-I", "-S", "-c", BOOT, json.dumps(_import_path()), str(os.getpid()),
                str(memory_bytes), str(recycle_bytes)]
        self.proc = popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          env={}, cwd="/", close_fds=True, start_new_session=True, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._in, False)  # a worker that stops reading cannot hold a call past its deadline

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, page: Fetched, deadline: float | None) -> dict[str, Any]:
        header = json.dumps({"url": page.url, "content_type": page.content_type, "charset": page.charset,
                             "size": len(page.body)}).encode("utf-8") + b"\n"
        try:
            _write_all(self._in, header + page.body, deadline)
        except (BrokenPipeError, ConnectionResetError):
            raise WorkerGone from None
        buffer = bytearray()
        while b"\n" not in buffer:
            buffer += self._read(deadline)
        size_line, _, rest = bytes(buffer).partition(b"\n")
        size = int(size_line)
        reply = bytearray(rest)
        while len(reply) < size:
            reply += self._read(deadline)
        message: dict[str, Any] = json.loads(bytes(reply[:size]))
        return message

    def _read(self, deadline: float | None) -> bytes:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError
        ready, _, _ = select.select([self._out], [], [], left)
        if not ready:
            raise TimeoutError
        chunk = os.read(self._out, READ_CHUNK)
        if not chunk:
            raise WorkerGone
        return chunk

    def how_it_ended(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            hint = " (SIGKILL: most often the kernel's OOM killer)" if -code == signal.SIGKILL else ""
            return f"it was killed by {name}{hint}"
        return f"it exited with status {code}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _import_path() -> list[str]:
    """Where the worker imports from: Herald's own directory, then this process's path without
    its working directory (`python -m herald` puts it first): a workspace's `lxml.py` must not
    shadow a library in the process that parses untrusted pages."""
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    here = os.getcwd()
    return [home, *(entry for entry in sys.path if entry and os.path.abspath(entry) not in (here, home))]


def _write_all(fd: int, data: bytes, deadline: float | None) -> None:
    """`data` into the non-blocking pipe `fd`; TimeoutError once `deadline` passes."""
    view = memoryview(data)
    while view:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError
        _, ready, _ = select.select([], [fd], [], left)
        if not ready:
            raise TimeoutError
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue


class RenderPool:
    """Up to `size` worker processes, each limited to `memory_bytes` of address space (0: no
    limit) and replaced once its resident size passes `recycle_bytes` (0: never)."""

    def __init__(self, size: int, memory_bytes: int, recycle_bytes: int, popen: Popen = subprocess.Popen) -> None:
        self.size = max(1, size)
        self._memory = memory_bytes
        self._recycle = recycle_bytes
        self._popen = popen
        self._cond = threading.Condition(threading.Lock())
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._starting = 0
        self._closed = False

    def start(self) -> None:
        """Start every worker now (they load the libraries while the caller does other work)."""
        while True:
            with self._cond:
                if self._closed or len(self._all) + self._starting >= self.size:
                    return
                self._starting += 1
            try:
                worker = self._start_one()
            except (OSError, PageError):  # the pages will say so, each with the reason
                return
            with self._cond:
                self._idle.append(worker)
                self._cond.notify()

    def pids(self) -> list[int]:
        with self._cond:
            return [worker.pid for worker in self._all]

    def render(self, page: Fetched, limit: float | None = None, run_limited: bool = False) -> Rendered:
        """`page` made text in a worker within `limit` seconds of a worker taking it (`run_limited`:
        that limit is the run's deadline, which bounds the wait for a worker too, and the error
        says so); PageError says why a page could not be."""
        deadline = None if limit is None else time.monotonic() + limit
        worker = self._take(deadline if run_limited else None, run_limited)
        if limit is not None and not run_limited:
            deadline = time.monotonic() + limit  # the wait for a free worker is not the page's fault
        try:
            message = worker.ask(page, deadline)
        except TimeoutError:
            self._discard(worker)
            if run_limited:
                raise RunTimeUp("the run's time limit was reached while the page was being extracted") from None
            raise PageError(f"extracting the page took more than {limit:.0f} s (web.fetch_timeout); "
                            "fetch it with terminal('curl -o FILE URL') and read parts of it instead") from None
        except WorkerGone:
            closed = self._closed
            ended = worker.how_it_ended()
            self._discard(worker)
            if closed:
                raise PageError("the session ended while the page was being extracted") from None
            raise PageError(f"the process extracting the page ended ({ended}); the page is probably too "
                            "large or malformed to extract: fetch it with terminal('curl -o FILE URL')") from None
        except BaseException:
            self._discard(worker)
            raise
        if message.get("recycle"):
            self._discard(worker)
        else:
            self._give_back(worker)
        if "error" in message:
            raise PageError(str(message["error"]))
        return Rendered(str(message["url"]), str(message["title"]), str(message["text"]), message["links"])

    def close(self) -> None:
        """Kill every worker; pages being extracted fail saying the session ended."""
        with self._cond:
            self._closed = True
            workers = list(self._all)
            self._idle.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.kill()

    def _start_one(self) -> _Worker:
        try:
            worker = _Worker(self._popen, self._memory, self._recycle)
        except BaseException:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._starting -= 1
            self._all.add(worker)
            if self._closed:
                self._all.discard(worker)
                worker.kill()
                raise PageError("the session ended before the page was extracted")
        return worker

    def _take(self, deadline: float | None, run_limited: bool) -> _Worker:
        dead: list[_Worker] = []
        try:
            return self._take_live(deadline, run_limited, dead)
        finally:
            for worker in dead:
                worker.kill()  # reaped and its pipes closed

    def _take_live(self, deadline: float | None, run_limited: bool, dead: list[_Worker]) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise PageError("the session ended before the page was extracted")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.proc.poll() is None:
                        return worker
                    self._all.discard(worker)  # died while idle (killed from outside): replaced below
                    dead.append(worker)
                if len(self._all) + self._starting < self.size:
                    self._starting += 1
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if run_limited:
                        raise RunTimeUp("the run's time limit was reached before the page was extracted")
                    raise PageError("no extraction process was free in time (web.fetch_timeout)")
                self._cond.wait(left)
        try:
            return self._start_one()
        except OSError as exc:
            raise PageError(f"could not start a process to extract the page: {exc}") from None

    def _give_back(self, worker: _Worker) -> None:
        with self._cond:
            if self._closed:
                kill = True
            else:
                kill = False
                self._idle.append(worker)
                self._cond.notify()
        if kill:
            worker.kill()

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            self._all.discard(worker)
            self._cond.notify()
