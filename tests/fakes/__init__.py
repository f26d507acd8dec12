"""Local servers that speak the wire protocol of clouds unreachable from here (LLM APIs, Modal,
Firecrawl, cloud browsers), driven in tests through the real SDK clients."""
