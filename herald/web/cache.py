"""A session's cache of fetched pages, so a page is fetched once per session: a private HTTP
cache as RFC 9111 describes one, for GET responses only.

- Stored: a 200 page, and a redirect when its response says it may be (301 and 308 always,
  302/303/307 with an explicit max-age or Expires). Never a response with `no-store` or
  `Vary: *`, nor one that could neither be served fresh nor revalidated.
- Fresh for `max-age` (less the `Age` it arrived with), else `Expires` - `Date`, else (no caching
  headers at all) for the session's heuristic lifetime (`web.cache_ttl`). `no-cache` and
  `max-age=0` store it stale: every use revalidates it.
- Stale: revalidated with `If-None-Match` (its ETag) / `If-Modified-Since` (its Last-Modified);
  a 304 refreshes it (headers merged, clock restarted) and the stored page is served.
- Bounded by bytes (`web.cache_max_bytes`), least recently used first out; one page may take at
  most a quarter of it.
- Scoped by the URL policy it was fetched under: an entry is served only to a fetch under an equal
  policy. The policy's URL check runs on every hop before the cache is consulted (fetch.py); the
  scope keeps a page whose address was never checked (fetched under the full profile, which
  checks none) from being served where addresses are checked.

One fetch of a URL at a time (`claim`): a second caller waits for the first and is then served
from the cache, so parallel calls do not fetch the same page twice.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime

from .page import Fetched

# The response headers caching decides by; nothing else of a response is kept.
CACHING_HEADERS = ("cache-control", "expires", "date", "age", "etag", "last-modified", "vary")
# Redirects cacheable without explicit freshness (RFC 9110 15.4: "heuristically cacheable").
HEURISTIC_REDIRECTS = (301, 308)
ENTRY_OVERHEAD = 512  # bytes an entry costs besides its body and URLs (headers, bookkeeping)


def directives(cache_control: str) -> dict[str, str]:
    """Cache-Control's directives, names lower-cased, values unquoted ("" when none)."""
    found: dict[str, str] = {}
    for part in cache_control.split(","):
        name, _, value = part.partition("=")
        name = name.strip().lower()
        if name:
            found.setdefault(name, value.strip().strip('"'))
    return found


def _seconds(value: str) -> float:
    """A delta-seconds value; an invalid one counts as 0 (stale), as RFC 9111 says."""
    try:
        return max(0.0, float(int(value.strip())))
    except ValueError:
        return 0.0


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def freshness(status: int, headers: Mapping[str, str], heuristic: float) -> float | None:
    """Seconds a response with these caching headers stays fresh once it arrived (0: stale at
    once, revalidate each use), or None when it must not be stored."""
    cc = directives(headers.get("cache-control", ""))
    if "no-store" in cc or headers.get("vary", "").strip() == "*":
        return None
    if "no-cache" in cc:  # a qualified no-cache="Set-Cookie" too: revalidating is the safe reading
        lifetime = 0.0
    elif "max-age" in cc:
        lifetime = _seconds(cc["max-age"])
    elif "expires" in headers:
        expires = _http_date(headers.get("expires"))
        date = _http_date(headers.get("date")) or time.time()
        lifetime = max(0.0, expires - date) if expires is not None else 0.0
    elif status == 200 or status in HEURISTIC_REDIRECTS:
        lifetime = heuristic
    else:
        return None
    if lifetime <= 0 and not (headers.get("etag") or headers.get("last-modified")):
        return None  # could never be used: stale at once, and nothing to revalidate it with
    return lifetime


@dataclass(frozen=True)
class Stored:
    """One cached response: a page (status 200) or a redirect to `location`."""

    url: str
    scope: object  # the URL policy it was fetched under
    status: int
    headers: Mapping[str, str]  # its caching headers, names lower-cased
    page: Fetched | None
    location: str | None
    lifetime: float
    stored_at: float  # time.monotonic() when it arrived or was last revalidated

    @property
    def size(self) -> int:
        body = len(self.page.body) + len(self.page.url) if self.page is not None else 0
        return body + len(self.url) + len(self.location or "") + ENTRY_OVERHEAD

    def fresh(self, now: float | None = None) -> bool:
        age = _seconds(self.headers.get("age", "0")) + ((now or time.monotonic()) - self.stored_at)
        return self.lifetime > age

    def validators(self) -> dict[str, str]:
        """The conditional request headers that revalidate it."""
        found = {}
        if self.headers.get("etag"):
            found["If-None-Match"] = self.headers["etag"]
        if self.headers.get("last-modified"):
            found["If-Modified-Since"] = self.headers["last-modified"]
        return found


class _Claim:
    """One URL being fetched: its lock and how many callers hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


@dataclass
class CacheStats:
    hits: int = 0  # served without a request
    revalidated: int = 0  # served after a 304
    stored: int = 0
    evicted: int = 0


class PageCache:
    """The session's cached responses, by URL; thread-safe."""

    def __init__(self, max_bytes: int, heuristic_lifetime: float) -> None:
        self.max_bytes = max(0, max_bytes)
        self.heuristic_lifetime = max(0.0, heuristic_lifetime)
        self.stats = CacheStats()
        self._entries: OrderedDict[str, Stored] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._claims: dict[str, _Claim] = {}

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, url: str, scope: object) -> Stored | None:
        """The entry for `url` fetched under `scope` (fresh or stale), most recently used now."""
        with self._lock:
            entry = self._entries.get(url)
            if entry is None or entry.scope != scope:
                return None
            self._entries.move_to_end(url)
            return entry

    def hit(self, entry: Stored) -> Stored:
        with self._lock:
            self.stats.hits += 1
        return entry

    def put(self, url: str, scope: object, status: int, headers: Mapping[str, str],
            page: Fetched | None = None, location: str | None = None) -> Stored | None:
        """Store a response when its headers allow it (the entry, else None); a response that may
        not be stored drops what was stored for `url`."""
        kept = {name: headers[name] for name in CACHING_HEADERS if headers.get(name)}
        lifetime = freshness(status, kept, self.heuristic_lifetime)
        entry = (
            None if lifetime is None else Stored(url, scope, status, kept, page, location, lifetime, time.monotonic())
        )
        with self._lock:
            self._drop(url)
            if entry is None or entry.size > self.max_bytes // 4:
                return None
            self._entries[url] = entry
            self._bytes += entry.size
            self.stats.stored += 1
            while self._bytes > self.max_bytes:
                _, oldest = self._entries.popitem(last=False)
                self._bytes -= oldest.size
                self.stats.evicted += 1
        return entry

    def refreshed(self, entry: Stored, headers: Mapping[str, str]) -> Stored:
        """`entry` after a 304: the 304's caching headers over the stored ones, its clock
        restarted (RFC 9111 4.3.4); still served when its new headers say not to store it."""
        merged = {**entry.headers, **{name: headers[name] for name in CACHING_HEADERS if headers.get(name)}}
        lifetime = freshness(entry.status, merged, self.heuristic_lifetime)
        updated = replace(entry, headers=merged, lifetime=lifetime or 0.0, stored_at=time.monotonic())
        with self._lock:
            self.stats.revalidated += 1
            if self._entries.get(entry.url) is entry:
                if lifetime is None:
                    self._drop(entry.url)
                else:
                    self._entries[entry.url] = updated
                    self._entries.move_to_end(entry.url)
        return updated

    def _drop(self, url: str) -> None:
        old = self._entries.pop(url, None)
        if old is not None:
            self._bytes -= old.size

    @contextmanager
    def claim(self, url: str, timeout: float | None) -> Iterator[None]:
        """Hold `url` for one fetch: a second caller waits (up to `timeout`; TimeoutError past
        it) and then finds what the first one stored."""
        with self._lock:
            claim = self._claims.setdefault(url, _Claim())
            claim.users += 1
        try:
            if not claim.lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
                raise TimeoutError(f"another call was still fetching {url}")
            try:
                yield
            finally:
                claim.lock.release()
        finally:
            with self._lock:
                claim.users -= 1
                if claim.users == 0:
                    del self._claims[url]


class RecentResults:
    """Results that come without HTTP caching headers (Firecrawl's scrapes: each one costs a
    credit), kept `lifetime` seconds for the session, bounded by bytes, least recently used out."""

    def __init__(self, max_bytes: int, lifetime: float) -> None:
        self.max_bytes = max(0, max_bytes)
        self.lifetime = max(0.0, lifetime)
        self._entries: OrderedDict[object, tuple[object, int, float]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: object) -> object | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if time.monotonic() - entry[2] >= self.lifetime:
                self._bytes -= self._entries.pop(key)[1]
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: object, value: object, size: int) -> None:
        size += ENTRY_OVERHEAD
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if self.lifetime <= 0 or size > self.max_bytes // 4:
                return
            self._entries[key] = (value, size, time.monotonic())
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._bytes -= self._entries.popitem(last=False)[1][1]

