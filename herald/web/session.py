"""A session's fetching: one `Fetcher` per session (tools/web.py keeps it in ToolContext.cache
and closes it with the session), shared by every web call of the session.

- One checked httpx client per URL policy (fetch.py `checked_client`): connections, and cookies,
  are kept across the session's calls instead of one client per call.
- The session's page cache (cache.py): a page is fetched once per session unless asked `fresh`.
- At most `web.max_per_host` requests in flight to one host, across all calls of the session
  (`parallel()` of several web_extract calls, a crawl's level), so a script cannot hammer a site.
- The User-Agent is `web.user_agent` (Herald's own when empty).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..webguard import checked_dial
from .cache import PageCache
from .errors import PageError
from .fetch import ACCEPT, USER_AGENT, checked_client, fetch_direct
from .hostslots import HostSlots
from .page import Fetched

if TYPE_CHECKING:
    import httpx

    from ..config import WebSettings
    from ..webguard import OpenTcp, WebPolicy

class Fetcher:
    """A session's way to fetch pages: one checked httpx client per URL policy (connections and
    cookies kept across the session's calls), the session's page cache and its per-host limit."""

    def __init__(self, settings: WebSettings, open_tcp: OpenTcp | None = None) -> None:
        self.settings = settings
        self._open_tcp = open_tcp  # connect from the backend (its network), else from here
        self.cache = PageCache(settings.cache_max_bytes, settings.cache_ttl)
        self.hosts = HostSlots(settings.max_per_host)
        self._clients: list[tuple[WebPolicy | None, httpx.Client]] = []
        self._lock = threading.Lock()
        self._closed = False

    def client(self, policy: WebPolicy | None) -> httpx.Client:
        """The session's client for `policy` (the policy's address checks are built into it)."""
        import httpx

        with self._lock:
            if self._closed:
                raise PageError("the session has ended; its web client is closed")
            for known, client in self._clients:
                if known == policy:
                    return client
            headers = {"User-Agent": self.settings.user_agent or USER_AGENT, "Accept": ACCEPT}
            # Requests in flight are bounded per host (HostSlots) and by the callers' threads.
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=32)
            dial = None if self._open_tcp is None else checked_dial(policy, self._open_tcp)
            client = checked_client(
                policy, timeout=self.settings.fetch_timeout, headers=headers, limits=limits, dial=dial
            )
            self._clients.append((policy, client))
            return client

    def fetch(self, url: str, policy: WebPolicy | None, limit: float | None = None,
              run_limited: bool = False, fresh: bool = False) -> Fetched:
        """`fetch_direct` through the session's client, cache and host slots."""
        return fetch_direct(self.client(policy), url, policy, limit, run_limited,
                            cache=self.cache, hosts=self.hosts, fresh=fresh)

    def close(self) -> None:
        with self._lock:
            self._closed, clients, self._clients = True, self._clients, []
        for _, client in clients:
            client.close()
