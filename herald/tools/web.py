"""`web_extract`: pages through Firecrawl when one is configured, else fetched here
(herald/web/fetch.py, in this process's threads) and made text with their links
(herald/web/render.py) in the session's extraction workers (herald/web/renderpool.py), results in
the order of the URLs given.

Several URLs are fetched at once (up to `web.max_concurrency`); each page is capped at
`char_limit` (head + tail, full text spilled to a file), and a page that fails is reported in its
own result, so one bad URL does not cost the others. A missing library is not a page's failure:
it fails the whole call with the pip package to install, and a session whose settings leave a
tool no way to work is told so up front (`Tool.unavailable`) rather than offered a sure failure.
Telling which library is missing is webpackages.py.
"""

from __future__ import annotations

import contextvars
import os
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict

from .. import spawner
from ..capture import CappedCapture
from ..config import Settings
from ..deadlines import check_deadline, time_left
from ..web.cache import RecentResults
from ..web.errors import PageError, RunTimeUp
from ..web.firecrawl import FirecrawlConfig, firecrawl_config_from, scrape
from ..web.render import Rendered
from ..web.renderpool import MIB, RenderPool, default_size
from ..web.session import Fetcher
from .context import ToolContext
from .network import backend_open_tcp
from .registry import Tool, ToolError
from .webpackages import DIRECT_PACKAGES, FIRECRAWL_PACKAGE, installed, needs_package, not_installed

if TYPE_CHECKING:
    from firecrawl import Firecrawl

class PageLink(TypedDict):
    url: str
    text: str
    nav: Annotated[bool, "the page's navigation, not its content"]


class WebPage(TypedDict):
    url: str
    final_url: NotRequired[Annotated[str, "after redirects"]]
    title: str
    content: Annotated[str, "markdown"]
    chars: int
    truncated: NotRequired[bool]
    spill_path: NotRequired[Annotated[str, "the whole text"]]
    links: list[PageLink]


class WebPageFailed(TypedDict):
    url: str
    error: str


class WebExtractResult(TypedDict):
    results: list[WebPage | WebPageFailed]
    source: Literal["firecrawl", "direct"]
    failed: int


MAX_URLS = 50
FRESH_PARAMETER = {
    "type": "boolean",
    "default": False,
    "description": "Fetch anew: by default a page read earlier in this session is not fetched again "
                   "while its HTTP caching headers say it is fresh.",
}
Page = dict[str, Any]
KEYLESS_HINT = ", or set FIRECRAWL_API_KEY / FIRECRAWL_API_URL to extract through Firecrawl"


def firecrawl_client(ctx: ToolContext, config: FirecrawlConfig, tool: str) -> Firecrawl:
    with ctx.cache_lock:
        cached = ctx.cache.get("web.firecrawl")
        if cached is None or cached[0] != config:
            try:
                from firecrawl import Firecrawl
            except ImportError as exc:  # absent, or a firecrawl-py without the Firecrawl class (< 3)
                raise needs_package(tool, exc, {"firecrawl": FIRECRAWL_PACKAGE}, "web") from None
            client = Firecrawl(
                api_key=config.api_key, api_url=config.api_url, timeout=ctx.settings.web.fetch_timeout + 5
            )
            cached = (config, client)
            ctx.cache["web.firecrawl"] = cached
        client_: Firecrawl = cached[1]
        return client_


def session_fetcher(ctx: ToolContext) -> Fetcher:
    """The session's fetcher (one client, the page cache, the per-host limit), closed with it."""
    with ctx.cache_lock:
        fetcher: Fetcher | None = ctx.cache.get("web.fetcher")
        if fetcher is None:
            if ctx.closed:  # a client made now would never be closed
                raise ToolError("web_extract: the session has ended.", "SessionClosed")
            fetcher = ctx.cache["web.fetcher"] = Fetcher(ctx.settings.web, backend_open_tcp(ctx))
            ctx.closers.append(fetcher.close)
        return fetcher


def recent_scrapes(ctx: ToolContext) -> RecentResults:
    """The session's Firecrawl pages (web.cache_ttl, bounded by web.cache_max_bytes): a scrape costs a credit."""
    with ctx.cache_lock:
        recent = ctx.cache.get("web.scrapes")
        if not isinstance(recent, RecentResults):
            recent = ctx.cache["web.scrapes"] = RecentResults(
                ctx.settings.web.cache_max_bytes, ctx.settings.web.cache_ttl
            )
        return recent


def rendered_size(page: Rendered) -> int:
    return (
        len(page.text.encode())
        + len(page.title)
        + sum(len(link["url"]) + len(link["text"]) for link in page.links or [])
    )


def scraped(ctx: ToolContext, config: FirecrawlConfig, client: Firecrawl, url: str, fresh: bool) -> Rendered:
    """A page through Firecrawl, once per session unless `fresh`."""
    recent = recent_scrapes(ctx)
    kept = None if fresh else recent.get((config, url))
    if isinstance(kept, Rendered):
        return kept
    page = scrape(client, url, page_limit(ctx.settings.web.fetch_timeout), fresh)
    recent.put((config, url), page, rendered_size(page))
    return page


def render_pool(ctx: ToolContext) -> RenderPool:
    """The session's extraction workers, made (and started) at its first keyless extract; killed
    when the session closes."""
    with ctx.cache_lock:
        pool = ctx.cache.get("web.render_pool")
        if isinstance(pool, RenderPool):
            return pool
        if ctx.closed:  # workers started now would outlive the session
            raise ToolError("web_extract: the session has ended.", "SessionClosed")
        web = ctx.settings.web
        memory = max(0, web.extract_worker_memory_mb) * MIB
        pool = RenderPool(web.extract_workers or default_size(), memory, memory // 2, popen=spawner.popen)
        ctx.cache["web.render_pool"] = pool
        ctx.closers.append(pool.close)
    pool.start()
    return pool


def page_limit(seconds: float) -> float:
    """`seconds`, cut to what the run has left (a page started just as the time ran out raises)."""
    left = time_left(seconds)
    assert left is not None
    if left <= 0:
        raise RunTimeUp("the run's time limit was reached before this page was fetched")
    return left


def run_limited_by_deadline(seconds: float) -> bool:
    left = time_left(seconds)
    return left is not None and left < seconds


def _capped(text: str, limit: int, ctx: ToolContext) -> Page:
    capture = CappedCapture(
        limit, spill_dir=ctx.spill_dir, spill_name=f"extract-{os.getpid()}-{secrets.token_hex(4)}.md"
    )
    try:
        capture.feed(text.encode("utf-8"))
    finally:
        capture.close()
    page: Page = {"content": capture.text("page"), "chars": len(text)}
    if capture.spill_path is not None:
        page["truncated"] = True
        page["spill_path"] = str(capture.spill_path)
    return page


def page_result(url: str, page: Rendered, limit: int, ctx: ToolContext) -> Page:
    """A page's result: `final_url` only when redirects moved it; `links` always (empty for
    text that is not HTML)."""
    result: Page = {"url": url}
    if page.url != url:
        result["final_url"] = page.url
    result["title"] = page.title
    result.update(_capped(page.text, limit, ctx))
    result["links"] = page.links or []
    return result


def _extract_with(fetch: Callable[[str], Rendered], urls: list[str], limit: int, ctx: ToolContext) -> list[Page]:
    def one(url: str) -> Page:
        if not url.startswith(("http://", "https://")):
            return {"url": url, "error": "not an http(s) URL: pass a full URL such as https://example.com/page"}
        try:
            if time_left() == 0:
                raise RunTimeUp("the run's time limit was reached before this page was fetched")
            page = fetch(url)
        except RunTimeUp as exc:
            return {"url": url, "error": str(exc), "run_time_up": True}
        except PageError as exc:
            return {"url": url, "error": str(exc)}
        except ImportError:  # a missing library fails every page alike: the caller says which
            raise
        except Exception as exc:  # one page's surprise must not cost the others their results
            return {"url": url, "error": f"{type(exc).__name__}: {exc}"}
        return page_result(url, page, limit, ctx)

    workers = max(1, min(len(urls), ctx.settings.web.max_concurrency))
    # Each page runs under this call's context: its deadline (and cancel) reach the pool's threads.
    contexts = [contextvars.copy_context() for _ in urls]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="herald-web") as pool:
        pages = list(pool.map(lambda context, url: context.run(one, url), contexts, urls))
    if any(page.pop("run_time_up", False) for page in pages):
        raise ToolError("web_extract stopped: the run's time limit was reached while pages were still being "
                        "fetched. Print what you have; fetch fewer pages per run.", "Timeout")
    return pages


def web_extract(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raw = args["urls"]
    urls = [raw] if isinstance(raw, str) else list(raw)
    urls = [u.strip() for u in urls if u.strip()]
    if not urls:
        raise ToolError("web_extract: no URLs given. Pass a URL or a list of URLs.")
    if len(urls) > MAX_URLS:
        raise ToolError(f"web_extract: {len(urls)} URLs in one call; the limit is {MAX_URLS}. Split them into batches.")
    limit = args["char_limit"] if args["char_limit"] is not None else ctx.settings.web.extract_char_limit
    web = ctx.settings.web
    if web.extract not in ("auto", "firecrawl", "direct"):
        raise ToolError(f"web_extract: the setting web.extract must be auto, firecrawl or direct, not {web.extract!r}.")
    config = firecrawl_config_from(ctx.settings) if web.extract != "direct" else None
    if web.extract == "firecrawl" and config is None:
        raise ToolError(
            "web_extract: web.extract is 'firecrawl' but no Firecrawl is configured: set "
            "FIRECRAWL_API_KEY or FIRECRAWL_API_URL / web.firecrawl_api_url, or set web.extract to auto."
        )
    unique = list(dict.fromkeys(urls))
    fresh = bool(args.get("fresh"))
    check_deadline("web_extract")
    try:
        if config is not None:
            # Firecrawl fetches remotely: its redirects and addresses are its own, not checked here.
            client = firecrawl_client(ctx, config, "web_extract")
            pages = _extract_with(lambda u: scraped(ctx, config, client, u, fresh), unique, limit, ctx)
            source = "firecrawl"
        else:
            # Looked for before any fetch, so a broken install is one clear error, not one per
            # page; trafilatura is imported by the workers only.
            import httpx  # noqa: F401

            missing = [module for module in DIRECT_PACKAGES if not installed(module)]
            if missing:
                raise ImportError(f"No module named {missing[0]!r}", name=missing[0])

            pool, fetcher, policy = render_pool(ctx), session_fetcher(ctx), ctx.web_policy

            def fetch_and_render(url: str) -> Rendered:
                fetched = fetcher.fetch(
                    url, policy, page_limit(web.fetch_timeout), run_limited_by_deadline(web.fetch_timeout), fresh
                )
                return pool.render(fetched, page_limit(web.fetch_timeout), run_limited_by_deadline(web.fetch_timeout))

            pages = _extract_with(fetch_and_render, unique, limit, ctx)
            source = "direct"
    except ImportError as exc:
        if config is not None:
            raise needs_package("web_extract", exc, {"firecrawl": FIRECRAWL_PACKAGE}, "web") from None
        raise needs_package("web_extract", exc, DIRECT_PACKAGES, "web", KEYLESS_HINT) from None
    by_url = dict(zip(unique, pages, strict=True))
    results = [by_url[u] for u in urls]
    return {"results": results, "source": source, "failed": sum("error" in p for p in results)}


def warm_web_extract(ctx: ToolContext) -> None:
    """What a session's first keyless web_extract would wait for, made ahead (Tool.warm): the
    imports, the session's fetcher and its extraction workers (each imports trafilatura)."""
    if ctx.settings.web.extract == "direct" or firecrawl_config_from(ctx.settings) is None:
        import httpx  # noqa: F401

        session_fetcher(ctx).client(ctx.web_policy)  # its TLS context loaded, its pool made
        if not not_installed(DIRECT_PACKAGES):
            render_pool(ctx)


# -- availability (Tool.unavailable): cheap, nothing imported or fetched ------------------------

CONFIGURE_FIRECRAWL = "set FIRECRAWL_API_KEY, or FIRECRAWL_API_URL / web.firecrawl_api_url"


def no_firecrawl_client() -> str | None:
    if not_installed({"firecrawl": FIRECRAWL_PACKAGE}):
        return f"the {FIRECRAWL_PACKAGE} package is not installed (pip install 'herald[web]')"
    return None


def extract_unavailable(settings: Settings) -> str | None:
    """Why web_extract cannot work with these settings, or None: the path it would take (Firecrawl
    when configured, else fetching here) must have its libraries."""
    mode = settings.web.extract
    if mode not in ("auto", "firecrawl", "direct"):
        return f"the setting web.extract must be auto, firecrawl or direct, not {mode!r}"
    config = firecrawl_config_from(settings) if mode != "direct" else None
    if mode == "firecrawl" and config is None:
        return f"web.extract is 'firecrawl' but no Firecrawl is configured ({CONFIGURE_FIRECRAWL})"
    if config is not None:
        return no_firecrawl_client()
    missing = not_installed(DIRECT_PACKAGES)
    if not missing:
        return None
    packages = " and ".join(missing) + (" packages are" if len(missing) > 1 else " package is")
    if mode == "direct":
        return f"the {packages} not installed and web.extract is 'direct' (pip install 'herald[web]')"
    return (
        f"the {packages} not installed and no Firecrawl is configured "
        f"(pip install 'herald[web]', or {CONFIGURE_FIRECRAWL})"
    )


TOOLS = [
    Tool(
        name="web_extract",
        description=(
            "Fetch web pages and return their main content as markdown (navigation and footers "
            "dropped), several at once, with each page's links: absolute URLs in page order, the "
            "page's own navigation marked nav=True, so [l['url'] for l in page['links'] if not l['nav']] "
            "are its content links. A page over char_limit is cut in the middle with a marker "
            "(its full text is in the file named by spill_path). A page that fails has an 'error' "
            "in its result instead of content; the other pages are unaffected."
        ),
        parameters={
            "type": "object",
            "properties": {
                "urls": {
                    "type": ["array", "string"],
                    "items": {"type": "string"},
                    "description": "A URL or a list of URLs (http or https).",
                },
                "char_limit": {
                    "type": ["integer", "null"],
                    "minimum": 200,
                    "description": "Most characters kept per page, counted as UTF-8 bytes "
                    "(default from web.extract_char_limit, 20,000).",
                },
                "fresh": FRESH_PARAMETER,
            },
            "required": ["urls"],
        },
        handler=web_extract,
        returns=WebExtractResult,
        unavailable=extract_unavailable,
        warm=warm_web_extract,
    ),
]
