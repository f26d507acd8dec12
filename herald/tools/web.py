"""Web tools: `web_search` through Firecrawl, `web_extract` through Firecrawl or fetched here.

Provider: Firecrawl's v2 API through firecrawl-py, configured by FIRECRAWL_API_KEY (the cloud) or
FIRECRAWL_API_URL / `web.firecrawl_api_url` (a self-hosted one), read from Herald's own
environment: tools run in the parent, never in the sandbox with its scrubbed environment.
`web_extract` also works with no provider: pages are fetched with httpx and their main content
turned into markdown by trafilatura (navigation, cookie banners and footers dropped).

Several URLs are fetched at once (up to `web.max_concurrency`); each page is capped at
`char_limit` (head + tail, full text spilled to a file), and a page that fails is reported in its
own result, so one bad URL does not cost the others. A missing library is not a page's failure:
it fails the whole call with the pip package to install, and a session whose settings leave a
tool no way to work is told so up front (`Tool.unavailable`) rather than offered a sure failure.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..capture import CappedCapture
from ..config import Settings
from ..keys import herald_environ
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
# <meta charset="..."> and <meta http-equiv="Content-Type" content="text/html; charset=...">, looked
# for where browsers look: the first 1024 bytes.
META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
META_PRESCAN_BYTES = 1024
WINDOWS_1252_LABELS = frozenset({"iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii"})
# The keyless path's modules -> the pip package that provides each. lxml_html_clean is imported
# by justext (under trafilatura) through lxml's `lxml.html.clean` shim; pip < 23.3 drops it when it
# comes only as the extra `lxml[html_clean]`, so herald[web] names it itself.
DIRECT_PACKAGES = {"httpx": "httpx", "trafilatura": "trafilatura", "justext": "justext", "lxml_html_clean": "lxml_html_clean", "lxml": "lxml"}
FIRECRAWL_PACKAGE = "firecrawl-py"
KEYLESS_HINT = ", or set FIRECRAWL_API_KEY / FIRECRAWL_API_URL to extract through Firecrawl"


class PageError(Exception):
    """One URL failed; the message goes into that URL's result."""


@dataclass(frozen=True)
class FirecrawlConfig:
    api_url: str
    api_key: str | None


def firecrawl_config_from(settings: Settings) -> FirecrawlConfig | None:
    """Firecrawl's address and key from settings, else Herald's environment; None: not configured."""
    web = settings.web
    url = web.firecrawl_api_url or os.environ.get("FIRECRAWL_API_URL", "")
    key = web.firecrawl_api_key or herald_environ().get("FIRECRAWL_API_KEY", "")
    if not url and not key:
        return None
    return FirecrawlConfig(url.rstrip("/") or FIRECRAWL_CLOUD, key or None)


def firecrawl_config(ctx: ToolContext) -> FirecrawlConfig | None:
    return firecrawl_config_from(ctx.settings)


# -- missing libraries --------------------------------------------------------------------------


def _not_installed(modules: dict[str, str]) -> list[str]:
    """The pip packages of `modules` that are not installed, found without importing anything
    (importing trafilatura or firecrawl costs up to seconds; this runs when a session starts)."""
    missing = []
    for module, package in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that fails, or a half-imported module
            found = False
        if not found:
            missing.append(package)
    return list(dict.fromkeys(missing))


def _module_of(exc: ImportError, packages: dict[str, str]) -> str | None:
    """Which of `packages`' modules an ImportError is about. lxml's shim raises an ImportError
    with no module name whose message names lxml_html_clean, so the message is read too."""
    module = (exc.name or "").split(".")[0]
    if module in packages:
        return module
    text = str(exc)
    return next((name for name in packages if name in text), None)


def _needs_package(tool: str, exc: ImportError, packages: dict[str, str], extra: str, hint: str = "") -> ToolError:
    """The error for a library that is missing, or too old to have what Herald imports."""
    lines = str(exc).strip().splitlines()
    said = f"Python said: {lines[0] if lines else type(exc).__name__}"
    install = f"pip install 'herald[{extra}]' (then start Herald again){hint}"
    module = _module_of(exc, packages)
    if module is None:
        message = f"{tool} could not import a library it needs: {install}. {said}"
    elif _not_installed({module: packages[module]}):
        message = f"{tool} needs the {packages[module]} package: {install}. {said}"
    else:  # installed, but without what Herald imports from it
        message = f"{tool} needs a newer {packages[module]}: {install.replace('pip install', 'pip install --upgrade')}. {said}"
    return ToolError(message, "MissingPackage")


def _firecrawl(ctx: ToolContext, config: FirecrawlConfig, tool: str) -> Firecrawl:
    with ctx.cache_lock:
        cached = ctx.cache.get("web.firecrawl")
        if cached is None or cached[0] != config:
            try:
                from firecrawl import Firecrawl
            except ImportError as exc:  # absent, or a firecrawl-py without the Firecrawl class (< 3)
                raise _needs_package(tool, exc, {"firecrawl": FIRECRAWL_PACKAGE}, "web") from None
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
    client = _firecrawl(ctx, config, "web_search")
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
            charset = response.charset_encoding  # only what the Content-Type header says
            final_url = str(response.url)
    except httpx.TimeoutException:
        raise PageError("timed out (web.fetch_timeout)") from None
    except httpx.HTTPError as exc:
        raise PageError(f"could not fetch it: {exc}") from None
    data = bytes(body)
    if kind in HTML_TYPES or (not kind and data.lstrip()[:15].lower().startswith((b"<!doctype", b"<html"))):
        return _html_to_markdown(_html_decoded(data, charset), final_url)
    if kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return "", _decoded(data, charset) or data.decode("utf-8", "replace")
    raise PageError(f"{kind or 'unknown content type'} is not a text page; fetch it with terminal('curl -o FILE URL') instead")


def _decoded(data: bytes, charset: str | None) -> str | None:
    """`data` decoded with `charset` (a label from a header or a <meta>), or None when there is
    none or Python does not know it."""
    if not charset:
        return None
    label = charset.strip().strip("\"'").lower()
    # Browsers read these labels as windows-1252 (WHATWG Encoding); latin-1 proper would turn
    # bytes 0x80-0x9F (curly quotes, dashes) into control characters.
    codec = "cp1252" if label in WINDOWS_1252_LABELS else label
    try:
        return data.decode(codec, "replace")
    except LookupError:
        return None


def _html_decoded(data: bytes, header_charset: str | None) -> str | bytes:
    """An HTML page's text, by the charset its Content-Type header gives, else the one its <meta>
    declares (browsers' order); else the bytes, for trafilatura to detect the encoding. Decoding
    as UTF-8 here would turn a windows-1251 or iso-8859-1 page into mojibake, and detection alone
    guesses wrong on short pages, which is why the <meta> is read first."""
    meta = META_CHARSET.search(data[:META_PRESCAN_BYTES])
    for charset in (header_charset, meta.group(1).decode("ascii") if meta else None):
        text = _decoded(data, charset)
        if text is not None:
            return text
    return data


def _html_to_markdown(html: str | bytes, url: str) -> tuple[str, str]:
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
        except ImportError:  # a missing library fails every page alike: the caller says which
            raise
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
    try:
        if config is not None:
            client = _firecrawl(ctx, config, "web_extract")
            pages = _extract_with(lambda u: _fetch_firecrawl(client, u, web.fetch_timeout), unique, limit, ctx)
            source = "firecrawl"
        else:
            # Imported before any fetch, so a broken install is one clear error, not one per page.
            import httpx
            import trafilatura  # noqa: F401  (imports justext and lxml's html cleaner)

            headers = {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}
            limits = httpx.Limits(max_connections=max(10, web.max_concurrency))
            with httpx.Client(follow_redirects=True, timeout=web.fetch_timeout, headers=headers, limits=limits) as http:
                pages = _extract_with(lambda u: _fetch_direct(http, u), unique, limit, ctx)
            source = "direct"
    except ImportError as exc:
        if config is not None:
            raise _needs_package("web_extract", exc, {"firecrawl": FIRECRAWL_PACKAGE}, "web") from None
        raise _needs_package("web_extract", exc, DIRECT_PACKAGES, "web", KEYLESS_HINT) from None
    by_url = dict(zip(unique, pages, strict=True))
    results = [by_url[u] for u in urls]
    return {"results": results, "source": source, "failed": sum("error" in p for p in results)}


# -- availability (Tool.unavailable): cheap, nothing imported or fetched ------------------------

CONFIGURE_FIRECRAWL = "set FIRECRAWL_API_KEY, or FIRECRAWL_API_URL / web.firecrawl_api_url"


def _no_firecrawl_client() -> str | None:
    if _not_installed({"firecrawl": FIRECRAWL_PACKAGE}):
        return f"the {FIRECRAWL_PACKAGE} package is not installed (pip install 'herald[web]')"
    return None


def search_unavailable(settings: Settings) -> str | None:
    """Why web_search cannot work with these settings, or None."""
    if firecrawl_config_from(settings) is None:
        return f"no search provider is configured ({CONFIGURE_FIRECRAWL})"
    return _no_firecrawl_client()


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
        return _no_firecrawl_client()
    missing = _not_installed(DIRECT_PACKAGES)
    if not missing:
        return None
    packages = " and ".join(missing) + (" packages are" if len(missing) > 1 else " package is")
    if mode == "direct":
        return f"the {packages} not installed and web.extract is 'direct' (pip install 'herald[web]')"
    return f"the {packages} not installed and no Firecrawl is configured (pip install 'herald[web]', or {CONFIGURE_FIRECRAWL})"


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
        unavailable=search_unavailable,
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
        unavailable=extract_unavailable,
    ),
]
