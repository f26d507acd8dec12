"""Which search provider web_search uses: `web.search_provider`, or with "auto" the first one
configured in this order:

1. searxng   — `web.searxng_url`: only ever set for searching, free per query, queries stay private
2. firecrawl — FIRECRAWL_API_KEY / FIRECRAWL_API_URL / `web.firecrawl_api_*` (today's behaviour
               for anyone who had only Firecrawl)
3. brave     — BRAVE_API_KEY or BRAVE_SEARCH_API_KEY / `web.brave_api_key`
4. tavily    — TAVILY_API_KEY / `web.tavily_api_key`
5. exa       — EXA_API_KEY / `web.exa_api_key`

Nothing is contacted to decide: a provider is configured when its address or key is set.
"""

from __future__ import annotations

from collections.abc import Callable

from ...config import SEARCH_PROVIDERS, Settings
from . import brave, exa, firecrawl, searxng, tavily
from .base import Endpoint

AUTO_ORDER = SEARCH_PROVIDERS[1:]
# name -> (its endpoint from settings or None, what to set to configure it)
PROVIDERS: dict[str, tuple[Callable[[Settings], Endpoint | None], str]] = {
    "searxng": (searxng.searxng_endpoint, searxng.NEEDS),
    "firecrawl": (firecrawl.firecrawl_endpoint, firecrawl.NEEDS),
    "brave": (brave.brave_endpoint, brave.NEEDS),
    "tavily": (tavily.tavily_endpoint, tavily.NEEDS),
    "exa": (exa.exa_endpoint, exa.NEEDS),
}
assert tuple(PROVIDERS) == AUTO_ORDER, "every provider the setting names has a module here, in auto order"


class NoSearchProvider(Exception):
    """Nothing usable is configured (or the setting names something unknown); the message says
    what to set."""


def configured(settings: Settings) -> list[Endpoint]:
    """Every configured provider, in auto order."""
    found = (endpoint(settings) for endpoint, _ in PROVIDERS.values())
    return [e for e in found if e is not None]


def chosen(settings: Settings) -> Endpoint:
    """The provider web_search uses with these settings; NoSearchProvider saying what to set."""
    name = settings.web.search_provider
    if name == "auto":
        for endpoint, _ in PROVIDERS.values():
            found = endpoint(settings)
            if found is not None:
                return found
        options = "; ".join(f"{provider}: {needs}" for provider, (_, needs) in PROVIDERS.items())
        raise NoSearchProvider(
            f"no search provider is configured. Set one of these (keys in the environment Herald runs "
            f"in, or in its settings): {options}. (web_extract works without one.)")
    if name not in PROVIDERS:
        raise NoSearchProvider(
            f"the setting web.search_provider must be one of {', '.join(SEARCH_PROVIDERS)}, not {name!r}"
        )
    endpoint, needs = PROVIDERS[name]
    found = endpoint(settings)
    if found is None:
        raise NoSearchProvider(f"web.search_provider is {name!r} but it is not configured: set {needs}, "
                               "or set web.search_provider to auto")
    return found


def describe(settings: Settings) -> tuple[bool | None, str]:
    """For `herald doctor`: (True, the provider in force and what else is configured) or (None,
    why web_search is off). No provider is contacted (a search costs credits)."""
    try:
        endpoint = chosen(settings)
    except NoSearchProvider as exc:
        return None, f"web_search is off: {exc}"
    how = "auto: the first configured" if settings.web.search_provider == "auto" else "web.search_provider"
    key = f", key from {endpoint.key_from}" if endpoint.key_from else ""
    others = [e.provider for e in configured(settings) if e.provider != endpoint.provider]
    also = f"; also configured: {', '.join(others)}" if others else ""
    return True, f"web_search through {endpoint.title} at {endpoint.url} ({how}{key}){also}"
