"""A page fetched here with httpx: its bytes, final URL and declared type (render.py makes text of it).

Redirects are followed here, hop by hop, and each hop passes the session's URL policy
(`ToolContext.web_policy`) before it is requested: a 302 to a host outside
`policy.allowed_domains`, or to a metadata address, is refused with the hop named. Connections go
through `checked_client`'s transport, which resolves each name itself, refuses one that resolves
to a link-local / metadata address and connects to the address it checked (herald/webguard.py).
A whole fetch ends by its limit (web.fetch_timeout, cut to the time the run has left): every
read and write of its connection waits no longer than what is left of it.

A session fetches through its `Fetcher` (session.py): each hop is served from the session's page
cache (cache.py) after the policy's check, and each request waits for a free slot on its host.
Time spent waiting for other calls (a host's free slot, the same URL being fetched) is not the
page's: it moves the fetch's end later, never past the run's deadline.
"""

from __future__ import annotations

import contextvars
import functools
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..deadlines import current_deadline
from ..webguard import Dial, Refused, WebPolicy, checked_addresses
from .cache import PageCache
from .errors import PageError, RunTimeUp, StatusError
from .hostslots import HostSlots
from .page import Fetched

if TYPE_CHECKING:
    import httpcore
    import httpx


MAX_DOWNLOAD_BYTES = 10_000_000
MAX_REDIRECTS = 10
REDIRECT_CODES = (301, 302, 303, 307, 308)
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) HeraldAgent/0.1 (+web_extract)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"
# When the fetch running on this thread must be over (time.monotonic()); read by its connection.
_fetch_end: contextvars.ContextVar[float | None] = contextvars.ContextVar("herald_fetch_end", default=None)


def _left(timeout: float | None) -> float | None:
    """`timeout` cut to what the current fetch has left; TimeoutError once nothing is left."""
    end = _fetch_end.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("the fetch's time is up")
    return left if timeout is None else min(timeout, left)


def _uses_proxy() -> bool:
    proxies = urllib.request.getproxies()
    return any(key in proxies for key in ("http", "https", "all"))


def checked_client(policy: WebPolicy | None, dial: Dial | None = None, **options: Any) -> httpx.Client:
    """An httpx client that follows no redirects and connects only to checked addresses, within
    each fetch's limit. With a proxy in the environment (HTTP(S)_PROXY) the proxy resolves the
    names: hops are still checked by name (fetch_direct), addresses cannot be. `dial` (host,
    port, timeout -> a connected socket, checking addresses itself: webguard.checked_dial) makes
    the connections instead of this machine (the backend's network); no proxy is used then."""
    import httpx

    if _uses_proxy() and dial is None:
        return httpx.Client(follow_redirects=False, **options)
    transport = httpx.HTTPTransport(limits=options.pop("limits", httpx.Limits()), trust_env=False)
    pool = transport._pool
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpx's transport has no connection pool to pin addresses in (httpcore changed?)")
    pool._network_backend = _checked_backend(policy, dial)
    return httpx.Client(transport=transport, follow_redirects=False, trust_env=False, **options)


def _checked_backend(policy: WebPolicy | None, dial: Dial | None) -> Any:
    """httpcore's network backend connecting only to checked addresses (or through `dial`)."""
    import httpcore

    stream = _limited_stream_type()

    class CheckedBackend(httpcore.SyncBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                        local_address: str | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
            if dial is not None:
                return stream(_dialled(dial, host, port, timeout))
            connect = functools.partial(super().connect_tcp, local_address=local_address,
                                        socket_options=socket_options)
            return stream(_connect_checked(connect, host, port, policy, timeout))

    return CheckedBackend()


def _limited_stream_type() -> Callable[[httpcore.NetworkStream], httpcore.NetworkStream]:
    """httpcore's stream whose reads, writes and TLS start end within the fetch's limit."""
    import httpcore

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner: httpcore.NetworkStream) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            try:
                return self._inner.read(max_bytes, _left(timeout))
            except TimeoutError as exc:
                raise httpcore.ReadTimeout(str(exc)) from None

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            try:
                self._inner.write(buffer, _left(timeout))
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(str(exc)) from None

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> httpcore.NetworkStream:
            try:  # server_hostname is the URL's name: the certificate is checked for it
                return Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))
            except TimeoutError as exc:
                raise httpcore.ConnectTimeout(str(exc)) from None

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    return Stream


@contextmanager
def _as_connect_errors(host: str) -> Iterator[None]:
    """A refusal, the fetch's time running out or an OS error while connecting, as httpcore's errors."""
    import httpcore

    try:
        yield
    except Refused as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(str(exc)) from None
    except OSError as exc:
        raise httpcore.ConnectError(f"{host}: {exc}") from None


def _connect_checked(connect: Callable[..., httpcore.NetworkStream], host: str, port: int,
                     policy: WebPolicy | None, timeout: float | None) -> httpcore.NetworkStream:
    """A connection by `connect` (httpcore's) to one of the addresses of `host` the policy allows."""
    import httpcore

    with _as_connect_errors(host):
        addresses = checked_addresses(host, port, policy, _left(timeout))
    failure: Exception | None = None
    for _, sockaddr in addresses:  # the checked addresses, and no others
        try:
            return connect(str(sockaddr[0]), port, _left(timeout))
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from None
        except httpcore.ConnectError as exc:
            failure = exc
    raise failure or httpcore.ConnectError(f"{host} has no address")


def _dialled(dial: Dial, host: str, port: int, timeout: float | None) -> httpcore.NetworkStream:
    """httpcore's stream over the connection `dial` makes, its errors as httpcore's."""
    from httpcore._backends.sync import SyncStream

    with _as_connect_errors(host):
        return SyncStream(dial(host, port, _left(timeout)))


def _refused_by(exc: BaseException) -> Refused | None:
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, Refused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def fetch_direct(client: httpx.Client, url: str, policy: WebPolicy | None = None,
                 limit: float | None = None, run_limited: bool = False, *,
                 cache: PageCache | None = None, hosts: HostSlots | None = None, fresh: bool = False) -> Fetched:
    """One page fetched here, following at most MAX_REDIRECTS redirects,
    each checked by `policy`; the whole fetch ends within `limit` seconds (`run_limited`: that
    limit is the run's deadline, and the error says so). With a `cache`, each hop is served from
    it while fresh and revalidated when stale (`fresh`: neither, every hop is requested anew and
    the cache updated); with `hosts`, each request waits for a free slot on its host."""
    import httpx

    token = _fetch_end.set(None if limit is None else time.monotonic() + limit)
    try:
        return _fetch(client, url, policy, limit, _Hops(cache, hosts, fresh))
    except (httpx.TimeoutException, TimeoutError):
        if run_limited:
            raise RunTimeUp("the run's time limit was reached before the page arrived") from None
        raise PageError("timed out (web.fetch_timeout)") from None
    except httpx.HTTPError as exc:
        refused = _refused_by(exc)
        if refused is not None:
            raise PageError(f"refused: {refused}. Not fetched.") from None
        raise PageError(f"could not fetch it: {exc}") from None
    finally:
        _fetch_end.reset(token)


@dataclass(frozen=True)
class _Hops:
    """How each hop of one fetch is made: through the session's cache, host slots, anew."""

    cache: PageCache | None
    hosts: HostSlots | None
    fresh: bool


def _fetch(client: httpx.Client, url: str, policy: WebPolicy | None, limit: float | None, hops: _Hops) -> Fetched:
    chain = [url]
    while True:
        current = chain[-1]
        refusal = policy.url_refusal(current) if policy is not None else None
        if refusal is not None:  # checked before the cache: a page the policy refuses is not served either
            hop = f"the redirect from {chain[-2]} to {current}" if len(chain) > 1 else current
            raise PageError(f"refused {hop}: {refusal}. Not fetched.")
        if hops.cache is None:
            reply = _request(client, current, limit, hops.hosts, {})
            outcome: Fetched | str = reply.page if reply.page is not None else str(reply.location)
        else:
            outcome = _through_cache(client, current, policy, limit, hops)
        if isinstance(outcome, Fetched):
            return outcome
        if len(chain) > MAX_REDIRECTS:
            # A URL may come back once (a cookie set on the way); past the bound it is a loop.
            what = "a redirect loop" if outcome in chain else "too many redirects"
            raise PageError(f"{what}: more than {MAX_REDIRECTS} redirects ({' -> '.join(chain[:4])} -> ...). "
                            "Open the page in the browser, or pass the final URL.")
        chain.append(outcome)


def _through_cache(client: httpx.Client, url: str, policy: WebPolicy | None, limit: float | None,
                   hops: _Hops) -> Fetched | str:
    """One hop through the session's cache: the page, or the URL it redirects to, as stored while
    fresh; else requested (conditionally when what is stored can be revalidated) and stored."""
    cache = hops.cache
    assert cache is not None
    with _waiting_for_others(lambda wait: cache.claim(url, wait)):
        stored = None if hops.fresh else cache.get(url, policy)
        if stored is not None and stored.fresh():
            stored = cache.hit(stored)
        else:
            validators = stored.validators() if stored is not None else {}
            # fresh: no proxy's copy either
            reply = _request(
                client, url, limit, hops.hosts, {"Cache-Control": "no-cache"} if hops.fresh else validators
            )
            if reply.status == 304 and stored is not None and validators:
                stored = cache.refreshed(stored, reply.headers)
            else:
                cache.put(url, policy, reply.status, reply.headers, page=reply.page, location=reply.location)
                return reply.page if reply.page is not None else str(reply.location)
        return stored.page if stored.page is not None else str(stored.location)


@dataclass(frozen=True)
class _Reply:
    """One response: its page, or the absolute URL it redirects to, or (a 304) neither."""

    status: int
    headers: dict[str, str]  # names lower-cased
    page: Fetched | None = None
    location: str | None = None


def _request(client: httpx.Client, url: str, limit: float | None, hosts: HostSlots | None,
             headers: dict[str, str]) -> _Reply:
    """One GET of `url` within the fetch's time, once its host has a free slot."""
    import httpx

    with _waiting_for_others(lambda wait: hosts.slot(url, wait) if hosts is not None else nullcontext()):
        timeout = httpx.Timeout(_left(limit))
        with client.stream("GET", url, headers=headers, timeout=timeout) as response:
            kept = {name.lower(): value for name, value in response.headers.items()}
            if response.status_code == 304 and ("If-None-Match" in headers or "If-Modified-Since" in headers):
                return _Reply(304, kept)
            location = response.headers.get("location")
            if response.status_code in REDIRECT_CODES and location:
                return _Reply(response.status_code, kept, location=str(response.url.join(location.strip())))
            return _Reply(response.status_code, kept, page=_read_page(response))


@contextmanager
def _waiting_for_others(acquire: Callable[[float | None], AbstractContextManager[None]]) -> Iterator[None]:
    """Hold what `acquire(wait)` gives, waiting at most until the run's deadline (RunTimeUp past
    it); the time waited moves the fetch's own end later by as much, never past the run's
    deadline: waiting for other calls is not the page's slowness."""
    deadline = current_deadline()
    started = time.monotonic()
    with ExitStack() as stack:
        try:
            stack.enter_context(acquire(None if deadline is None else max(0.0, deadline - started)))
        except TimeoutError:
            raise RunTimeUp("the run's time limit was reached while other calls were fetching from this site") from None
        end = _fetch_end.get()
        waited = time.monotonic() - started
        if end is not None and waited > 0:
            _fetch_end.set(end + waited if deadline is None else min(end + waited, deadline))
        yield


def _read_page(response: httpx.Response) -> Fetched:
    if response.status_code >= 400:
        raise StatusError(f"HTTP {response.status_code} {response.reason_phrase}".strip(), response.status_code)
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_DOWNLOAD_BYTES:
            raise PageError(
                f"the page is larger than {MAX_DOWNLOAD_BYTES:,} bytes; download it with terminal('curl ...') instead"
            )
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    # only what the Content-Type header says
    return Fetched(str(response.url), kind, response.charset_encoding, bytes(body))
