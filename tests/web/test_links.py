"""Keyless web_extract's `links`: every URL the one a browser would follow from that page (its
final URL after redirects, its `<base href>`), fragments on their page, in page order without
repeats, the page's navigation marked; hub pages keep their text and their links. Hand-written
pages served by a real HTTP server on 127.0.0.1, each built the way real sites write them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from .conftest import CallTool, extract_one, serving

MakeWeb = Callable[..., CallTool]


def html(body: str, head: str = "<title>Page</title>") -> bytes:
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>".encode()


ARTICLE = "<p>" + " ".join(["The guide explains each step of the install in plain words."] * 4) + "</p>"

PAGES: dict[str, bytes] = {
    # Relative links on a page below the root, and a fragment: resolved against the page.
    "/docs/attrs/index.html": html(
        "<main><article><h1>attrs</h1>" + ARTICLE
        + '<p>Read the <a href="changelog.html">changelog</a>, the <a href="../api/">API</a>, '
        '<a href="#sponsors">our sponsors</a> and <a href="/about">about</a>, '
        '<a href="?page=2">page two</a>, <a href="//cdn.example.org/x.js">the CDN</a>, '
        '<a href="mailto:someone@example.org">mail</a>, <a href="javascript:void(0)">nothing</a>.</p>'
        '<h2 id="sponsors">Sponsors<a class="headerlink" href="#sponsors">¶</a></h2>' + ARTICLE
        + "</article></main>"
    ),
    # <base href> (relative to the page itself) decides where relative links go.
    "/docs/base/page.html": html(
        "<main><article><h1>Based</h1>" + ARTICLE
        + '<p>See the <a href="intro.html">intro</a> for the first steps of the setup, and the '
        '<a href="/root.html">root</a> page for everything else this guide covers.</p><h2>More</h2>' + ARTICLE
        + "</article></main>",
        head='<title>Based</title><base href="../mirror/v2/">',
    ),
    # Moved: the page's relative links are relative to where it ended up.
    "/old/start": b"",
    "/new/place/start.html": html(
        "<main><article><h1>Moved</h1>" + ARTICLE + '<p>Next: <a href="next.html">next</a>.</p></article></main>'
    ),
    # Navigation around content; a link repeated; a link both in the menu and in the text.
    "/site/page.html": html(
        '<header><a href="/">Home</a><nav><a href="/site/a.html">A</a> <a href="/site/b.html">B</a></nav></header>'
        '<div class="sphinxsidebar" role="navigation"><a href="/site/c.html">C</a></div>'
        "<main><article><h1>Page</h1>" + ARTICLE
        + '<p>First <a href="/site/b.html">B again</a>, then <a href="/site/d.html">D</a>, '
        'and <a href="/site/d.html">D twice</a>, and a picture link <a href="/site/e.html"><img alt="E"></a>.</p>'
        "</article></main>"
        '<footer><a href="/legal.html">Legal</a></footer>'
    ),
    # A hub: nothing but a list of links, inside a navigation bar of its own.
    "/hub/index.html": html(
        '<div class="navbar"><a href="/">Home</a> <a href="/blog/">Blog</a></div>'
        "<div><h1>All modules</h1><ul>"
        + "".join(f'<li><a href="mod{i}.html">module_{i}</a></li>' for i in range(12))
        + "</ul></div>",
        head="<title>All modules ¶</title>",
    ),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/old/start":
            self.send_response(302)
            self.send_header("Location", "/new/place/start.html")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = PAGES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serving(_Handler) as url:
        yield url


def extract(make_web: MakeWeb, url: str) -> dict[str, Any]:
    return extract_one(make_web(), url)


def urls_of(page: dict[str, Any]) -> list[str]:
    return [link["url"] for link in page["links"]]


def test_relative_links_resolve_against_the_page_not_the_root(make_web: MakeWeb, site: str) -> None:
    page = extract(make_web, site + "/docs/attrs/index.html")
    assert urls_of(page) == [
        f"{site}/docs/attrs/changelog.html",
        f"{site}/docs/api/",
        f"{site}/docs/attrs/index.html#sponsors",  # a fragment stays on its page
        f"{site}/about",
        f"{site}/docs/attrs/index.html?page=2",
        "http://cdn.example.org/x.js",  # scheme-relative: the page's scheme
    ]  # mailto: and javascript: are nothing to follow; the heading's ¶ is no link
    assert [link["text"] for link in page["links"]][:3] == ["changelog", "API", "our sponsors"]
    # The markdown's links are the same absolute URLs, and carry no heading anchors.
    assert f"[changelog]({site}/docs/attrs/changelog.html)" in page["content"]
    assert f"[our sponsors]({site}/docs/attrs/index.html#sponsors)" in page["content"]
    assert "¶" not in page["content"] and "Sponsors" in page["content"]


def test_base_href_decides_where_relative_links_go(make_web: MakeWeb, site: str) -> None:
    page = extract(make_web, site + "/docs/base/page.html")
    assert urls_of(page) == [f"{site}/docs/mirror/v2/intro.html", f"{site}/root.html"]
    assert f"[intro]({site}/docs/mirror/v2/intro.html)" in page["content"]


def test_links_resolve_against_the_final_url_after_redirects(make_web: MakeWeb, site: str) -> None:
    page = extract(make_web, site + "/old/start")
    assert page["url"] == site + "/old/start"
    assert page["final_url"] == site + "/new/place/start.html"
    assert urls_of(page) == [f"{site}/new/place/next.html"]


def test_links_are_unique_in_page_order_with_navigation_marked(make_web: MakeWeb, site: str) -> None:
    page = extract(make_web, site + "/site/page.html")
    assert page["links"] == [
        {"url": f"{site}/", "text": "Home", "nav": True},
        {"url": f"{site}/site/a.html", "text": "A", "nav": True},
        # In the menu and in the text: a content link, with the text's words.
        {"url": f"{site}/site/b.html", "text": "B again", "nav": False},
        {"url": f"{site}/site/c.html", "text": "C", "nav": True},
        {"url": f"{site}/site/d.html", "text": "D", "nav": False},  # the first text of two
        {"url": f"{site}/site/e.html", "text": "E", "nav": False},  # an image link: its alt text
        {"url": f"{site}/legal.html", "text": "Legal", "nav": True},
    ]
    content_links = [link["url"] for link in page["links"] if not link["nav"]]
    assert content_links == [f"{site}/site/b.html", f"{site}/site/d.html", f"{site}/site/e.html"]
    assert "Legal" not in page["content"] and "Home" not in page["content"]


def test_a_hub_page_keeps_its_text_and_links_but_not_its_menu(make_web: MakeWeb, site: str) -> None:
    page = extract(make_web, site + "/hub/index.html")
    assert page["title"] == "All modules"  # no heading mark left in the title
    content_links = [link for link in page["links"] if not link["nav"]]
    assert [link["url"] for link in content_links] == [f"{site}/hub/mod{i}.html" for i in range(12)]
    assert [link["text"] for link in content_links] == [f"module_{i}" for i in range(12)]
    for i in range(12):
        assert f"[module_{i}]({site}/hub/mod{i}.html)" in page["content"]  # no escaped underscores
    assert "All modules" in page["content"]
    assert "Blog" not in page["content"]
    assert [link["url"] for link in page["links"] if link["nav"]] == [f"{site}/", f"{site}/blog/"]
