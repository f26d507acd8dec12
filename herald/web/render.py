"""A fetched page made text: HTML decoded the way browsers decode it, its links made absolute
and listed (links.py), and its main content turned into markdown by trafilatura; a page with no
main content (a hub: a list of links) keeps all its text but the navigation, links included.
Other text types are decoded as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import PageError
from .links import (
    ANCHOR_MARKS,
    Link,
    base_url,
    collect_links,
    is_heading_anchor,
    main_region,
    make_absolute,
    navigation_blocks,
)
from .page import Fetched

if TYPE_CHECKING:
    from lxml.html import HtmlElement

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml")
# <meta charset="..."> and <meta http-equiv="Content-Type" content="text/html; charset=...">, looked
# for where browsers look: the first 1024 bytes.
META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
META_PRESCAN_BYTES = 1024
WINDOWS_1252_LABELS = frozenset(
    {"iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii"}
)


@dataclass(frozen=True)
class Rendered:
    """A page as text: its title, its content (markdown for HTML), and for HTML its links (every
    one absolute, in page order, navigation marked); None for other text types."""

    url: str  # where it was read from, after redirects
    title: str
    text: str
    links: list[Link] | None = None


def render(page: Fetched) -> Rendered:
    """A fetched page as text; PageError for a type that is not text."""
    kind, charset, data = page.content_type, page.charset, page.body
    if kind in HTML_TYPES or (not kind and data.lstrip()[:15].lower().startswith((b"<!doctype", b"<html"))):
        return _html_to_markdown(_html_decoded(data, charset), page.url)
    if kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return Rendered(page.url, "", _decoded(data, charset) or data.decode("utf-8", "replace"))
    raise PageError(
        f"{kind or 'unknown content type'} is not a text page; fetch it with terminal('curl -o FILE URL') instead"
    )


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


def _html_to_markdown(html: str | bytes, url: str) -> Rendered:
    import trafilatura
    from trafilatura.utils import load_html

    if not html.strip():
        return Rendered(url, "", "", [])
    tree = load_html(html)  # decodes bytes the way trafilatura does (detection) when no charset was declared
    if tree is None:  # lxml failed, and trafilatura says nothing of why: out of memory, or not HTML at all
        raise PageError("its HTML could not be parsed; fetch it with terminal('curl -o FILE URL') and read it as text")
    make_absolute(tree, base_url(tree, url))
    navigation = navigation_blocks(tree)
    links = collect_links(tree, navigation)
    title = clean_text(_title(tree, url))
    for block in navigation:  # so that neither trafilatura nor the fallback keeps a menu
        block.drop_tree()
    markdown = trafilatura.extract(
        tree, url=url, output_format="markdown", include_links=True, include_tables=True,
        include_comments=False, favor_recall=True,
    )
    main = main_region(tree)
    if not markdown or _lost_links(markdown, links, 1 if main is not None else HUB_MIN_LINKS):
        # No main content found (a hub page: a list of links), or trafilatura flattened a short
        # page and dropped its links: all the text of the page's main region (else of the page
        # without its navigation), links kept.
        markdown = plain_markdown(main if main is not None else tree)
    return Rendered(url, title, clean_text(markdown or ""), links)


def _title(tree: HtmlElement, url: str) -> str:
    """The page's title as trafilatura's metadata finds it (meta tags, JSON-LD, then <h1> and
    <title>), without the rest of its metadata: dates and authors cost as much as the text."""
    try:
        from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    except ImportError:  # a trafilatura that moved them: the whole metadata, slower
        import trafilatura

        metadata = trafilatura.extract_metadata(tree, default_url=url)
        return (metadata.title if metadata is not None else "") or ""
    metadata = examine_meta(tree)
    if not metadata.title:
        try:
            metadata = extract_meta_json(tree, metadata)
        except Exception:  # trafilatura's own JSON-LD parsing fails on some pages; it logs and goes on too
            pass
    return metadata.title or extract_title(tree) or ""


HUB_MIN_LINKS = 5
MARKDOWN_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")


def _lost_links(markdown: str, links: list[Link], at_least: int) -> bool:
    """trafilatura's text keeps under a third of the page's content links (when it has at least
    `at_least`): on a page that is a list of links, what the page is for."""
    content = [link["url"] for link in links if not link["nav"]]
    if len(content) < at_least:
        return False
    targets = set(MARKDOWN_LINK_TARGET.findall(markdown))
    kept = sum(url in targets for url in content)
    return kept * 3 < len(content)


# trafilatura escapes every underscore in its markdown (`\_\_init\_\_`); identifiers read wrong.
ESCAPED_UNDERSCORE = re.compile(r"\\_")
# A heading's own anchor as trafilatura writes it (`# Title[¶](https://...#title)`), or a bare `¶`.
ANCHOR_MARK_ALTERNATIVES = "|".join(re.escape(mark) for mark in sorted(ANCHOR_MARKS))
HEADING_ANCHOR = re.compile(rf"\[(?:{ANCHOR_MARK_ALTERNATIVES})\]\([^)\s]*\)|[ \t]*¶")


def clean_text(text: str) -> str:
    """No heading anchors, no escaped underscores inside identifiers."""
    return HEADING_ANCHOR.sub("", ESCAPED_UNDERSCORE.sub("_", text)).strip()


BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
    "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "th", "thead", "tr", "ul",
})
SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object", "select"})
INLINE_SPACES = re.compile(r"[ \t\r\f\v]+")


def plain_markdown(tree: HtmlElement) -> str:
    """All of a page's text as markdown, links kept (`[text](url)`), headings and list items
    marked; for pages trafilatura finds no main content in."""
    from lxml import etree

    parts: list[str] = []
    walker = etree.iterwalk(tree, events=("start", "end"))
    skipping: HtmlElement | None = None
    for event, element in walker:
        tag = element.tag if isinstance(element.tag, str) else ""
        if skipping is not None:
            if event == "end" and element is skipping:
                skipping = None
                parts.append(element.tail or "")
            continue
        if event == "start":
            if tag in SKIPPED_TAGS:
                skipping = element
            if tag in SKIPPED_TAGS or not tag:  # a comment or processing instruction: its tail at its end
                continue
            if tag in BLOCK_TAGS:
                parts.append("\n")
            if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
                parts.append("#" * int(tag[1]) + " ")
            elif tag == "li":
                parts.append("- ")
            elif tag == "a" and is_heading_anchor(element):
                skipping = element
                continue
            elif tag == "a" and element.get("href"):
                parts.append("[")
            parts.append(element.text or "")
        else:
            if tag == "a" and element.get("href"):
                parts.append(f"]({element.get('href')})")
            if tag in BLOCK_TAGS:
                parts.append("\n")
            parts.append(element.tail or "")
    lines = (INLINE_SPACES.sub(" ", line).strip() for line in "".join(parts).splitlines())
    kept = [line for line in lines if line and line != "-" and not re.fullmatch(r"#+", line)]
    # One line per block; a blank line before each heading.
    return "\n".join(("\n" + line) if line.startswith("#") else line for line in kept).strip()


WARM_PAGE = Fetched(
    "http://localhost/warm/index.html", "text/html", "utf-8",
    b"<!doctype html><html><head><title>Warm</title></head><body><nav><a href='/'>Home</a></nav><main><article>"
    b"<h1>Warm</h1><p>" + b"A paragraph that makes the extractor load what it loads lazily. " * 8
    + b"<a href='next.html'>next</a></p></article></main></body></html>",
)


def warm() -> None:
    """Import the extraction libraries and run them once (their lazy tables and caches loaded)."""
    render(WARM_PAGE)
