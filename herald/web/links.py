"""A page's links as a reader follows them: every href made absolute the way a browser does it
(against the URL the page was finally read from, or its `<base href>`), listed in page order
without repeats, with the page's own navigation (menus, sidebars, headers, footers) marked.

The same parsed tree then goes to the text extraction with its links already absolute, so the
markdown's links and the `links` list agree. Heading anchors (Sphinx's `¶`, MkDocs' permalinks)
are no reader's link: they are left out of the list (and out of the text by render.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypedDict
from urllib.parse import urljoin, urlsplit

if TYPE_CHECKING:
    from lxml.html import HtmlElement


class Link(TypedDict):
    url: str
    text: str
    nav: bool


FOLLOWABLE_SCHEMES = ("http", "https")
# Link text that only marks a heading's own anchor (`<a class="headerlink" href="#x">¶</a>`).
ANCHOR_MARKS = frozenset({"¶", "#", "§", "🔗", "⚓"})
ANCHOR_CLASSES = frozenset({"headerlink", "headeranchor", "anchor", "anchorjs-link", "header-anchor"})
NAV_TAGS = frozenset({"nav", "aside", "dialog"})
PAGE_FRAME_TAGS = frozenset({"header", "footer"})  # the page's banner and footer, not an article's
# Navigation and the page's frame; dialogs (a search box's modal) are no content either.
NAV_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar",
                       "dialog", "alertdialog"})
# A class or id token naming a navigation block: nav, navbar, sphinxsidebar, md-header, breadcrumb ...
NAV_TOKEN = re.compile(
    r"(?:^|[-_])(?:nav|navbar|navigation|menu|menubar|sidebar|sphinxsidebar|sphinxsidebarwrapper|"
    r"breadcrumbs?|footer|header|related|skip|skiplink|topbar|toolbar)(?:[-_]|$)"
)
SPACES = re.compile(r"\s+")


def base_url(tree: HtmlElement, page_url: str) -> str:
    """What the page's relative links resolve against: its first `<base href>` (itself relative
    to the page's URL), else the page's URL."""
    for base in tree.iter("base"):
        href = (base.get("href") or "").strip()
        if href:
            joined: str = urljoin(page_url, href)
            return joined
    return page_url


def is_heading_anchor(anchor: HtmlElement) -> bool:
    """A `¶` / `#` link a heading carries to its own anchor: no reader's link."""
    text = (anchor.text_content() or "").strip()
    if text in ANCHOR_MARKS:
        return True
    classes = set((anchor.get("class") or "").split())
    return bool(classes & ANCHOR_CLASSES) and (anchor.get("href") or "").startswith("#") and not text


def make_absolute(tree: HtmlElement, base: str) -> None:
    """Every `<a href>` rewritten to the absolute URL a browser would follow; `<base>` removed so
    nothing downstream resolves a second time."""
    for anchor in tree.iter("a"):
        href = anchor.get("href")
        if href is None:
            continue
        if href.strip() in ("", "#"):  # a script's button dressed as a link: it goes nowhere
            del anchor.attrib["href"]
            continue
        try:
            anchor.set("href", urljoin(base, href.strip()))
        except ValueError:  # an unparseable URL (a bad IPv6 literal): not a link anyone can follow
            del anchor.attrib["href"]
    for element in list(tree.iter("base")):
        element.drop_tree()


def _navigation_signal(element: HtmlElement) -> str:
    """"declared": the markup says navigation (`<nav>`, `<aside>`, a navigation role); "named": a
    page-level `<header>`/`<footer>` or a class or id such as `navbar`; "" neither."""
    tag = element.tag if isinstance(element.tag, str) else ""
    if tag in NAV_TAGS or (element.get("role") or "").strip().lower() in NAV_ROLES:
        return "declared"
    if tag in PAGE_FRAME_TAGS:
        return "" if any(a.tag in ("article", "main") for a in element.iterancestors()) else "named"
    tokens = f"{element.get('class') or ''} {element.get('id') or ''}".lower().split()
    return "named" if any(NAV_TOKEN.search(token) for token in tokens) else ""


def _holds_content(element: HtmlElement, signal: str) -> bool:
    """The element holds the page's main content (a `<main>`, `<article>`, role=main), or, when
    only its name says navigation, the page's heading: then it is no navigation block."""
    if next(element.iter("main", "article"), None) is not None:
        return True
    if any((e.get("role") or "") == "main" for e in element.iter()):
        return True
    return signal == "named" and next(element.iter("h1"), None) is not None


def navigation_blocks(tree: HtmlElement) -> list[HtmlElement]:
    """The outermost elements that are the page's navigation (menus, sidebars, page header and
    footer), never one holding the main content, whatever its class says."""
    body = tree.find(".//body")
    blocks: list[HtmlElement] = []
    stack = list(body if body is not None else tree)
    while stack:
        element = stack.pop()
        if not isinstance(element.tag, str):
            continue
        signal = _navigation_signal(element)
        if signal and not _holds_content(element, signal):
            blocks.append(element)
            continue  # its descendants are inside it
        stack.extend(element)
    return blocks


def main_region(tree: HtmlElement) -> HtmlElement | None:
    """The element the page declares its main content: `<main>`, role=main, or its only `<article>`."""
    found = next(tree.iter("main"), None)
    if found is not None:
        return found
    found = next((e for e in tree.iter() if (e.get("role") or "") == "main"), None)
    if found is not None:
        return found
    articles = list(tree.iter("article"))
    return articles[0] if len(articles) == 1 else None


def _link_text(anchor: HtmlElement) -> str:
    text = SPACES.sub(" ", anchor.text_content() or "").strip()
    if text:
        return text
    for attribute in ("aria-label", "title"):
        if anchor.get(attribute):
            return SPACES.sub(" ", anchor.get(attribute) or "").strip()
    image = next(anchor.iter("img"), None)
    return SPACES.sub(" ", image.get("alt") or "").strip() if image is not None else ""


def collect_links(tree: HtmlElement, nav_blocks: list[HtmlElement]) -> list[Link]:
    """The tree's http(s) links (already absolute) in page order, one entry per URL. A URL is
    navigation only if every link to it is in a navigation block; its text is the first
    non-empty one of its content links, else of its navigation links."""
    in_nav = set(nav_blocks)
    found: dict[str, Link] = {}
    for anchor in tree.iter("a"):
        url = (anchor.get("href") or "").strip()
        if is_heading_anchor(anchor) or urlsplit(url).scheme.lower() not in FOLLOWABLE_SCHEMES:
            continue
        nav = anchor in in_nav or any(a in in_nav for a in anchor.iterancestors())
        text = _link_text(anchor)
        seen = found.get(url)
        if seen is None:
            found[url] = {"url": url, "text": text, "nav": nav}
        elif text and (not seen["text"] or (seen["nav"] and not nav)):
            seen["text"] = text  # the text a content link gives it says more than a menu's
        if seen is not None and not nav:
            seen["nav"] = False
    return list(found.values())
