"""`Fetched`: a page as it arrived, what fetch.py returns, cache.py keeps and render.py reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fetched:
    """A page as it arrived: the URL it was finally read from (after redirects), its media type
    (lower case, no parameters; "" when the server sent none), the charset its Content-Type header
    names, and its bytes."""

    url: str
    content_type: str
    charset: str | None
    body: bytes
