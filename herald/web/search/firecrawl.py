"""Firecrawl's search (v2) through firecrawl-py, as a search provider. Where Firecrawl is comes
from herald/web/firecrawl.py (the same place web_extract uses); the client is made and kept by
the tool layer and handed in. firecrawl-py's errors carry the HTTP status, sorted like the others.
"""

from __future__ import annotations

import os
from typing import Any

from ...config import Settings
from ..firecrawl import FIRECRAWL_CLOUD, firecrawl_config_from, firecrawl_failure
from .base import Endpoint, Hit, Kind, SearchFailure, default_advice, hit, shown_url
from .http import status_kind

NEEDS = "FIRECRAWL_API_KEY (the cloud), or FIRECRAWL_API_URL / web.firecrawl_api_url (a self-hosted Firecrawl)"


def firecrawl_endpoint(settings: Settings) -> Endpoint | None:
    config = firecrawl_config_from(settings)
    if config is None:
        return None
    web = settings.web
    if web.firecrawl_api_key:
        key_from, elsewhere = (
            "the setting web.firecrawl_api_key",
            " (or remove it to use FIRECRAWL_API_KEY from Herald's environment)",
        )
    elif config.api_key:
        key_from, elsewhere = (
            "FIRECRAWL_API_KEY (Herald's environment)",
            " (or in the setting web.firecrawl_api_key, which comes first)",
        )
    else:
        key_from, elsewhere = (
            "",
            "FIRECRAWL_API_KEY in the environment Herald runs in, or the setting web.firecrawl_api_key",
        )
    if web.firecrawl_api_url:
        url_from = "the setting web.firecrawl_api_url (else FIRECRAWL_API_URL)"
    elif os.environ.get("FIRECRAWL_API_URL"):
        url_from = "FIRECRAWL_API_URL (Herald's environment) or the setting web.firecrawl_api_url"
    else:
        url_from = (
            f"that Herald's machine can reach {FIRECRAWL_CLOUD} (or set FIRECRAWL_API_URL / web.firecrawl_api_url)"
        )
    return Endpoint("firecrawl", "Firecrawl", shown_url(config.api_url), base=config.api_url, key=config.api_key,
                    key_from=key_from, key_elsewhere=elsewhere, url_from=url_from)


class FirecrawlSearch:
    max_results: int | None = None

    def __init__(self, endpoint: Endpoint, client: Any) -> None:
        self.endpoint, self._client = endpoint, client  # a firecrawl.Firecrawl

    def search(self, query: str, limit: int, timeout: float) -> list[Hit]:
        try:
            # The search runs at Firecrawl: `timeout` bounds its work there (milliseconds).
            data = self._client.search(query, limit=limit, timeout=max(1, int(timeout * 1000)))
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            kind = status_kind(status) if isinstance(status, int) else Kind.DOWN
            raise SearchFailure(self.endpoint, kind, firecrawl_failure(exc), default_advice(self.endpoint, kind),
                                status if isinstance(status, int) else None) from None
        hits = []
        for item in data.web or []:
            metadata = getattr(item, "metadata", None)
            found = hit(getattr(item, "url", None) or getattr(metadata, "url", None),
                        getattr(item, "title", None) or getattr(metadata, "title", None),
                        getattr(item, "description", None))
            if found:
                hits.append(found)
        return hits[:limit]
