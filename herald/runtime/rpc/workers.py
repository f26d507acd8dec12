"""Threads that serve connections, kept for a while after their connection ends.

A script's `parallel()` opens up to 16 connections at once, and each run opens at least one;
starting a thread for each costs 50–100 µs of the parent's time on the call's path, more than a
small call itself. So a thread whose connection ended waits `idle_seconds` for the next one
before it exits. Waiting threads are named IDLE_NAME, serving ones SERVING_NAME.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

SERVING_NAME = "herald-rpc-conn"
IDLE_NAME = "herald-rpc-idle"
DEFAULT_IDLE_SECONDS = 30.0

Job = Callable[[], None]


class ConnectionThreads:
    def __init__(self, idle_seconds: float = DEFAULT_IDLE_SECONDS) -> None:
        self._idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # waiting threads no job has been promised to
        self._closed = False

    def submit(self, job: Job) -> None:
        """Run `job` on a waiting thread, or on a new one if none waits."""
        with self._lock:
            reuse = self._idle > 0
            if reuse:
                self._idle -= 1
        if reuse:
            self._jobs.put(job)
        else:
            threading.Thread(target=self._work, args=(job,), name=SERVING_NAME, daemon=True).start()

    def close(self) -> None:
        """Let every waiting thread exit now (a job already promised still runs)."""
        with self._lock:
            self._closed = True
            waiting, self._idle = self._idle, 0
        for _ in range(waiting):
            self._jobs.put(None)

    def _work(self, job: Job | None) -> None:
        me = threading.current_thread()
        while job is not None:
            me.name = SERVING_NAME
            job()
            job = self._next(me)

    def _next(self, me: threading.Thread) -> Job | None:
        with self._lock:
            if self._closed:
                return None
            self._idle += 1
            me.name = IDLE_NAME  # only once counted: a caller seeing the name may rely on reuse
        try:
            return self._jobs.get(timeout=self._idle_seconds)
        except queue.Empty:
            with self._lock:
                if self._idle > 0:  # nobody was promised a thread: one of us may go
                    self._idle -= 1
                    return None
            # A job was promised to a waiting thread as our wait ran out; it is on its way.
            return self._jobs.get()
