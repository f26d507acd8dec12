"""A fetched page made text: HTML decoded the way browsers decode it and its main content turned
into markdown by trafilatura; other text types decoded as they are.
"""

from __future__ import annotations

import re

from .errors import PageError
from .fetch import Fetched

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml")
# <meta charset="..."> and <meta http-equiv="Content-Type" content="text/html; charset=...">, looked
# for where browsers look: the first 1024 bytes.
META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
META_PRESCAN_BYTES = 1024
WINDOWS_1252_LABELS = frozenset({"iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii"})


def render(page: Fetched) -> tuple[str, str]:
    """(title, text) of a fetched page; PageError for a type that is not text."""
    kind, charset, data = page.content_type, page.charset, page.body
    if kind in HTML_TYPES or (not kind and data.lstrip()[:15].lower().startswith((b"<!doctype", b"<html"))):
        return _html_to_markdown(_html_decoded(data, charset), page.url)
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
