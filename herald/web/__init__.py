"""The web stack under the web tools: fetching pages here (fetch.py, through webguard's checked
connections), turning a fetched page into text (render.py) and Firecrawl's client (firecrawl.py).
It knows nothing of tools or sessions: herald/tools/web*.py hold the tools and their caches.
"""
