"""`web_search` through Firecrawl's search (see herald/web/firecrawl.py for where it is)."""

from __future__ import annotations

from typing import Any

from ..config import Settings
from ..deadlines import check_deadline, time_left
from ..web.firecrawl import firecrawl_config_from, firecrawl_failure
from .registry import Tool, ToolContext, ToolError
from .web import CONFIGURE_FIRECRAWL, firecrawl_client, no_firecrawl_client

NO_PROVIDER = (
    "web_search needs a search provider and none is configured. Set FIRECRAWL_API_KEY in the "
    "environment Herald runs in (Firecrawl's cloud), or FIRECRAWL_API_URL / the setting "
    "web.firecrawl_api_url for a self-hosted Firecrawl. (web_extract works without one.)"
)


def web_search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    query: str = args["query"].strip()
    if not query:
        raise ToolError("web_search: the query is empty. Pass what to search for, e.g. web_search('python 3.13 release date').")
    config = firecrawl_config_from(ctx.settings)
    if config is None:
        raise ToolError(NO_PROVIDER, "NoSearchProvider")
    client = firecrawl_client(ctx, config, "web_search")
    check_deadline("web_search")
    # The search runs at Firecrawl: this bounds its work there, not the client's wait for the answer.
    left = time_left(ctx.settings.web.fetch_timeout) or 0.001
    try:
        data = client.search(query, limit=args["limit"], timeout=max(1, int(left * 1000)))
    except Exception as exc:
        raise ToolError(
            f"web_search: the search failed at {config.api_url}: {firecrawl_failure(exc)}. Try again, "
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



def search_unavailable(settings: Settings) -> str | None:
    """Why web_search cannot work with these settings, or None."""
    if firecrawl_config_from(settings) is None:
        return f"no search provider is configured ({CONFIGURE_FIRECRAWL})"
    return no_firecrawl_client()


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
]
