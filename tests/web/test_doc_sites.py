"""web_extract on local mirrors of real generated documentation (Sphinx, pydoc -w, MkDocs; see
tests/fixtures/docsites.py), the way a user reads one: every same-site link taken from the pages
loads (no 404 but those the site itself has), the links are the ones a browser resolves, the
navigation is marked, and the text is clean (no `¶`, no escaped underscores)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urljoin

import pytest

from tests.fixtures.docsites import TEST_SITES, DocSite, built_site, serve

from .conftest import WebSession

MakeWeb = Callable[..., WebSession]
BATCH = 50  # web_extract's limit per call


@pytest.fixture(scope="module", params=TEST_SITES)
def doc_site(request: pytest.FixtureRequest) -> Iterator[DocSite]:
    """Each generated site in turn, served."""
    with serve(built_site(request.param), request.param) as site:
        yield site


def extract_all(session: WebSession, urls: list[str]) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    for start in range(0, len(urls), BATCH):
        reply = session("web_extract", urls=urls[start:start + BATCH])
        assert reply["source"] == "direct"
        pages += reply["results"]
    return pages


class _Anchors(HTMLParser):
    """A second, independent reading of a page's links: the stdlib's parser and urljoin, with
    `<base href>` as browsers apply it; heading anchors (`¶`) and `href="#"` left out."""

    def __init__(self, page_url: str) -> None:
        super().__init__()
        self.base = page_url
        self.page_url = page_url
        self.hrefs: list[str] = []
        self._anchor: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "base" and values.get("href") and self.base == self.page_url:
            self.base = urljoin(self.page_url, values["href"])
        if tag == "a" and "href" in values:
            self._anchor = (values["href"], [])

    def handle_data(self, data: str) -> None:
        if self._anchor is not None:
            self._anchor[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._anchor is not None:
            href, text = self._anchor
            self._anchor = None
            if href.strip() not in ("", "#") and "".join(text).strip() not in ("¶", "#"):
                self.hrefs.append(urljoin(self.base, href.strip()))


def reference_links(site: DocSite, page_url: str) -> set[str]:
    path = page_url.removeprefix(site.url).lstrip("/")
    parser = _Anchors(page_url)
    parser.feed((site.root / path).read_text(encoding="utf-8"))
    return {url for url in parser.hrefs if url.startswith(("http://", "https://"))}


def test_every_same_site_link_loads(make_web: MakeWeb, doc_site: DocSite) -> None:
    session = make_web()
    pages = extract_all(session, doc_site.page_urls())
    assert not [page for page in pages if "error" in page]
    followed = sorted({urldefrag(link["url"])[0] for page in pages for link in page["links"]
                       if link["url"].startswith(doc_site.url + "/")})
    assert len(followed) >= 5
    results = extract_all(session, followed)
    broken = [page["url"] for page in results if "error" in page]
    missing = [url for url in followed if not doc_site.exists(url)]  # what the site itself lacks
    assert sorted(broken) == sorted(missing), [page for page in results if "error" in page][:3]
    if doc_site.name != "pydoc":  # pydoc links to modules it was not asked to write (builtins.html)
        assert not missing
    not_found = [path for path, status in doc_site.requests if status == 404]
    assert all(not doc_site.exists(doc_site.url + path) for path in not_found)


def test_links_are_the_ones_a_browser_follows(make_web: MakeWeb, doc_site: DocSite) -> None:
    session = make_web()
    urls = doc_site.page_urls()
    for url, page in zip(urls, extract_all(session, urls), strict=True):
        got = [link["url"] for link in page["links"]]
        assert len(got) == len(set(got))
        assert set(got) == reference_links(doc_site, url), url


def test_the_seed_page_of_each_site(make_web: MakeWeb, doc_site: DocSite) -> None:
    """The user's report: from the seed page, its content links; each loads."""
    session = make_web()
    (seed,) = extract_all(session, [f"{doc_site.url}/{doc_site.seed}"])
    content = [link["url"] for link in seed["links"] if not link["nav"] and link["url"].startswith(doc_site.url)]
    assert content
    results = extract_all(session, list(dict.fromkeys(urldefrag(u)[0] for u in content)))
    assert not [page for page in results if "error" in page and doc_site.exists(page["url"])]
    for page in [seed, *results]:
        if "error" not in page:
            assert "¶" not in page["title"] + page["content"]
            assert "\\_" not in page["content"]


@pytest.fixture(scope="module")
def sphinx() -> Iterator[DocSite]:
    with serve(built_site("sphinx"), "sphinx") as site:
        yield site


@pytest.fixture(scope="module")
def mkdocs() -> Iterator[DocSite]:
    with serve(built_site("mkdocs"), "mkdocs") as site:
        yield site


@pytest.fixture(scope="module")
def pydoc() -> Iterator[DocSite]:
    with serve(built_site("pydoc"), "pydoc") as site:
        yield site


def test_sphinx_pages_relative_links_fragments_and_sidebar(make_web: MakeWeb, sphinx: DocSite) -> None:
    url = sphinx.url
    install, usage, index = extract_all(make_web(), [f"{url}/guide/install.html", f"{url}/guide/usage.html",
                                                     f"{url}/index.html"])
    assert install["title"] == "Install"
    content = [link["url"] for link in install["links"] if not link["nav"]]
    # Relative to guide/: ../api.html is the root's; a :ref: to another page keeps its fragment.
    assert content == [f"{url}/guide/usage.html", f"{url}/api.html", f"{url}/index.html#sponsors"]
    nav = [link["url"] for link in install["links"] if link["nav"]]
    assert f"{url}/index.html" in nav and f"{url}/_sources/guide/install.rst.txt" in nav  # the sidebar
    assert f"[Usage]({url}/guide/usage.html)" in install["content"]
    assert "Navigation" not in install["content"] and "Page source" not in install["content"]
    # Identifiers stay identifiers.
    assert "`object_hook`" in usage["content"] and "__init__()" in usage["content"]
    # The index's toctree: every page, as content links.
    assert {f"{url}/guide/install.html", f"{url}/guide/usage.html", f"{url}/api.html", f"{url}/changelog.html"} <= {
        link["url"] for link in index["links"] if not link["nav"]}


def test_sphinx_general_index_is_a_hub_that_keeps_its_links(make_web: MakeWeb, sphinx: DocSite) -> None:
    (index,) = extract_all(make_web(), [f"{sphinx.url}/genindex.html"])
    assert index["title"] == "Index"
    target = f"{sphinx.url}/api.html#json.decoder.JSONDecoder.raw_decode"
    assert f"[raw_decode() (json.decoder.JSONDecoder method)]({target})" in index["content"]
    assert {"url": target, "text": "raw_decode() (json.decoder.JSONDecoder method)", "nav": False} in index["links"]
    assert "Navigation" not in index["content"]  # the sidebar is not the page's text


def test_pydoc_pages_have_clean_identifiers(make_web: MakeWeb, pydoc: DocSite) -> None:
    (decoder,) = extract_all(make_web(), [f"{pydoc.url}/json.decoder.html"])
    assert "JSONDecoder" in decoder["content"] and "raw_decode" in decoder["content"]
    assert "__init__" in decoder["content"] and "object_hook" in decoder["content"]
    assert "\\_" not in decoder["content"]
    assert f"{pydoc.url}/json.decoder.html#JSONDecoder" in [link["url"] for link in decoder["links"]]


def test_mkdocs_directory_urls_and_navbar(make_web: MakeWeb, mkdocs: DocSite) -> None:
    url = mkdocs.url
    # Served as a directory: relative links resolve against /guide/install/.
    (install,) = extract_all(make_web(), [f"{url}/guide/install/"])
    assert install["title"] == "Install"
    assert [link["url"] for link in install["links"] if not link["nav"]] == [
        f"{url}/", f"{url}/guide/usage/", f"{url}/api/reference/"]
    assert {link["text"] for link in install["links"] if not link["nav"]} == {"home", "usage", "reference"}
    assert f"[usage]({url}/guide/usage/)" in install["content"]
    assert "search these documents" not in install["content"]  # the search dialog is no content
    assert "https://www.mkdocs.org/" in [link["url"] for link in install["links"] if link["nav"]]
