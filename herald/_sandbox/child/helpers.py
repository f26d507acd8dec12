"""Helpers exported by `hermes_tools` next to the tool stubs. Stdlib only, Python >= 3.8."""

from __future__ import annotations

import _thread
import json
import os
import queue
import re
import shlex
import threading
import time
from types import FunctionType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

from . import client
from .transaction import transaction as transaction  # exported by hermes_tools with these

_MISSING = object()


class _Threads:
    """Threads that run parallel()'s workers, kept for the life of the process.

    Why keep them: starting a thread waits for it to report in, and 16 starts cost ~2 ms on a
    2-core VM, on every parallel() call of a script that calls it in a loop. Each submit takes
    an idle thread or starts one (without the start-up handshake), so there are always as
    many threads as workers at work. A forked child makes its own (threads do not survive fork).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self.lock:
            start = self.idle == 0
            if not start:
                self.idle -= 1
        self.jobs.put(job)
        if start:
            _thread.start_new_thread(self._serve, ())

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                job()
            except BaseException:  # the job reports its own outcome; the thread lives on
                pass
            with self.lock:
                self.idle += 1


_threads: Optional[_Threads] = None


def _pool() -> _Threads:
    global _threads
    if _threads is None or _threads.pid != os.getpid():
        _threads = _Threads()
    return _threads


def parallel(*calls: Any, max_workers: int = 16, return_exceptions: bool = False) -> List[Any]:
    """Run several tool calls at once and return their results in call order.

    Each call is a zero-argument callable or a tuple `(function, *args)`; a single list of them
    works too:

        a, b = parallel(lambda: read_file("a.py"), lambda: read_file("b.py"))
        pages = parallel([(web_extract, [url]) for url in urls])

    If a call raises, the first failure (in call order) is raised after all calls finish, unless
    `return_exceptions=True`, in which case the exception object takes that call's place.
    """
    jobs = _jobs(tuple(calls[0]) if len(calls) == 1 and isinstance(calls[0], list) else calls)
    workers = max(1, min(max_workers, len(jobs)))
    if all(_is_stub(func) for func, _ in jobs):
        # Tool calls only: they go out together from this thread, no thread per call.
        results = list(_stub_outcomes(jobs, workers))
        failed = [isinstance(outcome, BaseException) for outcome in results]
    else:
        results, failed = _in_threads(jobs, workers)
    if not return_exceptions:
        for index, bad in enumerate(failed):
            if bad:
                raise results[index]
    return results


_Job = Tuple[Callable[..., Any], Tuple[Any, ...]]


def _jobs(calls: Sequence[Any]) -> List[_Job]:
    """parallel()'s calls as (function, args); a TypeError names the first that is neither."""
    jobs: List[_Job] = []
    for index, call in enumerate(calls):
        if callable(call):
            jobs.append((call, ()))
        elif isinstance(call, tuple) and call and callable(call[0]):
            jobs.append((call[0], tuple(call[1:])))
        else:
            raise TypeError(
                "parallel(): call %d must be a callable or a (function, *args) tuple, got %r" % (index, call)
            )
    return jobs


def _in_threads(jobs: List[_Job], workers: int) -> Tuple[List[Any], List[bool]]:
    """Each job's result (its exception if it raised) and whether it raised, the jobs taken in
    turn by `workers` threads of the pool."""
    results: List[Any] = [None] * len(jobs)
    failed: List[bool] = [False] * len(jobs)
    counter = iter(range(len(jobs)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            func, args = jobs[index]
            try:
                results[index] = func(*args)
            except BaseException as exc:  # handed back to the caller below
                results[index] = exc
                failed[index] = True

    finished = threading.Semaphore(0)

    def work_then_report() -> None:
        try:
            worker()
        finally:
            finished.release()

    for _ in range(workers):
        _pool().submit(work_then_report)
    for _ in range(workers):
        finished.acquire()
    return results, failed


def _is_stub(func: Any) -> bool:
    """A tool's function in the generated hermes_tools module (its helpers live here)."""
    return type(func) is FunctionType and func.__module__ == "hermes_tools" and not func.__name__.startswith("_")


def _stub_outcomes(jobs: Sequence[Tuple[Callable[..., Any], Tuple[Any, ...]]], limit: int) -> List[Any]:
    """Each job's outcome (a result or an exception): each stub is asked which call it makes
    (its own argument errors are that job's outcome, as in a worker), then the calls are made
    together, at most `limit` at once."""
    outcomes: List[Any] = [None] * len(jobs)
    calls: List[Tuple[str, Dict[str, Any]]] = []
    made_by: List[int] = []
    for index, (stub, args) in enumerate(jobs):
        try:
            made = client.ask(stub, args)
        except Exception as exc:
            outcomes[index] = exc
            continue
        if isinstance(made, client.Deferred):
            calls.append((made.tool, made.args))
            made_by.append(index)
        else:  # not a plain stub after all: what it returned is its outcome
            outcomes[index] = made
    for position, outcome in enumerate(client.call_many(calls, limit)):
        outcomes[made_by[position]] = outcome
    return outcomes


def json_parse(text: Any, default: Any = _MISSING) -> Any:
    """Parse JSON out of tool output: tolerates ``` fences and text around one JSON value.

    Returns `default` when nothing parses and a default was given, else raises ValueError
    showing the start of the text.
    """
    if isinstance(text, (dict, list)):
        return text
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    stripped = text.strip()
    fenced = re.match(r"^```[a-zA-Z0-9_-]*\s*\n(.*?)\n?```\s*$", stripped, re.S)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", stripped):
        try:
            value, _ = decoder.raw_decode(stripped, match.start())
            return value
        except ValueError:
            continue
    if default is not _MISSING:
        return default
    raise ValueError("json_parse: no JSON value found in text starting %r" % stripped[:120])


def shell_quote(value: Union[str, Sequence[str]]) -> str:
    """Quote a string (or join and quote a list of arguments) for use in a terminal() command."""
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(str(value))


def retry(
    func: Callable[..., Any],
    *args: Any,
    attempts: int = 3,
    delay: float = 0.5,
    backoff: float = 2.0,
    exceptions: Union[Type[BaseException], Tuple[Type[BaseException], ...]] = Exception,
    **kwargs: Any
) -> Any:
    """Call `func(*args, **kwargs)` until it succeeds, up to `attempts` times.

    Waits `delay` seconds after the first failure, multiplied by `backoff` after each further
    one; the last failure is re-raised.
    """
    wait = delay
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return func(*args, **kwargs)
        except exceptions:
            if attempt >= attempts:
                raise
            time.sleep(wait)
            wait *= backoff
    raise AssertionError("unreachable")
