"""web_search's providers behind one interface (base.py `SearchProvider`): SearXNG, Firecrawl,
Brave Search, Tavily and Exa, one module each; choose.py picks the one in force. HTTP providers
share http.py (one JSON request, its failures sorted into what to do).
"""

from .base import Endpoint, Hit, Kind, SearchFailure, SearchProvider
from .choose import AUTO_ORDER, NoSearchProvider, chosen, configured, describe

__all__ = ["AUTO_ORDER", "Endpoint", "Hit", "Kind", "NoSearchProvider", "SearchFailure", "SearchProvider",
           "chosen", "configured", "describe"]
