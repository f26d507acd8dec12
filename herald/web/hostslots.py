"""`HostSlots`: a session's cap on requests in flight to one host (`web.max_per_host`), so that a
script's parallel calls cannot hammer a site."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

Origin = tuple[str, str, int | None]  # scheme, host, port


class HostSlots:
    """At most `per_host` requests in flight to one origin (scheme, host, port) at a time,
    across every call that shares this object (a session's)."""

    def __init__(self, per_host: int) -> None:
        self.per_host = max(1, per_host)
        self._slots: dict[Origin, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    @staticmethod
    def origin(url: str) -> Origin:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)

    @contextmanager
    def slot(self, url: str, timeout: float | None) -> Iterator[None]:
        """A slot on `url`'s host for one request; TimeoutError when none is free within `timeout`."""
        key = self.origin(url)
        with self._lock:
            semaphore = self._slots.get(key)
            if semaphore is None:
                semaphore = self._slots[key] = threading.BoundedSemaphore(self.per_host)
        if not semaphore.acquire(timeout=timeout):
            raise TimeoutError(f"no free connection to {key[1]} within {timeout:g} s")
        try:
            yield
        finally:
            semaphore.release()
