"""web_extract without a provider: a page fetched here with httpx, decoded the way browsers decode
it, and its main content turned into markdown by trafilatura."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

MAX_DOWNLOAD_BYTES = 10_000_000
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) HeraldAgent/0.1 (+web_extract)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml")
# <meta charset="..."> and <meta http-equiv="Content-Type" content="text/html; charset=...">, looked
# for where browsers look: the first 1024 bytes.
META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
META_PRESCAN_BYTES = 1024
WINDOWS_1252_LABELS = frozenset({"iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii"})


class PageError(Exception):
    """One URL failed; the message goes into that URL's result."""


def fetch_direct(client: httpx.Client, url: str) -> tuple[str, str]:
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
