"""Firecrawl's v2 API through firecrawl-py: where it is (settings, else Herald's environment) and
one page scraped by it. Configured by FIRECRAWL_API_KEY (the cloud) or FIRECRAWL_API_URL /
`web.firecrawl_api_url` (a self-hosted one), read from Herald's own environment: tools run in the
parent, never in the sandbox with its scrubbed environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..keys import herald_environ
from .errors import PageError
from .links import Link
from .render import Rendered

if TYPE_CHECKING:
    from firecrawl import Firecrawl

FIRECRAWL_CLOUD = "https://api.firecrawl.dev"


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


def firecrawl_failure(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def scrape(client: Firecrawl, url: str, timeout: float, fresh: bool = False) -> Rendered:
    """One page through Firecrawl: its main content as markdown and its links (document_page);
    `fresh`: not from Firecrawl's own cache (maxAge 0)."""
    try:
        document = client.scrape(
            url,
            formats=["markdown", "links"],
            only_main_content=True,
            timeout=int(timeout * 1000),
            **({"max_age": 0} if fresh else {}),
        )
    except Exception as exc:
        raise PageError(f"Firecrawl could not scrape it: {firecrawl_failure(exc)}") from None
    return document_page(document, url)


def document_page(document: Any, url: str) -> Rendered:
    """A Firecrawl document (a scrape's, or one page of a crawl) as a page, or PageError for an
    HTTP error status. Firecrawl gives its links' URLs only: no text, none marked navigation."""
    metadata = document.metadata
    status = getattr(metadata, "status_code", None)
    if status is not None and status >= 400:
        raise PageError(f"HTTP {status}" + (f": {metadata.error}" if getattr(metadata, "error", None) else ""))
    links: list[Link] = [{"url": link, "text": "", "nav": False} for link in dict.fromkeys(document.links or [])]
    final = getattr(metadata, "url", None) or url
    return Rendered(final, getattr(metadata, "title", None) or "", document.markdown or "", links)
