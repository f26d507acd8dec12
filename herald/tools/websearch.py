"""`web_search` through the provider in force (herald/web/search/: SearXNG, Firecrawl, Brave,
Tavily, Exa; `web.search_provider`, "auto" by default).

A search waits no longer than web.fetch_timeout, cut to what the run has left, and returns when
the call is cancelled. The provider's request runs on a thread of its own for that: a provider's
client may retry (firecrawl-py does) or its server may send its answer slowly, and neither may
hold the call past its end. A thread left behind ends by its own request limits.

The provider's address is the user's setting, not the script's argument, so it is not checked
against the session's web policy (as the model provider's is not); the script chooses only the
query. Result URLs are not fetched here.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from ..backends.shell import current_cancel
from ..config import Settings
from ..deadlines import check_deadline, time_left
from ..web.firecrawl import firecrawl_config_from
from ..web.search import (
    Endpoint,
    Hit,
    Kind,
    NoSearchProvider,
    SearchFailure,
    SearchProvider,
    chosen,
)
from .context import ToolContext
from .registry import Tool, ToolError
from .web import firecrawl_client, no_firecrawl_client
from .webpackages import needs_package, not_installed

if TYPE_CHECKING:
    import httpx

HTTPX = {"httpx": "httpx"}


class WebSearchHit(TypedDict):
    url: str
    title: str
    description: str


class WebSearchResult(TypedDict):
    query: str
    provider: str
    results: list[WebSearchHit]
    note: NotRequired[str]

POLL_SECONDS = 0.1  # how soon a cancelled call notices


def _http(ctx: ToolContext) -> httpx.Client:
    """The session's client for the HTTP providers (kept for its connections; closed with the session)."""
    with ctx.cache_lock:
        client: httpx.Client | None = ctx.cache.get("web.search.http")
        if client is None:
            from ..web.search.http import new_client

            client = ctx.cache["web.search.http"] = new_client()
            ctx.closers.append(client.close)
        return client


def _provider(ctx: ToolContext, endpoint: Endpoint) -> SearchProvider:
    from ..web.search import brave, exa, firecrawl, searxng, tavily

    if endpoint.provider == "firecrawl":
        config = firecrawl_config_from(ctx.settings)
        assert config is not None  # the endpoint came from it
        return firecrawl.FirecrawlSearch(endpoint, firecrawl_client(ctx, config, "web_search"))
    try:
        http = _http(ctx)
    except ImportError as exc:
        raise needs_package("web_search", exc, HTTPX, "web") from None
    kinds: dict[str, Callable[[Endpoint, httpx.Client], SearchProvider]] = {
        "searxng": searxng.SearxngSearch,
        "brave": brave.BraveSearch,
        "tavily": tavily.TavilySearch,
        "exa": exa.ExaSearch,
    }
    return kinds[endpoint.provider](endpoint, http)


def _within(seconds: float, work: Callable[[], list[Hit]], endpoint: Endpoint) -> list[Hit]:
    """`work()`'s hits, waiting at most `seconds` (SearchFailure TIMEOUT) and giving up when the
    call is cancelled."""
    box: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["hits"] = context.run(work)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="herald-web-search", daemon=True).start()
    cancel = current_cancel()
    end = time.monotonic() + seconds
    while not done.is_set():
        if cancel is not None and cancel.is_set():
            raise ToolError("web_search: stopped: the call was interrupted before the search answered.", "Interrupted")
        left = end - time.monotonic()
        if left <= 0:
            raise SearchFailure(endpoint, Kind.TIMEOUT, f"no answer within {seconds:.3g} s")
        done.wait(min(left, POLL_SECONDS) if cancel is not None else left)
    if "error" in box:
        raise box["error"]
    hits: list[Hit] = box["hits"]
    return hits


def web_search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    query: str = args["query"].strip()
    if not query:
        raise ToolError(
            "web_search: the query is empty. Pass what to search for, e.g. web_search('python 3.13 release date')."
        )
    limit: int = args["limit"]
    try:
        endpoint = chosen(ctx.settings)
    except NoSearchProvider as exc:
        raise ToolError(f"web_search: {exc}", "NoSearchProvider") from None
    provider = _provider(ctx, endpoint)
    check_deadline("web_search")
    fetch_timeout = ctx.settings.web.fetch_timeout
    seconds = time_left(fetch_timeout)
    assert seconds is not None
    try:
        hits = _within(seconds, lambda: provider.search(query, limit, seconds), endpoint)
    except SearchFailure as exc:
        if exc.kind is not Kind.TIMEOUT:
            raise ToolError(f"web_search: {exc}", exc.error_type) from None
        if seconds < fetch_timeout:
            raise ToolError(
                f"web_search stopped: the run's time limit was reached before {endpoint.title} answered. "
                "Print what you have; search earlier in the run, or fewer searches per run.",
                "Timeout",
            ) from None
        raise ToolError(f"web_search: {endpoint.title} at {endpoint.url} did not answer within {fetch_timeout:g} s "
                        "(web.fetch_timeout). Try again, or with a shorter query.", "Timeout") from None
    result: dict[str, Any] = {"query": query, "provider": endpoint.provider, "results": hits[:limit]}
    cap = provider.max_results
    if cap is not None and limit > cap:
        result["note"] = (
            f"{endpoint.title} returns at most {cap} results per search; ask again with other words for more."
        )
    return result


def search_unavailable(settings: Settings) -> str | None:
    """Why web_search cannot work with these settings, or None. Nothing is imported or contacted."""
    try:
        endpoint = chosen(settings)
    except NoSearchProvider as exc:
        return str(exc)
    if endpoint.provider == "firecrawl":
        return no_firecrawl_client()
    if not_installed(HTTPX):
        return f"the httpx package is not installed, which {endpoint.title} needs (pip install 'herald[web]')"
    return None


TOOLS = [
    Tool(
        name="web_search",
        description=(
            "Search the web. Returns the top results' URLs, titles and descriptions, and which "
            "provider answered; read pages with web_extract."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 5,
                    "description": "How many results.",
                },
            },
            "required": ["query"],
        },
        handler=web_search,
        returns=WebSearchResult,
        unavailable=search_unavailable,
    ),
]
