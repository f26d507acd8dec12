"""The RPC server's connection threads: reused by later connections, gone once closed."""

from __future__ import annotations

import threading

from herald.runtime.rpc.workers import IDLE_NAME, ConnectionThreads

from ._helpers import wait_for


def _record(into: list[threading.Thread], done: threading.Event) -> None:
    into.append(threading.current_thread())
    done.set()


def test_a_finished_connections_thread_serves_the_next_and_exits_on_close() -> None:
    threads = ConnectionThreads(idle_seconds=600)
    seen: list[threading.Thread] = []
    first, second = threading.Event(), threading.Event()
    threads.submit(lambda: _record(seen, first))
    assert first.wait(30)
    assert wait_for(lambda: seen[0].name == IDLE_NAME)  # waiting for the next connection
    threads.submit(lambda: _record(seen, second))
    assert second.wait(30)
    assert seen[1] is seen[0]  # no new thread was started
    threads.close()
    seen[0].join(30)
    assert not seen[0].is_alive()


def test_busy_threads_are_never_handed_a_second_job() -> None:
    threads = ConnectionThreads(idle_seconds=600)
    release = threading.Event()
    started = threading.Barrier(4, timeout=30)
    seen: list[threading.Thread] = []

    def hold() -> None:
        seen.append(threading.current_thread())
        started.wait()
        release.wait(30)

    for _ in range(3):
        threads.submit(hold)
    started.wait()  # three jobs run at once, so on three threads
    assert len({id(t) for t in seen}) == 3
    release.set()
    threads.close()


def test_an_idle_thread_leaves_after_its_wait() -> None:
    threads = ConnectionThreads(idle_seconds=0.05)
    seen: list[threading.Thread] = []
    done = threading.Event()
    threads.submit(lambda: _record(seen, done))
    assert done.wait(30)
    seen[0].join(30)
    assert not seen[0].is_alive()
    later = threading.Event()
    threads.submit(lambda: _record(seen, later))  # a new thread serves it
    assert later.wait(30)
    threads.close()
