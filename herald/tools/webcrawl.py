"""`web_crawl`: a site read breadth-first from one page, through the links web_extract finds.

Without Firecrawl the pages are fetched and extracted here, level by level, by web_extract's own
code (tools/web.py): the same session cache, per-host limit, URL policy on every hop, char caps
and run deadline, each level's pages in parallel. Which links are followed:

- every link of a page, its content links first and then its navigation (menus, sidebars: a
  docs site's table of contents), so the pages an article points to come first when max_pages
  cuts the crawl short;
- fragments dropped, each URL once (a redirect's final URL counts as visited too);
- with `same_site`, only the start page's scheme, host and port (and its final URL's, when the
  start redirected, say http -> https);
- `include`: globs (as search_files reads them: `*` within a path segment, `**` across; one
  without `/` matches the last segment) or `re:` regexes (searched) on the URL's path; the
  start page is always read;
- links the session's URL policy refuses are not followed, nor pages the site's robots.txt
  (RFC 9309, our product token or `*`) disallows; the start page, asked for by name, is read
  as web_extract would.

With Firecrawl configured, Firecrawl's crawl does the work (it honours robots.txt too); its
pages come back in breadth-first order of the links between them, and a page the URL policy
refuses (Firecrawl's fetches are not checked here) is reported as refused, without its content.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal, TypedDict
from urllib.parse import urldefrag, urlsplit

from ..backends.shell import current_cancel
from ..deadlines import check_deadline, time_left
from ..web.errors import PageError, RunTimeUp, StatusError
from ..web.fetch import USER_AGENT
from ..web.firecrawl import FirecrawlConfig, document_page, firecrawl_config_from, firecrawl_failure
from ..web.hostslots import HostSlots
from ..web.robots import ALLOW_ALL, DISALLOW_ALL, Robots, product_token
from .context import ToolContext
from .crawlpaths import PathPatterns
from .registry import Tool, ToolError
from .web import (
    FRESH_PARAMETER,
    MAX_URLS,
    WebPage,
    WebPageFailed,
    extract_unavailable,
    firecrawl_client,
    page_limit,
    page_result,
    recent_scrapes,
    rendered_size,
    run_limited_by_deadline,
    session_fetcher,
    warm_web_extract,
    web_extract,
)

if TYPE_CHECKING:
    from firecrawl import Firecrawl

MAX_PAGES = 200


class CrawledPage(WebPage):
    depth: int


class CrawledPageFailed(WebPageFailed):
    depth: int


class CrawlSkipped(TypedDict, total=False):
    off_site: int
    excluded: int
    refused: int
    robots: int
    over_max_pages: int


class WebCrawlResult(TypedDict):
    results: list[CrawledPage | CrawledPageFailed]
    source: Literal["firecrawl", "direct"]
    pages: int
    failed: int
    skipped: CrawlSkipped

STOPPED = ("web_crawl stopped: the run's time limit was reached while pages were still being fetched. Crawl "
           "fewer pages (max_pages) or narrow it (include=...).")
DEFAULT_PAGES = 25
Page = dict[str, Any]


def _normal(url: str) -> str:
    return urldefrag(url.strip())[0]


def _origin_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


class _RobotsRules:
    """Each site's robots.txt rules, read once per session (kept web.cache_ttl seconds, and at
    most a day as RFC 9309 2.4 asks; `fresh` reads them anew)."""

    def __init__(self, ctx: ToolContext, fresh: bool) -> None:
        self.ctx, self.fresh = ctx, fresh
        self.renewed: set[str] = set()  # with `fresh`, the sites read anew by this crawl
        self.agent = product_token(ctx.settings.web.user_agent or USER_AGENT)
        self.keep = min(ctx.settings.web.cache_ttl, 86400.0)
        with ctx.cache_lock:
            self.sites: dict[str, tuple[Robots, float]] = ctx.cache.setdefault("web.robots", {})

    def allows(self, url: str) -> bool:
        origin = _origin_url(url)
        with self.ctx.cache_lock:
            known = self.sites.get(origin)
        if known is None or (self.fresh and origin not in self.renewed) or time.monotonic() - known[1] > self.keep:
            known = (self._load(origin + "/robots.txt"), time.monotonic())
            self.renewed.add(origin)
            with self.ctx.cache_lock:
                self.sites[origin] = known
        return known[0].allows(url)

    def _load(self, url: str) -> Robots:
        timeout = self.ctx.settings.web.fetch_timeout
        try:
            fetched = session_fetcher(self.ctx).fetch(
                url, self.ctx.web_policy, page_limit(timeout), run_limited_by_deadline(timeout)
            )
        except StatusError as exc:  # RFC 9309 2.3.1: 4xx, no rules; 5xx, the site is off limits
            return ALLOW_ALL if exc.status < 500 else DISALLOW_ALL
        except RunTimeUp:
            raise
        except PageError:  # unreachable: assume nothing is allowed (RFC 9309 2.3.1.4)
            return DISALLOW_ALL
        return Robots.parse(fetched.body.decode("utf-8", "replace"), self.agent)


def _stop_if_asked(pages: int) -> None:
    cancel = current_cancel()
    if cancel is not None and cancel.is_set():
        raise ToolError(f"web_crawl was cancelled after {pages} pages.", "Cancelled")
    check_deadline("web_crawl's next level of pages")


def _extract(urls: list[str], char_limit: int, fresh: bool, ctx: ToolContext) -> list[Page]:
    pages: list[Page] = []
    for start in range(0, len(urls), MAX_URLS):
        batch = urls[start:start + MAX_URLS]
        try:
            pages += web_extract({"urls": batch, "char_limit": char_limit, "fresh": fresh}, ctx)["results"]
        except ToolError as exc:
            if exc.error_type != "Timeout":
                raise
            raise ToolError(STOPPED, "Timeout") from None
    return pages


def _crawl_here(start: str, max_pages: int, same_site: bool, include: PathPatterns | None, fresh: bool,
                char_limit: int, ctx: ToolContext) -> dict[str, Any]:
    policy, robots = ctx.web_policy, _RobotsRules(ctx, fresh)
    origins = {HostSlots.origin(start)}
    seen = {_normal(start)}
    results: list[Page] = []
    skipped: Counter[str] = Counter()
    level, depth = [start], 0
    while level:
        room = max_pages - len(results)
        if room <= 0:
            skipped["over_max_pages"] += len(level)
            break
        _stop_if_asked(len(results))
        skipped["over_max_pages"] += max(0, len(level) - room)
        content: list[str] = []
        navigation: list[str] = []
        for page in _extract(level[:room], char_limit, fresh, ctx):
            results.append({"url": page.pop("url"), "depth": depth, **page})
            final = page.get("final_url")
            if final:
                seen.add(_normal(final))
                if depth == 0:
                    origins.add(HostSlots.origin(final))
            for link in page.get("links") or []:
                (navigation if link.get("nav") else content).append(link["url"])
        level, depth = [], depth + 1
        for link in content + navigation:
            url = _normal(link)
            if url in seen:
                continue
            seen.add(url)
            if same_site and HostSlots.origin(url) not in origins:
                skipped["off_site"] += 1
            elif include is not None and not include.matches(urlsplit(url).path or "/"):
                skipped["excluded"] += 1
            elif policy is not None and policy.url_refusal(url) is not None:
                skipped["refused"] += 1
            elif not robots.allows(url):
                skipped["robots"] += 1
            else:
                level.append(url)
    return _reply(results, "direct", skipped)


def _reply(results: list[Page], source: str, skipped: Counter[str]) -> dict[str, Any]:
    return {"results": results, "source": source, "pages": len(results),
            "failed": sum("error" in page for page in results), "skipped": {k: v for k, v in skipped.items() if v}}


FINISHED = ("completed", "failed", "cancelled")


def _crawl_firecrawl(config: FirecrawlConfig, start: str, max_pages: int, same_site: bool,
                     include: PathPatterns | None, fresh: bool, char_limit: int,
                     ctx: ToolContext) -> dict[str, Any]:
    from firecrawl.v2.types import PaginationConfig, ScrapeOptions

    client = firecrawl_client(ctx, config, "web_crawl")
    options = ScrapeOptions(formats=["markdown", "links"], only_main_content=True, max_age=0 if fresh else None)
    try:
        job = client.start_crawl(start, limit=max_pages, include_paths=include.as_regexes() if include else None,
                                 crawl_entire_domain=True, allow_external_links=not same_site, scrape_options=options)
    except Exception as exc:
        raise ToolError(f"web_crawl: Firecrawl at {config.api_url} did not start the crawl: {firecrawl_failure(exc)}. "
                        "Try again, or check FIRECRAWL_API_KEY / FIRECRAWL_API_URL.", "CrawlFailed") from None
    documents = _wait_for(client, job.id, config, PaginationConfig(auto_paginate=False), ctx.settings.web.fetch_timeout)
    policy, recent = ctx.web_policy, recent_scrapes(ctx)
    skipped: Counter[str] = Counter()
    pages: dict[str, Page] = {}
    links: dict[str, list[str]] = {}
    for document in documents:
        metadata = document.metadata
        url = _normal(getattr(metadata, "source_url", None) or getattr(metadata, "url", None) or "")
        if not url or url in pages:
            continue
        if include is not None and url != _normal(start) and not include.matches(urlsplit(url).path or "/"):
            skipped["excluded"] += 1
            continue
        refusal = policy.url_refusal(url) if policy is not None else None
        if refusal is not None:
            refused = f"refused: {refusal}. Firecrawl reached it; its content is not returned."
            pages[url] = {"url": url, "error": refused}
            continue
        try:
            page = document_page(document, url)
        except PageError as exc:
            pages[url] = {"url": url, "error": str(exc)}
            continue
        recent.put((config, url), page, rendered_size(page))  # a later web_extract of it costs no credit
        pages[url] = page_result(url, page, char_limit, ctx)
        links[url] = [_normal(link) for link in document.links or []]
    results = [{"url": url, "depth": depth, **{k: v for k, v in pages[url].items() if k != "url"}}
               for url, depth in _breadth_first(_normal(start), list(pages), links)]
    return _reply(results[:max_pages], "firecrawl", skipped)


def _wait_for(
    client: Firecrawl, job_id: str, config: FirecrawlConfig, polling: Any, request_timeout: float
) -> list[Any]:
    """The crawl's documents once Firecrawl has finished it; cancelled there when the run's time
    is up or the call is cancelled (a crawl left running would go on spending credits)."""
    interval = 0.25
    while True:
        left = time_left()
        cancel = current_cancel()
        if (left is not None and left <= 0) or (cancel is not None and cancel.is_set()):
            try:
                client.cancel_crawl(job_id)
            except Exception:
                pass  # it ends at Firecrawl by its own limit then
            raise ToolError(
                "web_crawl stopped: the run's time limit was reached (or the call was cancelled) before "
                "Firecrawl finished the crawl; it was cancelled there. Crawl fewer pages (max_pages).",
                "Timeout",
            )
        timeout = request_timeout if left is None else min(request_timeout, left)
        try:
            job = client.get_crawl_status(job_id, polling, request_timeout=timeout)
            if job.status in FINISHED:
                if job.status != "completed":
                    raise ToolError(
                        f"web_crawl: Firecrawl's crawl {job.status}"
                        + (f": {job.warning}" if job.warning else "")
                        + ". Try again, or crawl fewer pages.",
                        "CrawlFailed",
                    )
                return list(client.get_crawl_status(job_id, request_timeout=timeout).data)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(
                f"web_crawl: Firecrawl at {config.api_url} failed during the crawl: {firecrawl_failure(exc)}.",
                "CrawlFailed",
            ) from None
        wait = interval if left is None else min(interval, left)
        if cancel is not None:
            cancel.wait(wait)
        else:
            time.sleep(wait)
        interval = min(2.0, interval * 2)


def _breadth_first(start: str, urls: list[str], links: dict[str, list[str]]) -> list[tuple[str, int | None]]:
    """`urls` in breadth-first order from `start` through `links`, with their depths; pages no
    link leads to (Firecrawl finds some in sitemaps) last, depth None."""
    depths: dict[str, int] = {}
    known = set(urls)
    level = [start] if start in known else []
    depth = 0
    while level:
        following = []
        for url in level:
            if url not in depths:
                depths[url] = depth
                following += [link for link in links.get(url, []) if link in known and link not in depths]
        level, depth = following, depth + 1
    found: list[tuple[str, int | None]] = list(depths.items())  # filled level by level: breadth-first already
    return found + [(url, None) for url in urls if url not in depths]


def web_crawl(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    start = str(args["url"]).strip()
    if not start.startswith(("http://", "https://")):
        raise ToolError("web_crawl: not an http(s) URL: pass a full URL such as https://docs.example.org/.")
    max_pages = args["max_pages"]
    if max_pages > MAX_PAGES:
        raise ToolError(f"web_crawl: max_pages={max_pages} is over the limit of {MAX_PAGES} pages per call. Crawl a "
                        "part of the site at a time: narrow it with include=..., or start from a deeper page.")
    raw = args["include"]
    patterns = [raw] if isinstance(raw, str) else list(raw or [])
    include = PathPatterns(patterns) if patterns else None
    limit = args["char_limit"] if args["char_limit"] is not None else ctx.settings.web.extract_char_limit
    web = ctx.settings.web
    reason = extract_unavailable(ctx.settings)
    if reason is not None:
        raise ToolError(f"web_crawl cannot work here: {reason}.", "Unavailable")
    config = firecrawl_config_from(ctx.settings) if web.extract != "direct" else None
    check_deadline("web_crawl")
    if config is not None:
        return _crawl_firecrawl(config, start, max_pages, args["same_site"], include, args["fresh"], limit, ctx)
    try:
        return _crawl_here(start, max_pages, args["same_site"], include, args["fresh"], limit, ctx)
    except RunTimeUp:  # reading a site's robots.txt when the time ran out
        raise ToolError(STOPPED, "Timeout") from None


TOOLS = [
    Tool(
        name="web_crawl",
        description=(
            "Read a site breadth-first from one page: the start page, then the pages it links to, then "
            "theirs, up to max_pages (at most 200), each as web_extract gives it (main content as markdown, "
            "its links) with its depth. Follows content links before navigation links; stays on the start "
            "page's site unless same_site is false; honours robots.txt."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The page to start from (http or https)."},
                "max_pages": {"type": "integer", "minimum": 1, "default": DEFAULT_PAGES,
                              "description": f"Most pages read, the start page included (at most {MAX_PAGES})."},
                "same_site": {"type": "boolean", "default": True,
                              "description": "Only follow links to the start page's scheme, host and port."},
                "include": {
                    "type": ["array", "string", "null"],
                    "items": {"type": "string"},
                    "description": "Only follow links whose URL path matches one of these: globs such as "
                                   "'/docs/**' or '*.html' ('*' within a path segment, '**' across), or "
                                   "regexes after 're:', such as 're:^/blog/'. The start page is always read.",
                },
                "fresh": FRESH_PARAMETER,
                "char_limit": {
                    "type": ["integer", "null"],
                    "minimum": 200,
                    "description": "Most characters kept per page, as web_extract (default web.extract_char_limit).",
                },
            },
            "required": ["url"],
        },
        handler=web_crawl,
        returns=WebCrawlResult,
        unavailable=extract_unavailable,
        warm=warm_web_extract,
    ),
]
