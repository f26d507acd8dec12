"""In-backend execution: exec channels whose process is done or told to leave, closed off the
run's result path (backend/child.py, backend/zygote.py).

Policy:
- A run's result does not wait for its channel to close. After its exit frame the supervisor
  leaves by itself (and a supervisor or zygote told to leave does so at once), so each retired
  channel is given `LEAVE_WAIT_SECONDS` to end on its own before it is closed: a remote backend
  then finds the process gone instead of running a kill command for its tree (over SSH a second
  exec channel: two round trips and a shell). A process that does not leave in time is closed
  anyway, which stops its tree as before; so is, at once, one that cannot hear a goodbye yet
  (still starting: waiting for it would cost its whole start-up).
- One worker thread per Runtime does this, started on first use; more start (up to
  `MAX_WORKERS`) when channels are retired together, so that a Runtime's close (the waiting
  child, the zygote) waits for them side by side, not one after another.
- `close` waits for every retired channel, within a bound: when the Runtime's close returns,
  its processes in the backend are gone or their channels are closed. So for a channel still
  being opened by a child closed meanwhile (its opener retires it once open): `close` waits for
  the opener too, side by side with the rest of the Runtime's close (over Docker an exec is
  ~0.1 s), not before it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from ....backends.base import Channel

LEAVE_WAIT_SECONDS = 1.0  # how long a retired channel may take to end on its own
OPEN_JOIN_SECONDS = 30.0  # closing a child whose channel is still opening waits this long for it
MAX_WORKERS = 4
Heard = Callable[[bytes], None]  # given what a leaving process says on its channel
log = logging.getLogger(__name__)


class ChannelCloser:
    """Closes retired channels in the background; `close` waits for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[Channel, bytes | None, Heard | None, float]] = collections.deque()
        self._workers: list[threading.Thread] = []
        self._openers: list[threading.Thread] = []  # opening channels they will retire here
        self._idle = 0
        self._closing = False

    def retire(self, channel: Channel, goodbye: bytes | None = b"", heard: Heard | None = None,
               wait: float = LEAVE_WAIT_SECONDS) -> None:
        """Send `goodbye` (if any), let the process end within `wait` seconds, close the
        channel; all on a worker thread. `goodbye` None: close without waiting (the process
        is still starting). `heard` is given what the process says meanwhile. After `close`,
        done here and now."""
        with self._cond:
            if not self._closing:
                self._queue.append((channel, goodbye, heard, wait))
                if self._idle >= len(self._queue) or len(self._workers) >= MAX_WORKERS:
                    self._cond.notify()
                    return
                worker = threading.Thread(target=self._work, name="herald-remote-close", daemon=True)
                self._workers.append(worker)
                worker.start()
                return
        close_channel(channel, goodbye, heard, wait)

    def await_opener(self, opener: threading.Thread) -> None:
        """`close` waits for `opener` too (a thread opening a channel it will retire here).
        After `close`, waited for here and now."""
        with self._cond:
            if not self._closing:  # (those done already let go: a Runtime may live long)
                self._openers = [*(thread for thread in self._openers if thread.is_alive()), opener]
                return
        opener.join(OPEN_JOIN_SECONDS)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._queue:
                    return
                channel, goodbye, heard, wait = self._queue.popleft()
            close_channel(channel, goodbye, heard, wait)

    def close(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) for the retired channels to be closed."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            openers = list(self._openers)
        deadline = time.monotonic() + timeout
        for opener in openers:  # what they open goes to a worker, or (closing) is closed by them
            opener.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            workers = list(self._workers)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                log.warning("closing the backend's exec channels took over %.0f s; leaving them to finish", timeout)
                return


def close_channel(channel: Channel, goodbye: bytes | None = b"", heard: Heard | None = None,
                  wait: float = LEAVE_WAIT_SECONDS) -> None:
    """Send `goodbye`, read until the process's output ends (at most `wait` seconds; what it
    says goes to `heard`), close; with `goodbye` None, close at once."""
    try:
        if goodbye:
            channel.send(goodbye)
        deadline = time.monotonic() + (wait if goodbye is not None else 0.0)
        while (left := deadline - time.monotonic()) > 0 and (said := channel.recv(left)) != b"":
            if said and heard is not None:
                heard(said)
    except Exception as exc:  # the backend may be gone already: close says so, or has nothing to do
        log.debug("an exec channel failed while its process was leaving: %s", exc)
    try:
        channel.close()
    except Exception as exc:
        log.debug("closing an exec channel failed: %s", exc)
