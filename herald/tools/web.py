"""Web tools: `web_search` through Firecrawl, `web_extract` through Firecrawl or fetched here.

Provider: Firecrawl's v2 API through firecrawl-py, configured by FIRECRAWL_API_KEY (the cloud) or
FIRECRAWL_API_URL / `web.firecrawl_api_url` (a self-hosted one), read from Herald's own
environment: tools run in the parent, never in the sandbox with its scrubbed environment.
`web_extract` also works with no provider: pages are fetched with httpx and their main content
turned into markdown by trafilatura (navigation, cookie banners and footers dropped).

Several URLs are fetched at once (up to `web.max_concurrency`); each page is capped at
`char_limit` (head + tail, full text spilled to a file), and a page that fails is reported in its
own result, so one bad URL does not cost the others.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..capture import CappedCapture
from .registry import Tool, ToolContext, ToolError

if TYPE_CHECKING:
    import httpx
    from firecrawl import Firecrawl

FIRECRAWL_CLOUD = "https://api.firecrawl.dev"
MAX_URLS = 50
MAX_DOWNLOAD_BYTES = 10_000_000
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) HeraldAgent/0.1 (+web_extract)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml")
NO_PROVIDER = (
    "web_search needs a search provider and none is configured. Set FIRECRAWL_API_KEY in the "
    "environment Herald runs in (Firecrawl's cloud), or FIRECRAWL_API_URL / the setting "
    "web.firecrawl_api_url for a self-hosted Firecrawl. (web_extract works without one.)"
)
Page = dict[str, Any]


class PageError(Exception):
    """One URL failed; the message goes into that URL's result."""


@dataclass(frozen=True)
class FirecrawlConfig:
    api_url: str
    api_key: str | None


def firecrawl_config(ctx: ToolContext) -> FirecrawlConfig | None:
    """Firecrawl's address and key from settings, else Herald's environment; None: not configured."""
    web = ctx.settings.web
    url = web.firecrawl_api_url or os.environ.get("FIRECRAWL_API_URL", "")
    key = web.firecrawl_api_key or os.environ.get("FIRECRAWL_API_KEY", "")
    if not url and not key:
        return None
    return FirecrawlConfig(url.rstrip("/") or FIRECRAWL_CLOUD, key or None)


def _firecrawl(ctx: ToolContext, config: FirecrawlConfig) -> Firecrawl:
    with ctx.cache_lock:
        cached = ctx.cache.get("web.firecrawl")
        if cached is None or cached[0] != config:
            try:
                from firecrawl import Firecrawl
            except ImportError:
                raise ToolError("Firecrawl's client is not installed: pip install 'herald[web]'.") from None
            client = Firecrawl(api_key=config.api_key, api_url=config.api_url, timeout=ctx.settings.web.fetch_timeout + 5)
            cached = (config, client)
            ctx.cache["web.firecrawl"] = cached
        client_: Firecrawl = cached[1]
        return client_


def _firecrawl_failure(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# -- web_search ---------------------------------------------------------------------------------


def web_search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    query: str = args["query"].strip()
    if not query:
        raise ToolError("web_search: the query is empty. Pass what to search for, e.g. web_search('python 3.13 release date').")
    config = firecrawl_config(ctx)
    if config is None:
        raise ToolError(NO_PROVIDER, "NoSearchProvider")
    client = _firecrawl(ctx, config)
    try:
        data = client.search(query, limit=args["limit"], timeout=int(ctx.settings.web.fetch_timeout * 1000))
    except Exception as exc:
        raise ToolError(
            f"web_search: the search failed at {config.api_url}: {_firecrawl_failure(exc)}. Try again, "
            "or check FIRECRAWL_API_KEY / FIRECRAWL_API_URL.",
            "SearchFailed",
        ) from None
    results = []
    for item in data.web or []:
        url = getattr(item, "url", None) or getattr(getattr(item, "metadata", None), "url", None)
        results.append(
            {
                "url": url,
                "title": getattr(item, "title", None) or getattr(getattr(item, "metadata", None), "title", None) or "",
                "description": getattr(item, "description", None) or "",
            }
        )
    return {"query": query, "results": results}


# -- web_extract --------------------------------------------------------------------------------


def _fetch_direct(client: httpx.Client, url: str) -> tuple[str, str]:
    """(title, markdown) of one page fetched here."""
    import httpx

    try:
        with client.stream("GET", url) as response:
            if response.status_code >= 400:
                raise PageError(f"HTTP {response.status_code} {response.reason_phrase}".strip())
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_DOWNLOAD_BYTES:
                    raise PageError(f"the page is larger than {MAX_DOWNLOAD_BYTES:,} bytes; download it with terminal('curl ...') instead")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            encoding = response.encoding or "utf-8"
            final_url = str(response.url)
    except httpx.TimeoutException:
        raise PageError("timed out (web.fetch_timeout)") from None
    except httpx.HTTPError as exc:
        raise PageError(f"could not fetch it: {exc}") from None
    text = bytes(body).decode(encoding, "replace")
    if kind in HTML_TYPES or (not kind and text.lstrip()[:15].lower().startswith(("<!doctype", "<html"))):
        return _html_to_markdown(text, final_url)
    if kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return "", text
    raise PageError(f"{kind or 'unknown content type'} is not a text page; fetch it with terminal('curl -o FILE URL') instead")


def _html_to_markdown(html: str, url: str) -> tuple[str, str]:
    import trafilatura

    markdown = trafilatura.extract(
        html, url=url, output_format="markdown", include_links=True, include_tables=True,
        include_comments=False, favor_recall=True,
    )
    if not markdown:  # no main content found (a tiny or app-like page): keep all its text
        markdown = trafilatura.html2txt(html)
    metadata = trafilatura.extract_metadata(html, default_url=url)
    title = metadata.title if metadata is not None and metadata.title else ""
    return title, markdown or ""


def _fetch_firecrawl(client: Firecrawl, url: str, timeout: float) -> tuple[str, str]:
    try:
        document = client.scrape(url, formats=["markdown"], only_main_content=True, timeout=int(timeout * 1000))
    except Exception as exc:
        raise PageError(f"Firecrawl could not scrape it: {_firecrawl_failure(exc)}") from None
    metadata = document.metadata
    status = getattr(metadata, "status_code", None)
    if status is not None and status >= 400:
        raise PageError(f"HTTP {status}" + (f": {metadata.error}" if getattr(metadata, "error", None) else ""))
    return (getattr(metadata, "title", None) or ""), document.markdown or ""


def _capped(text: str, limit: int, ctx: ToolContext) -> Page:
    capture = CappedCapture(limit, spill_dir=ctx.spill_dir, spill_name=f"extract-{os.getpid()}-{secrets.token_hex(4)}.md")
    try:
        capture.feed(text.encode("utf-8"))
    finally:
        capture.close()
    page: Page = {"content": capture.text("page"), "chars": len(text)}
    if capture.spill_path is not None:
        page["truncated"] = True
        page["spill_path"] = str(capture.spill_path)
    return page


def _extract_with(fetch: Callable[[str], tuple[str, str]], urls: list[str], limit: int, ctx: ToolContext) -> list[Page]:
    def one(url: str) -> Page:
        if not url.startswith(("http://", "https://")):
            return {"url": url, "error": "not an http(s) URL: pass a full URL such as https://example.com/page"}
        try:
            title, text = fetch(url)
        except PageError as exc:
            return {"url": url, "error": str(exc)}
        except Exception as exc:  # one page's surprise must not cost the others their results
            return {"url": url, "error": f"{type(exc).__name__}: {exc}"}
        return {"url": url, "title": title, **_capped(text, limit, ctx)}

    workers = max(1, min(len(urls), ctx.settings.web.max_concurrency))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="herald-web") as pool:
        return list(pool.map(one, urls))


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
    config = firecrawl_config(ctx) if web.extract != "direct" else None
    if web.extract == "firecrawl" and config is None:
        raise ToolError(
            "web_extract: web.extract is 'firecrawl' but no Firecrawl is configured: set "
            "FIRECRAWL_API_KEY or FIRECRAWL_API_URL / web.firecrawl_api_url, or set web.extract to auto."
        )
    unique = list(dict.fromkeys(urls))
    if config is not None:
        client = _firecrawl(ctx, config)
        pages = _extract_with(lambda u: _fetch_firecrawl(client, u, web.fetch_timeout), unique, limit, ctx)
        source = "firecrawl"
    else:
        import httpx

        headers = {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}
        limits = httpx.Limits(max_connections=max(10, web.max_concurrency))
        with httpx.Client(follow_redirects=True, timeout=web.fetch_timeout, headers=headers, limits=limits) as http:
            pages = _extract_with(lambda u: _fetch_direct(http, u), unique, limit, ctx)
        source = "direct"
    by_url = dict(zip(unique, pages, strict=True))
    results = [by_url[u] for u in urls]
    return {"results": results, "source": source, "failed": sum("error" in p for p in results)}


TOOLS = [
    Tool(
        name="web_search",
        description=(
            "Search the web (Firecrawl). Returns the top results' URLs, titles and descriptions; "
            "read pages with web_extract."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5, "description": "How many results."},
            },
            "required": ["query"],
        },
        handler=web_search,
        returns="{'query': str, 'results': [{'url': str, 'title': str, 'description': str}]}",
    ),
    Tool(
        name="web_extract",
        description=(
            "Fetch web pages and return their main content as markdown (navigation and footers "
            "dropped), several at once. A page over char_limit is cut in the middle with a marker "
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
                    "description": "Most characters kept per page, counted as UTF-8 bytes (default from web.extract_char_limit, 20,000).",
                },
            },
            "required": ["urls"],
        },
        handler=web_extract,
        returns=(
            "{'results': [{'url': str, 'title': str, 'content': str, 'chars': int, 'truncated'?: True, "
            "'spill_path'?: str} or {'url': str, 'error': str}], 'source': 'firecrawl' | 'direct', 'failed': int}"
        ),
    ),
]
